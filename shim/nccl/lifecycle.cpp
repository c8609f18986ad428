// Versions, errors, unique ids and communicator lifetime.
#include <cstddef>
#include <cstring>
#include <thread>

#include "shim.hpp"

using namespace loom::nccl_shim;

namespace {

static_assert(sizeof(ncclUniqueId) == sizeof(loomUniqueId), "unique ids travel unchanged");

// The caller's config, checked as NCCL does (NCCL_CONFIG_INITIALIZER's size and magic).
ncclResult_t checkConfig(Entry entry, const ncclConfig_t* config) {
  if (config == nullptr) return ncclSuccess;
  if (config->magic != 0xcafebeef)
    return fail(entry, ncclInvalidArgument,
                "config was not initialized with NCCL_CONFIG_INITIALIZER (bad magic)");
  if (config->size < offsetof(ncclConfig_t, commName) + sizeof(const char*))
    return fail(
        entry, ncclInvalidArgument,
        "config->size " + std::to_string(config->size) + " is too small for an ncclConfig_t");
  return ncclSuccess;
}

}  // namespace

namespace loom::nccl_shim {

ncclComm* newComm(int nranks, int rank, int cudaDevice, const ncclConfig_t* config) {
  auto* c = new ncclComm;
  c->onHost = hostMode();
  c->nranks = nranks;
  c->rank = rank;
  c->cudaDevice = c->onHost ? -1 : cudaDevice;
  if (config != nullptr) {
    c->hasConfig = true;
    c->config = NCCL_CONFIG_INITIALIZER;
    std::memcpy(&c->config, config, std::min(config->size, sizeof(ncclConfig_t)));
    c->config.size = sizeof(ncclConfig_t);
  }
  return c;
}

ncclComm* wrapReal(const RealNccl& lib, ncclComm_t real, const ncclConfig_t* config) {
  ncclComm* c = newComm(0, 0, -1, config);
  adoptReal(c, lib, real);
  return c;
}

}  // namespace loom::nccl_shim

namespace {

const RealNccl* wholeLibrary(Entry entry, const std::string& why, ncclResult_t* error) {
  std::string missing;
  const RealNccl* lib = realNccl(&missing);
  if (lib == nullptr) {
    *error = fail(entry, ncclInvalidUsage,
                  "every communicator goes to the real NCCL (" + why + "), but: " + missing);
    return nullptr;
  }
  warnOnce("whole", "every communicator runs on the real NCCL (" + lib->path + "): " + why);
  return lib;
}

ncclResult_t initRank(Entry entry, ncclComm_t* out, int nranks, const ncclUniqueId& id, int rank,
                      ncclConfig_t* config, int cudaDevice) {
  if (out == nullptr) return fail(entry, ncclInvalidArgument, "comm output pointer is NULL");
  *out = nullptr;
  if (nranks < 1)
    return fail(entry, ncclInvalidArgument, "nranks " + std::to_string(nranks) + " < 1");
  if (rank < 0 || rank >= nranks)
    return fail(entry, ncclInvalidArgument,
                "rank " + std::to_string(rank) + " is not in [0, " + std::to_string(nranks) + ")");
  if (ncclResult_t bad = checkConfig(entry, config); bad != ncclSuccess) return bad;
  std::string why;
  if (groupDepth() > 0) {
    // As NCCL: made at the group's end together with the group's other inits (one thread may
    // make every rank of a communicator, each init waiting for all of them).
    if (wholeFallback(&why)) {
      ncclResult_t error = ncclSuccess;
      if (wholeLibrary(entry, why, &error) == nullptr) return error;
    }
    ncclComm* c = newComm(nranks, rank, cudaDevice, config);
    deferInit(DeferredInit{entry, c, id});
    *out = c;
    return ncclSuccess;
  }
  if (wholeFallback(&why)) {
    ncclResult_t error = ncclSuccess;
    const RealNccl* lib = wholeLibrary(entry, why, &error);
    if (lib == nullptr) return error;
    ncclComm_t real = nullptr;
    ncclResult_t result = config != nullptr && lib->CommInitRankConfig != nullptr
                              ? lib->CommInitRankConfig(&real, nranks, id, rank, config)
                              : lib->CommInitRank(&real, nranks, id, rank);
    count(entry, Route::kNccl);
    if (result != ncclSuccess && result != ncclInProgress) {
      count(entry, Route::kError);
      return fromReal(entry, *lib, nullptr, result);
    }
    *out = wrapReal(*lib, real, config);
    return result;
  }
  ncclComm* c = newComm(nranks, rank, cudaDevice, config);
  std::string device;
  loomConfig_t cfg = loomConfigFor(config, c->cudaDevice, &device);
  loomUniqueId loomId;
  std::memcpy(&loomId, &id, sizeof(loomId));
  count(entry, Route::kLoom);
  ncclResult_t result =
      fromLoom(entry, loomCommInitRankConfig(&c->loom, nranks, loomId, rank, &cfg));
  if (result != ncclSuccess && result != ncclInProgress) {
    count(entry, Route::kError);
    deleteComm(c);
    return result;
  }
  *out = c;
  return result;
}

}  // namespace

