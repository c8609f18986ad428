// Custom reductions, memory, buffer and window registration, and NCCL's device communicators.
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "shim.hpp"
#include "shim_env.hpp"

#if defined(LOOM_HAVE_CUDA)
#include <cuda_runtime_api.h>
#endif

using namespace loom::nccl_shim;

namespace {

// Memory of ncclMemAlloc: host memory in host mode, CUDA memory where Loom runs CUDA, else the
// real NCCL's. The same choice for the life of the process (it follows the environment).
enum class Allocator { kHost, kCuda, kReal };
Allocator allocator() {
  if (hostMode()) return Allocator::kHost;
  if (wholeFallback(nullptr)) return Allocator::kReal;
  return Allocator::kCuda;
}

}  // namespace

// The device API's types where nccl.h's release declares them (2.32's nccl_device/host.h); the
// same C ABI (pointers) before.
#if NCCL_VERSION_CODE >= NCCL_VERSION(2, 32, 0)
using DevCommRequirements = ncclDevCommRequirements_t;
using DevComm = ncclDevComm_t;
#else
using DevCommRequirements = void;
using DevComm = void;
#endif

namespace {

Registration* checkRegistration(void* handle) {
  auto* r = static_cast<Registration*>(handle);
  return r != nullptr && r->magic == Registration::kMagic ? r : nullptr;
}

}  // namespace

