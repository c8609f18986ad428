#include "gpu_cumem.hpp"

namespace loom::gputest {

namespace {

template <typename Fn>
Fn entry(const char* symbol) {
  void* p = nullptr;
  cudaDriverEntryPointQueryResult found{};
  if (cudaGetDriverEntryPointByVersion(symbol, &p, 12000, cudaEnableDefault, &found) !=
          cudaSuccess ||
      found != cudaDriverEntryPointSuccess) {
    cudaGetLastError();
    return nullptr;
  }
  return reinterpret_cast<Fn>(p);
}

}  // namespace

struct CuMemBuffer::Driver {
  decltype(&cuMemGetAllocationGranularity) granularity =
      entry<decltype(&cuMemGetAllocationGranularity)>("cuMemGetAllocationGranularity");
  decltype(&cuMemCreate) create = entry<decltype(&cuMemCreate)>("cuMemCreate");
  decltype(&cuMemAddressReserve) reserve =
      entry<decltype(&cuMemAddressReserve)>("cuMemAddressReserve");
  decltype(&cuMemAddressFree) free = entry<decltype(&cuMemAddressFree)>("cuMemAddressFree");
  decltype(&cuMemMap) map = entry<decltype(&cuMemMap)>("cuMemMap");
  decltype(&cuMemUnmap) unmap = entry<decltype(&cuMemUnmap)>("cuMemUnmap");
  decltype(&cuMemSetAccess) setAccess = entry<decltype(&cuMemSetAccess)>("cuMemSetAccess");
  decltype(&cuMemRelease) release = entry<decltype(&cuMemRelease)>("cuMemRelease");
  bool ok() const {
    return granularity && create && reserve && free && map && unmap && setAccess && release;
  }
};

CuMemBuffer::CuMemBuffer(int device, size_t bytes, bool exportable) {
  const Driver d;
  if (!d.ok()) {
    fail("the driver has no cuMem entry points", 0);
    return;
  }
  if (cudaSetDevice(device) != cudaSuccess || cudaFree(nullptr) != cudaSuccess) {
    fail("no context on the device", 0);
    return;
  }
  CUmemAllocationProp prop{};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = device;
  prop.requestedHandleTypes =
      exportable ? CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR : CU_MEM_HANDLE_TYPE_NONE;
  CUresult r = d.granularity(&granularity_, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM);
  if (r != CUDA_SUCCESS) {
    fail("cuMemGetAllocationGranularity", r);
    return;
  }
  size_t count = (bytes + granularity_ - 1) / granularity_;
  if (count < 2) count = 2;
  reserved_ = count * granularity_;
  CUdeviceptr range = 0;
  r = d.reserve(&range, reserved_, 0, 0, 0);
  if (r != CUDA_SUCCESS) {
    fail("cuMemAddressReserve", r);
    return;
  }
  base_ = reinterpret_cast<char*>(range);
  for (size_t i = 0; i < count; ++i) {
    CUmemGenericAllocationHandle h{};
    r = d.create(&h, granularity_, &prop, 0);
    if (r != CUDA_SUCCESS) {
      fail("cuMemCreate", r);
      return;
    }
    handles_.push_back(h);
    r = d.map(range + mapped_, granularity_, 0, h, 0);
    if (r != CUDA_SUCCESS) {
      fail("cuMemMap", r);
      return;
    }
    mapped_ += granularity_;
  }
  CUmemAccessDesc access{};
  access.location = prop.location;
  access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  r = d.setAccess(range, reserved_, &access, 1);
  if (r != CUDA_SUCCESS) {
    fail("cuMemSetAccess", r);
    return;
  }
}

CuMemBuffer::~CuMemBuffer() { releaseAll(); }

void CuMemBuffer::releaseAll() {
  const Driver d;
  if (!d.ok()) return;
  const CUdeviceptr range = reinterpret_cast<CUdeviceptr>(base_);
  if (mapped_ > 0) d.unmap(range, mapped_);
  for (CUmemGenericAllocationHandle h : handles_) d.release(h);
  if (base_ != nullptr) d.free(range, reserved_);
  base_ = nullptr;
  mapped_ = 0;
  handles_.clear();
}

void CuMemBuffer::fail(const std::string& what, int code) {
  error_ = what + (code != 0 ? ": error " + std::to_string(code) : std::string());
  releaseAll();
}

}  // namespace loom::gputest