namespace loom::nccl_shim {

ncclResult_t splitNow(Entry entry, ncclComm* parent, int color, int key, const ncclConfig_t* config,
                      ncclComm* into, ncclComm_t* newcomm) {
  if (parent->loom == nullptr) {
    const RealNccl* lib = realNccl(nullptr);
    count(entry, Route::kNccl);
    ncclComm_t real = nullptr;
    ncclResult_t result = fromReal(entry, *lib, parent->real,
                                   lib->CommSplit(reinterpret_cast<ncclComm_t>(parent->real), color,
                                                  key, &real, const_cast<ncclConfig_t*>(config)));
    if ((result == ncclSuccess || result == ncclInProgress) && real != nullptr) {
      if (into != nullptr)
        adoptReal(into, *lib, real);
      else
        *newcomm = wrapReal(*lib, real, config);
    }
    return result;
  }
  std::string device;
  loomConfig_t cfg = loomConfigFor(config, parent->cudaDevice, &device);
  cfg.device = nullptr;  // the parent's device, as NCCL's children keep the parent's GPU
  cfg.blocking = 1;      // Loom splits blocking; a non-blocking caller sees it done at once
  count(entry, Route::kLoom);
  loomComm_t child = nullptr;
  ncclResult_t result = fromLoom(entry, loomCommSplit(parent->loom, color, key, &child, &cfg));
  if (result != ncclSuccess) {
    count(entry, Route::kError);
    return result;
  }
  if (child == nullptr) return ncclSuccess;  // NCCL_SPLIT_NOCOLOR
  int nranks = 0, rank = 0;
  loomCommCount(child, &nranks);
  loomCommUserRank(child, &rank);
  ncclComm* c = into;
  if (c == nullptr) {
    c = newComm(nranks, rank, parent->cudaDevice,
                config != nullptr ? config : (parent->hasConfig ? &parent->config : nullptr));
    c->onHost = parent->onHost;
    *newcomm = c;
  }
  c->nranks = nranks;
  c->rank = rank;
  c->loom = child;
  return ncclSuccess;
}

void adoptReal(ncclComm* c, const RealNccl& lib, ncclComm_t real) {
  if (lib.CommCount != nullptr) lib.CommCount(real, &c->nranks);
  if (lib.CommUserRank != nullptr) lib.CommUserRank(real, &c->rank);
  if (lib.CommCuDevice != nullptr) lib.CommCuDevice(real, &c->cudaDevice);
  setReal(c, reinterpret_cast<RealComm*>(real));
}

void deleteComm(ncclComm* c) {
  setReal(c, nullptr);
  c->magic = 0;  // a later call with this handle is refused rather than trusted
  delete c;
}

}  // namespace loom::nccl_shim