extern "C" {

ncclResult_t ncclRedOpCreatePreMulSum(ncclRedOp_t* op, void* scalar, ncclDataType_t datatype,
                                      ncclScalarResidence_t residence, ncclComm_t comm) {
  const Entry entry = Entry::kRedOpCreatePreMulSum;
  ncclResult_t error = ncclSuccess;
  ncclComm* c = checkComm(entry, comm, &error);
  if (c == nullptr) return error;
  if (op == nullptr || scalar == nullptr)
    return fail(entry, ncclInvalidArgument, "op and scalar must not be NULL");
  if (static_cast<int>(datatype) < 0 || datatype >= ncclNumTypes)
    return fail(entry, ncclInvalidArgument,
                "datatype " + std::to_string(datatype) + " is not valid");
  if (residence != ncclScalarHostImmediate && residence != ncclScalarDevice)
    return fail(entry, ncclInvalidArgument,
                "residence " + std::to_string(residence) + " is not valid");
  PreMulSum made;
  made.live = true;
  made.type = datatype;
  made.residence = residence;
  if (residence == ncclScalarHostImmediate)
    std::memcpy(made.value.data(), scalar, typeBytes(datatype));
  else
    made.scalar = scalar;
  // The real NCCL's own op, where a call falls back, is made for that call from this definition
  // (collectives.cpp): the caller may destroy this op as soon as its last call returned, before
  // a group around it ends.
  count(entry, Route::kLoom);
  std::lock_guard<std::mutex> lock(c->mutex);
  size_t index = 0;
  while (index < c->preMulSums.size() && c->preMulSums[index].live) ++index;
  if (index == c->preMulSums.size()) c->preMulSums.emplace_back();
  c->preMulSums[index] = made;
  *op = static_cast<ncclRedOp_t>(ncclNumOps + index);
  return ncclSuccess;
}

ncclResult_t ncclRedOpDestroy(ncclRedOp_t op, ncclComm_t comm) {
  const Entry entry = Entry::kRedOpDestroy;
  ncclResult_t error = ncclSuccess;
  ncclComm* c = checkComm(entry, comm, &error);
  if (c == nullptr) return error;
  std::lock_guard<std::mutex> lock(c->mutex);
  size_t index = static_cast<size_t>(op) - ncclNumOps;
  if (static_cast<int>(op) < ncclNumOps || index >= c->preMulSums.size() ||
      !c->preMulSums[index].live)
    return fail(entry, ncclInvalidArgument,
                "op " + std::to_string(op) + " was not made by ncclRedOpCreatePreMulSum on comm");
  count(entry, Route::kLoom);
  c->preMulSums[index] = PreMulSum{};
  return ncclSuccess;
}

ncclResult_t ncclMemAlloc(void** ptr, size_t size) {
  const Entry entry = Entry::kMemAlloc;
  if (ptr == nullptr) return fail(entry, ncclInvalidArgument, "ptr is NULL");
  *ptr = nullptr;
  if (size == 0) return ncclSuccess;
  switch (allocator()) {
    case Allocator::kHost: {
      count(entry, Route::kLoom);
      // NCCL's allocations are granularity-aligned; a page here.
      size_t rounded = (size + 4095) / 4096 * 4096;
      *ptr = std::aligned_alloc(4096, rounded);
      if (*ptr == nullptr) return fail(entry, ncclSystemError, "out of host memory");
      return ncclSuccess;
    }
    case Allocator::kCuda: {
#if defined(LOOM_HAVE_CUDA)
      count(entry, Route::kLoom);
      cudaError_t err = cudaMalloc(ptr, size);
      if (err != cudaSuccess) {
        *ptr = nullptr;
        return fail(entry, ncclUnhandledCudaError,
                    std::string("cudaMalloc: ") + cudaGetErrorString(err));
      }
      return ncclSuccess;
#else
      break;
#endif
    }
    case Allocator::kReal:
      break;
  }
  std::string why;
  const RealNccl* lib = realNccl(&why);
  if (lib == nullptr || lib->MemAlloc == nullptr)
    return fail(entry, ncclInvalidUsage, "CUDA memory needs the real NCCL here: " + why);
  count(entry, Route::kNccl);
  return fromReal(entry, *lib, nullptr, lib->MemAlloc(ptr, size));
}

ncclResult_t ncclMemFree(void* ptr) {
  const Entry entry = Entry::kMemFree;
  if (ptr == nullptr) return ncclSuccess;
  switch (allocator()) {
    case Allocator::kHost:
      count(entry, Route::kLoom);
      std::free(ptr);
      return ncclSuccess;
    case Allocator::kCuda: {
#if defined(LOOM_HAVE_CUDA)
      count(entry, Route::kLoom);
      cudaError_t err = cudaFree(ptr);
      if (err != cudaSuccess)
        return fail(entry, ncclUnhandledCudaError,
                    std::string("cudaFree: ") + cudaGetErrorString(err));
      return ncclSuccess;
#else
      break;
#endif
    }
    case Allocator::kReal:
      break;
  }
  const RealNccl* lib = realNccl(nullptr);
  if (lib == nullptr || lib->MemFree == nullptr)
    return fail(entry, ncclInvalidUsage, "no real NCCL to free memory it did not allocate");
  count(entry, Route::kNccl);
  return fromReal(entry, *lib, nullptr, lib->MemFree(ptr));
}

// Registration is an optimization hint in NCCL (collectives accept any buffer). On a Loom
// communicator it is Loom's (loomCommRegister): calls whose buffers every rank registered run
// zero-copy where Loom can. Memory Loom cannot share between processes (cudaMallocAsync pools,
// cuMem memory without file-descriptor handles) stays unregistered and the call succeeds, as
// NCCL's does: programs register every
// buffer on every rank (PyTorch's allocator hook), so one allocator leaves every rank's buffers
// unregistered alike. A communicator running wholly on the real NCCL registers there.
ncclResult_t ncclCommRegister(const ncclComm_t comm, void* buff, size_t size, void** handle) {
  const Entry entry = Entry::kCommRegister;
  ncclResult_t error = ncclSuccess;
  ncclComm* c = checkReady(entry, comm, &error);
  if (c == nullptr) return error;
  if (handle == nullptr) return fail(entry, ncclInvalidArgument, "handle is NULL");
  if (buff == nullptr && size > 0) return fail(entry, ncclInvalidArgument, "buff is NULL");
  auto* r = new Registration;
  r->buffer = buff;
  r->bytes = size;
  if (c->loom == nullptr) {
    const RealNccl* lib = realNccl(nullptr);
    count(entry, Route::kNccl);
    ncclResult_t result =
        fromReal(entry, *lib, c->real,
                 lib->CommRegister(reinterpret_cast<ncclComm_t>(c->real), buff, size, &r->real));
    if (result != ncclSuccess) {
      delete r;
      return result;
    }
  } else {
    count(entry, Route::kLoom);
    const loomResult_t registered = loomCommRegister(c->loom, buff, size, &r->loomRegistration);
    // Memory Loom cannot share, or this rank's registrations at their limit.
    if (registered == loomInvalidArgument || registered == loomInvalidUsage) {
      if (env::infoEnabled())
        std::fprintf(stderr, "loom-nccl INFO ncclCommRegister: %s; the buffer stays unregistered\n",
                     loomGetLastError(c->loom));
      r->loomRegistration = nullptr;
    } else if (registered != loomSuccess) {
      delete r;
      return fromLoom(entry, registered);
    }
  }
  *handle = r;
  return ncclSuccess;
}

ncclResult_t ncclCommDeregister(const ncclComm_t comm, void* handle) {
  const Entry entry = Entry::kCommDeregister;
  ncclResult_t error = ncclSuccess;
  ncclComm* c = checkReady(entry, comm, &error);
  if (c == nullptr) return error;
  Registration* r = checkRegistration(handle);
  if (r == nullptr) return fail(entry, ncclInvalidArgument, "handle is not a registration");
  ncclResult_t result = ncclSuccess;
  if (r->real != nullptr && c->real != nullptr) {
    const RealNccl* lib = realNccl(nullptr);
    count(entry, Route::kNccl);
    result = fromReal(entry, *lib, c->real,
                      lib->CommDeregister(reinterpret_cast<ncclComm_t>(c->real), r->real));
  } else {
    count(entry, Route::kLoom);
    if (r->loomRegistration != nullptr)
      result = fromLoom(entry, loomCommDeregister(c->loom, r->loomRegistration));
  }
  r->magic = 0;
  delete r;
  return result;
}

// Windows (NCCL 2.27+): collective registration for NCCL's symmetric kernels. On a Loom
// communicator it is Loom's window (loomCommWindowRegister, NCCL's flags are Loom's): calls on
// NCCL_WIN_COLL_SYMMETRIC windows read and write the peers' buffers directly where the GPUs can.
ncclResult_t ncclCommWindowRegister(ncclComm_t comm, void* buff, size_t size, ncclWindow_t* win,
                                    int winFlags) {
  const Entry entry = Entry::kCommWindowRegister;
  ncclResult_t error = ncclSuccess;
  ncclComm* c = checkReady(entry, comm, &error);
  if (c == nullptr) return error;
  if (win == nullptr) return fail(entry, ncclInvalidArgument, "win is NULL");
  if (buff == nullptr && size > 0) return fail(entry, ncclInvalidArgument, "buff is NULL");
  auto* r = new Registration;
  r->buffer = buff;
  r->bytes = size;
  r->rank = c->rank;
  if (c->loom == nullptr) {
    const RealNccl* lib = realNccl(nullptr);
    count(entry, Route::kNccl);
    ncclWindow_t real = nullptr;
    ncclResult_t result = fromReal(entry, *lib, c->real,
                                   lib->CommWindowRegister(reinterpret_cast<ncclComm_t>(c->real),
                                                           buff, size, &real, winFlags));
    if (result != ncclSuccess) {
      delete r;
      return result;
    }
    r->real = real;
  } else {
    static_assert(NCCL_WIN_COLL_SYMMETRIC == LOOM_WIN_COLL_SYMMETRIC);
    count(entry, Route::kLoom);
    // Collective: every rank registers together. Inside a group it runs at the group's end, each
    // communicator's on a thread of its own (nccl-tests registers every GPU's buffers from one
    // thread in one group); the handle is valid at once, its window there after ncclGroupEnd.
    loomComm_t loom = c->loom;
    const int flags = winFlags & NCCL_WIN_COLL_SYMMETRIC;
    ncclResult_t result = submitCollectiveCall(entry, c, [=]() {
      return fromLoom(entry, loomCommWindowRegister(loom, buff, size, &r->window, flags));
    });
    if (result != ncclSuccess) {
      delete r;
      return result;
    }
  }
  *win = reinterpret_cast<ncclWindow_t>(r);
  return ncclSuccess;
}

ncclResult_t ncclCommWindowDeregister(ncclComm_t comm, ncclWindow_t win) {
  const Entry entry = Entry::kCommWindowDeregister;
  ncclResult_t error = ncclSuccess;
  ncclComm* c = checkReady(entry, comm, &error);
  if (c == nullptr) return error;
  Registration* r = checkRegistration(win);
  if (r == nullptr) return fail(entry, ncclInvalidArgument, "win is not a window of this library");
  ncclResult_t result = ncclSuccess;
  if (r->real != nullptr && c->real != nullptr) {
    const RealNccl* lib = realNccl(nullptr);
    count(entry, Route::kNccl);
    result = fromReal(entry, *lib, c->real,
                      lib->CommWindowDeregister(reinterpret_cast<ncclComm_t>(c->real),
                                                static_cast<ncclWindow_t>(r->real)));
  } else {
    // Collective on Loom (no rank unmaps a part before every peer is done with it): inside a
    // group at the group's end, each communicator's on a thread of its own, as registration.
    count(entry, Route::kLoom);
    loomComm_t loom = c->loom;
    result = submitCollectiveCall(entry, c, [=]() {
      ncclResult_t done = ncclSuccess;
      if (r->window != nullptr) done = fromLoom(entry, loomCommWindowDeregister(loom, r->window));
      r->magic = 0;
      delete r;
      return done;
    });
    return result;
  }
  r->magic = 0;
  delete r;
  return result;
}

// NCCL's device API (nccl_device.h): kernels that reach peers through an ncclDevComm. Loom has
// no device API, so these run on the real NCCL's communicator of comm (made on first need).
__attribute__((visibility("default"))) ncclResult_t ncclDevCommCreate(
    ncclComm_t comm, const DevCommRequirements* requirements, DevComm* devComm) {
  const Entry entry = Entry::kDevCommCreate;
  ncclResult_t error = ncclSuccess;
  ncclComm* c = checkReady(entry, comm, &error);
  if (c == nullptr) return error;
  const RealNccl* lib = realNccl(nullptr);
  if (c->loom != nullptr) {
    ncclResult_t r = ensureReal(entry, c, "NCCL's device API (Loom has none)", &lib);
    if (r != ncclSuccess) return r;
  }
  if (lib->DevCommCreate == nullptr)
    return fail(entry, ncclInvalidUsage, lib->path + " has no device API (ncclDevCommCreate)");
  count(entry, Route::kNccl);
  return fromReal(entry, *lib, c->real,
                  lib->DevCommCreate(reinterpret_cast<ncclComm_t>(c->real), requirements, devComm));
}

__attribute__((visibility("default"))) ncclResult_t ncclDevCommDestroy(ncclComm_t comm,
                                                                       const DevComm* devComm) {
  const Entry entry = Entry::kDevCommDestroy;
  ncclResult_t error = ncclSuccess;
  ncclComm* c = checkReady(entry, comm, &error);
  if (c == nullptr) return error;
  const RealNccl* lib = realNccl(nullptr);
  if (c->real == nullptr || lib == nullptr || lib->DevCommDestroy == nullptr)
    return fail(entry, ncclInvalidUsage, "no device communicator was made on comm");
  count(entry, Route::kNccl);
  return fromReal(entry, *lib, c->real,
                  lib->DevCommDestroy(reinterpret_cast<ncclComm_t>(c->real), devComm));
}

}  // extern "C"

LOOM_NCCL_PALIAS(ncclRedOpCreatePreMulSum)
LOOM_NCCL_PALIAS(ncclRedOpDestroy)
LOOM_NCCL_PALIAS(ncclMemAlloc)
LOOM_NCCL_PALIAS(ncclMemFree)
LOOM_NCCL_PALIAS(ncclCommRegister)
LOOM_NCCL_PALIAS(ncclCommDeregister)
LOOM_NCCL_PALIAS(ncclCommWindowRegister)
LOOM_NCCL_PALIAS(ncclCommWindowDeregister)
LOOM_NCCL_PALIAS(ncclDevCommCreate)
LOOM_NCCL_PALIAS(ncclDevCommDestroy)