extern "C" {

ncclResult_t ncclGetVersion(int* version) {
  if (version == nullptr) return fail(Entry::kGetVersion, ncclInvalidArgument, "version is NULL");
  count(Entry::kGetVersion, Route::kLoom);
  *version = NCCL_VERSION_CODE;  // the API this shim implements (its nccl.h)
  return ncclSuccess;
}

ncclResult_t ncclGetUniqueId(ncclUniqueId* uniqueId) {
  if (uniqueId == nullptr)
    return fail(Entry::kGetUniqueId, ncclInvalidArgument, "uniqueId is NULL");
  std::string why;
  if (wholeFallback(&why)) {
    ncclResult_t error = ncclSuccess;
    const RealNccl* lib = wholeLibrary(Entry::kGetUniqueId, why, &error);
    if (lib == nullptr) return error;
    count(Entry::kGetUniqueId, Route::kNccl);
    return fromReal(Entry::kGetUniqueId, *lib, nullptr, lib->GetUniqueId(uniqueId));
  }
  count(Entry::kGetUniqueId, Route::kLoom);
  loomUniqueId id;
  ncclResult_t result = fromLoom(Entry::kGetUniqueId, loomGetUniqueId(&id));
  if (result == ncclSuccess) std::memcpy(uniqueId, &id, sizeof(id));
  return result;
}

ncclResult_t ncclCommInitRank(ncclComm_t* comm, int nranks, ncclUniqueId commId, int rank) {
  return initRank(Entry::kCommInitRank, comm, nranks, commId, rank, nullptr, currentCudaDevice());
}

ncclResult_t ncclCommInitRankConfig(ncclComm_t* comm, int nranks, ncclUniqueId commId, int rank,
                                    ncclConfig_t* config) {
  return initRank(Entry::kCommInitRankConfig, comm, nranks, commId, rank, config,
                  currentCudaDevice());
}

ncclResult_t ncclCommInitRankScalable(ncclComm_t* newcomm, int nranks, int myrank, int nId,
                                      ncclUniqueId* commIds, ncclConfig_t* config) {
  const Entry entry = Entry::kCommInitRankScalable;
  if (nId < 1 || commIds == nullptr)
    return fail(entry, ncclInvalidArgument, "nId must be >= 1 with commIds non-NULL");
  std::string why;
  if (wholeFallback(&why) && groupDepth() == 0) {
    if (newcomm == nullptr) return fail(entry, ncclInvalidArgument, "newcomm is NULL");
    ncclResult_t error = ncclSuccess;
    const RealNccl* lib = wholeLibrary(entry, why, &error);
    if (lib == nullptr) return error;
    if (lib->CommInitRankScalable == nullptr)
      return fail(entry, ncclInvalidUsage, lib->path + " lacks ncclCommInitRankScalable");
    ncclComm_t real = nullptr;
    count(entry, Route::kNccl);
    ncclResult_t result =
        fromReal(entry, *lib, nullptr,
                 lib->CommInitRankScalable(&real, nranks, myrank, nId, commIds, config));
    if (result == ncclSuccess || result == ncclInProgress) *newcomm = wrapReal(*lib, real, config);
    return result;
  }
  // NCCL spreads its bootstrap over the nId roots; every rank holds all ids, and Loom's
  // rendezvous needs one: the first.
  return initRank(entry, newcomm, nranks, commIds[0], myrank, config, currentCudaDevice());
}

ncclResult_t ncclCommInitAll(ncclComm_t* comms, int ndev, const int* devlist) {
  const Entry entry = Entry::kCommInitAll;
  if (comms == nullptr) return fail(entry, ncclInvalidArgument, "comms is NULL");
  if (ndev < 1) return fail(entry, ncclInvalidArgument, "ndev " + std::to_string(ndev) + " < 1");
  std::string why;
  if (wholeFallback(&why)) {
    ncclResult_t error = ncclSuccess;
    const RealNccl* lib = wholeLibrary(entry, why, &error);
    if (lib == nullptr) return error;
    std::vector<ncclComm_t> real(ndev, nullptr);
    count(entry, Route::kNccl);
    ncclResult_t result =
        fromReal(entry, *lib, nullptr, lib->CommInitAll(real.data(), ndev, devlist));
    if (result != ncclSuccess) return result;
    for (int i = 0; i < ndev; ++i) comms[i] = wrapReal(*lib, real[i], nullptr);
    return ncclSuccess;
  }
  for (int i = 0; i < ndev; ++i) comms[i] = nullptr;
  // One rank per device in this process, made together (Loom's loomCommInitAll: a thread per
  // rank, all or nothing).
  std::vector<loomComm_t> made(ndev, nullptr);
  loomConfig_t cfg = LOOM_CONFIG_INITIALIZER;
  if (hostMode()) cfg.device = "cpu";
  count(entry, Route::kLoom);
  ncclResult_t result = fromLoom(
      entry, loomCommInitAllConfig(made.data(), ndev, hostMode() ? nullptr : devlist, &cfg));
  if (result != ncclSuccess) {
    count(entry, Route::kError);
    return result;
  }
  for (int i = 0; i < ndev; ++i) {
    ncclComm* c = newComm(ndev, i, devlist != nullptr ? devlist[i] : i, nullptr);
    c->loom = made[i];
    comms[i] = c;
  }
  return ncclSuccess;
}

ncclResult_t ncclCommSplit(ncclComm_t comm, int color, int key, ncclComm_t* newcomm,
                           ncclConfig_t* config) {
  const Entry entry = Entry::kCommSplit;
  ncclResult_t error = ncclSuccess;
  ncclComm* parent = checkReady(entry, comm, &error);
  if (parent == nullptr) return error;
  if (newcomm == nullptr) return fail(entry, ncclInvalidArgument, "newcomm is NULL");
  *newcomm = nullptr;
  if (color < 0 && color != NCCL_SPLIT_NOCOLOR)
    return fail(entry, ncclInvalidArgument, "color " + std::to_string(color) + " is negative");
  if (ncclResult_t bad = checkConfig(entry, config); bad != ncclSuccess) return bad;
  if (groupDepth() > 0) {
    // Made at the group's end, with the group's other splits and inits (one thread may split the
    // communicators of every GPU of its process, each split waiting for all ranks). A rank
    // without a color still takes part then; its handle is NULL at once, as NCCL's.
    ncclComm* c = nullptr;
    if (color != NCCL_SPLIT_NOCOLOR) {
      c = newComm(0, 0, parent->cudaDevice,
                  config != nullptr ? config : (parent->hasConfig ? &parent->config : nullptr));
      c->onHost = parent->onHost;
    }
    DeferredInit init{entry, c, {}, parent, color, key};
    if (c == nullptr) {
      // Nothing to hand back: a placeholder handle carries the participation, freed once made.
      init.comm = newComm(0, 0, parent->cudaDevice, nullptr);
      init.comm->magic = 0;
    }
    deferInit(init);
    *newcomm = c;
    return ncclSuccess;
  }
  return splitNow(entry, parent, color, key, config, nullptr, newcomm);
}

ncclResult_t ncclCommShrink(ncclComm_t comm, int* excludeRanksList, int excludeRanksCount,
                            ncclComm_t* newcomm, ncclConfig_t* config, int shrinkFlags) {
  const Entry entry = Entry::kCommShrink;
  ncclResult_t error = ncclSuccess;
  ncclComm* parent = checkReady(entry, comm, &error);
  if (parent == nullptr) return error;
  if (newcomm == nullptr) return fail(entry, ncclInvalidArgument, "newcomm is NULL");
  *newcomm = nullptr;
  // The excluded ranks do not call ncclCommShrink, and Loom's split needs every rank: only a
  // communicator that already has its real NCCL side can shrink (to a real NCCL communicator).
  const RealNccl* lib = realNccl(nullptr);
  if (parent->real == nullptr || lib == nullptr || lib->CommShrink == nullptr)
    return fail(entry, ncclInvalidUsage,
                "Loom cannot shrink a communicator (the excluded ranks do not take part, and "
                "Loom's split needs every rank); only one already running on the real NCCL can");
  count(entry, Route::kNccl);
  ncclComm_t real = nullptr;
  ncclResult_t result =
      fromReal(entry, *lib, parent->real,
               lib->CommShrink(reinterpret_cast<ncclComm_t>(parent->real), excludeRanksList,
                               excludeRanksCount, &real, config, shrinkFlags));
  if ((result == ncclSuccess || result == ncclInProgress) && real != nullptr) {
    ncclComm* c = wrapReal(*lib, real, config);
    c->onHost = parent->onHost;
    *newcomm = c;
  }
  return result;
}

namespace {

// Finalize, destroy, abort: Loom's side then the real NCCL's.
ncclResult_t endComm(Entry entry, ncclComm_t comm, loomResult_t (*loomEnd)(loomComm_t),
                     ncclResult_t (*RealNccl::*realEnd)(ncclComm_t), bool free) {
  // The real NCCL ending its own communicator from inside (see checkComm): its call, untouched.
  if (isRealHandle(comm)) {
    const RealNccl* lib = realNccl(nullptr);
    return lib->*realEnd != nullptr ? (lib->*realEnd)(comm) : ncclSuccess;
  }
  ncclResult_t error = ncclSuccess;
  ncclComm* c = checkComm(entry, comm, &error);
  if (c == nullptr) return error;
  if (c->initState.load() == ncclInProgress)
    return fail(entry, ncclInvalidUsage,
                "the communicator is made at the end of the group its init was called in; end "
                "that group first");
  ncclResult_t result = ncclSuccess;
  if (c->loom != nullptr) {
    count(entry, Route::kLoom);
    result = fromLoom(entry, loomEnd(c->loom));
  }
  if (c->real != nullptr) {
    const RealNccl* lib = realNccl(nullptr);
    count(entry, Route::kNccl);
    ncclResult_t r = ncclSuccess;
    if (lib->*realEnd != nullptr)
      r = fromReal(entry, *lib, c->real, (lib->*realEnd)(reinterpret_cast<ncclComm_t>(c->real)));
    if (result == ncclSuccess) result = r;
  }
  if (result != ncclSuccess && result != ncclInProgress) count(entry, Route::kError);
  if (free) deleteComm(c);
  return result;
}

}  // namespace

ncclResult_t ncclCommFinalize(ncclComm_t comm) {
  return endComm(Entry::kCommFinalize, comm, loomCommFinalize, &RealNccl::CommFinalize, false);
}

ncclResult_t ncclCommDestroy(ncclComm_t comm) {
  return endComm(Entry::kCommDestroy, comm, loomCommDestroy, &RealNccl::CommDestroy, true);
}

ncclResult_t ncclCommAbort(ncclComm_t comm) {
  return endComm(Entry::kCommAbort, comm, loomCommAbort, &RealNccl::CommAbort, true);
}

ncclResult_t ncclCommRevoke(ncclComm_t comm, int revokeFlags) {
  const Entry entry = Entry::kCommRevoke;
  ncclResult_t error = ncclSuccess;
  ncclComm* c = checkReady(entry, comm, &error);
  if (c == nullptr) return error;
  const RealNccl* lib = realNccl(nullptr);
  if (c->loom != nullptr || lib == nullptr || lib->CommRevoke == nullptr)
    return fail(entry, ncclInvalidUsage,
                "Loom cannot revoke a communicator and keep it for a shrink (ncclCommAbort "
                "stops it); only a communicator running wholly on the real NCCL can");
  count(entry, Route::kNccl);
  return fromReal(entry, *lib, c->real,
                  lib->CommRevoke(reinterpret_cast<ncclComm_t>(c->real), revokeFlags));
}

ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t* asyncError) {
  const Entry entry = Entry::kCommGetAsyncError;
  // The real NCCL asking about its own communicator (see checkComm), as when it is being
  // destroyed after its Loom side: its own answer, not the shim communicator's.
  if (isRealHandle(comm)) return realNccl(nullptr)->CommGetAsyncError(comm, asyncError);
  ncclResult_t error = ncclSuccess;
  ncclComm* c = checkComm(entry, comm, &error);
  if (c == nullptr) return error;
  if (asyncError == nullptr) return fail(entry, ncclInvalidArgument, "asyncError is NULL");
  // As NCCL's: a communicator whose init is still to come reports it in progress, one whose
  // deferred init failed reports that failure.
  if (const ncclResult_t state = c->initState.load(); state != ncclSuccess) {
    count(entry, Route::kLoom);
    if (state != ncclInProgress) setLastError(c->initError);
    *asyncError = state;
    return ncclSuccess;
  }
  *asyncError = ncclSuccess;
  if (c->loom != nullptr) {
    count(entry, Route::kLoom);
    loomResult_t state = loomSuccess;
    ncclResult_t asked = fromLoom(entry, loomCommGetAsyncError(c->loom, &state));
    if (asked != ncclSuccess) return asked;
    *asyncError = fromLoom(entry, state);
  }
  if (c->real != nullptr && (*asyncError == ncclSuccess || *asyncError == ncclInProgress)) {
    const RealNccl* lib = realNccl(nullptr);
    count(entry, Route::kNccl);
    ncclResult_t state = ncclSuccess;
    ncclResult_t asked =
        fromReal(entry, *lib, c->real,
                 lib->CommGetAsyncError(reinterpret_cast<ncclComm_t>(c->real), &state));
    if (asked != ncclSuccess) return asked;
    if (state != ncclSuccess) *asyncError = fromReal(entry, *lib, c->real, state);
  }
  return ncclSuccess;
}

ncclResult_t ncclCommCount(const ncclComm_t comm, int* count) {
  ncclResult_t error = ncclSuccess;
  ncclComm* c = checkComm(Entry::kCommCount, comm, &error);
  if (c == nullptr) return error;
  if (count == nullptr) return fail(Entry::kCommCount, ncclInvalidArgument, "count is NULL");
  loom::nccl_shim::count(Entry::kCommCount, c->loom != nullptr ? Route::kLoom : Route::kNccl);
  *count = c->nranks;
  return ncclSuccess;
}

ncclResult_t ncclCommCuDevice(const ncclComm_t comm, int* device) {
  ncclResult_t error = ncclSuccess;
  ncclComm* c = checkComm(Entry::kCommCuDevice, comm, &error);
  if (c == nullptr) return error;
  if (device == nullptr) return fail(Entry::kCommCuDevice, ncclInvalidArgument, "device is NULL");
  count(Entry::kCommCuDevice, c->loom != nullptr ? Route::kLoom : Route::kNccl);
  *device = c->cudaDevice;  // -1 for host communicators (LOOM_NCCL_DEVICE=cpu)
  return ncclSuccess;
}

ncclResult_t ncclCommUserRank(const ncclComm_t comm, int* rank) {
  ncclResult_t error = ncclSuccess;
  ncclComm* c = checkComm(Entry::kCommUserRank, comm, &error);
  if (c == nullptr) return error;
  if (rank == nullptr) return fail(Entry::kCommUserRank, ncclInvalidArgument, "rank is NULL");
  count(Entry::kCommUserRank, c->loom != nullptr ? Route::kLoom : Route::kNccl);
  *rank = c->rank;
  return ncclSuccess;
}

const char* ncclGetErrorString(ncclResult_t result) {
  count(Entry::kGetErrorString, Route::kLoom);
  switch (result) {
    case ncclSuccess:
      return "no error";
    case ncclUnhandledCudaError:
      return "unhandled cuda error";
    case ncclSystemError:
      return "unhandled system error (out of memory, sockets, shared memory)";
    case ncclInternalError:
      return "internal error - please report this issue to the Loom developers";
    case ncclInvalidArgument:
      return "invalid argument";
    case ncclInvalidUsage:
      return "invalid usage";
    case ncclRemoteError:
      return "remote process exited, failed or did not come in time";
    case ncclInProgress:
      return "NCCL operation in progress";
#if NCCL_VERSION_CODE >= NCCL_VERSION(2, 30, 0)
    case ncclTimeout:
      return "timeout: peers did not come in time";
#endif
    default:
      return "unknown result code";
  }
}

const char* ncclGetLastError(ncclComm_t) {
  count(Entry::kGetLastError, Route::kLoom);
  return lastError();
}

// NCCL re-reads NCCL_DEBUG; Loom reads LOOM_DEBUG when a communicator is made.
void ncclResetDebugInit() { count(Entry::kResetDebugInit, Route::kLoom); }
// Exported by NCCL 2.28 without a declaration in nccl.h; the same no-op.
__attribute__((visibility("default"))) void ncclResetDebugInitInternal() {
  count(Entry::kResetDebugInit, Route::kLoom);
}

}  // extern "C"

LOOM_NCCL_PALIAS(ncclGetVersion)
LOOM_NCCL_PALIAS(ncclGetUniqueId)
LOOM_NCCL_PALIAS(ncclCommInitRank)
LOOM_NCCL_PALIAS(ncclCommInitRankConfig)
LOOM_NCCL_PALIAS(ncclCommInitRankScalable)
LOOM_NCCL_PALIAS(ncclCommInitAll)
LOOM_NCCL_PALIAS(ncclCommSplit)
LOOM_NCCL_PALIAS(ncclCommShrink)
LOOM_NCCL_PALIAS(ncclCommFinalize)
LOOM_NCCL_PALIAS(ncclCommDestroy)
LOOM_NCCL_PALIAS(ncclCommAbort)
LOOM_NCCL_PALIAS(ncclCommRevoke)
LOOM_NCCL_PALIAS(ncclCommGetAsyncError)
LOOM_NCCL_PALIAS(ncclCommCount)
LOOM_NCCL_PALIAS(ncclCommCuDevice)
LOOM_NCCL_PALIAS(ncclCommUserRank)
LOOM_NCCL_PALIAS(ncclGetErrorString)
LOOM_NCCL_PALIAS(ncclGetLastError)
LOOM_NCCL_PALIAS(ncclResetDebugInit)
