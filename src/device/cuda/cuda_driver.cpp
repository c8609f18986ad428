#include "device/cuda/cuda_driver.hpp"

#include <cuda_runtime.h>

#include "base/error.hpp"

namespace loom {

namespace {

template <typename Fn>
void lookUp(const char* symbol, Fn& fn) {
  void* p = nullptr;
  cudaDriverEntryPointQueryResult found{};
  // 12000: the entry points as CUDA 12 defined them (the _v2 forms of the memory operations).
  if (cudaGetDriverEntryPointByVersion(symbol, &p, 12000, cudaEnableDefault, &found) ==
          cudaSuccess &&
      found == cudaDriverEntryPointSuccess)
    fn = reinterpret_cast<Fn>(p);
  else
    cudaGetLastError();
}

}  // namespace

CudaDriver::CudaDriver() {
  lookUp("cuMemGetAddressRange", getAddressRange_);
  lookUp("cuDeviceGetAttribute", getAttribute_);
  lookUp("cuStreamWriteValue64", writeValue64_);
  lookUp("cuStreamWaitValue64", waitValue64_);
  lookUp("cuDeviceGet", deviceGet_);
  lookUp("cuDevicePrimaryCtxGetState", primaryCtxGetState_);
  lookUp("cuDevicePrimaryCtxRetain", primaryCtxRetain_);
  lookUp("cuDevicePrimaryCtxRelease", primaryCtxRelease_);
  lookUp("cuCtxGetId", ctxGetId_);
  Vmm v;
  lookUp("cuMemRetainAllocationHandle", v.retainAllocationHandle);
  lookUp("cuMemGetAllocationPropertiesFromHandle", v.getAllocationProperties);
  lookUp("cuMemExportToShareableHandle", v.exportToShareableHandle);
  lookUp("cuMemImportFromShareableHandle", v.importFromShareableHandle);
  lookUp("cuMemAddressReserve", v.addressReserve);
  lookUp("cuMemAddressFree", v.addressFree);
  lookUp("cuMemMap", v.map);
  lookUp("cuMemUnmap", v.unmap);
  lookUp("cuMemSetAccess", v.setAccess);
  lookUp("cuMemRelease", v.release);
  if (v.retainAllocationHandle != nullptr && v.getAllocationProperties != nullptr &&
      v.exportToShareableHandle != nullptr && v.importFromShareableHandle != nullptr &&
      v.addressReserve != nullptr && v.addressFree != nullptr && v.map != nullptr &&
      v.unmap != nullptr && v.setAccess != nullptr && v.release != nullptr)
    vmm_ = v;  // all of them or none
}

bool CudaDriver::addressRange(const void* ptr, char*& base, size_t& size) const {
  CUdeviceptr b = 0;
  size_t s = 0;
  if (getAddressRange_ == nullptr ||
      getAddressRange_(&b, &s, reinterpret_cast<CUdeviceptr>(ptr)) != CUDA_SUCCESS)
    return false;
  base = reinterpret_cast<char*>(b);
  size = s;
  return true;
}

void CudaDriver::allocationOf(const void* ptr, char*& base, size_t& size) const {
  if (getAddressRange_ == nullptr)
    LOOM_THROW(loomSystemError, "the CUDA driver has no cuMemGetAddressRange");
  CUdeviceptr b = 0;
  size_t s = 0;
  CUresult r = getAddressRange_(&b, &s, reinterpret_cast<CUdeviceptr>(ptr));
  LOOM_CHECK_ARG(r == CUDA_SUCCESS, "buffer ", ptr,
                 " is not CUDA device memory of this process (cuMemGetAddressRange: error ", r,
                 ")");
  base = reinterpret_cast<char*>(b);
  size = s;
}

bool CudaDriver::primaryContextActive(int ordinal) const {
  CUdevice device = 0;
  if (deviceGet_ == nullptr || primaryCtxGetState_ == nullptr ||
      deviceGet_(&device, ordinal) != CUDA_SUCCESS)
    return true;  // cannot tell: as before, assume it is
  unsigned int flags = 0;
  int active = 0;
  return primaryCtxGetState_(device, &flags, &active) == CUDA_SUCCESS && active != 0;
}

unsigned long long CudaDriver::primaryContextId(int ordinal) const {
  if (ctxGetId_ == nullptr || primaryCtxRetain_ == nullptr || primaryCtxRelease_ == nullptr ||
      !primaryContextActive(ordinal))
    return 0;
  CUdevice device = 0;
  CUcontext context = nullptr;
  if (deviceGet_(&device, ordinal) != CUDA_SUCCESS ||
      primaryCtxRetain_(&context, device) != CUDA_SUCCESS)
    return 0;
  unsigned long long id = 0;
  if (ctxGetId_(context, &id) != CUDA_SUCCESS) id = 0;
  primaryCtxRelease_(device);
  return id;
}

bool CudaDriver::streamMemOps(int device) const {
  if (getAttribute_ == nullptr || writeValue64_ == nullptr || waitValue64_ == nullptr) return false;
  int ok = 0;
  return getAttribute_(&ok, CU_DEVICE_ATTRIBUTE_CAN_USE_64_BIT_STREAM_MEM_OPS, device) ==
             CUDA_SUCCESS &&
         ok != 0;
}

void CudaDriver::writeValue(cudaStream_t stream, uint64_t* addr, uint64_t value) const {
  CUresult r =
      writeValue64_(reinterpret_cast<CUstream>(stream), reinterpret_cast<CUdeviceptr>(addr), value,
                    CU_STREAM_WRITE_VALUE_DEFAULT);
  if (r != CUDA_SUCCESS) LOOM_THROW(loomUnhandledCudaError, "cuStreamWriteValue64: error ", r);
}

void CudaDriver::waitAtLeast(cudaStream_t stream, uint64_t* addr, uint64_t value) const {
  CUresult r = waitValue64_(reinterpret_cast<CUstream>(stream), reinterpret_cast<CUdeviceptr>(addr),
                            value, CU_STREAM_WAIT_VALUE_GEQ);
  if (r != CUDA_SUCCESS) LOOM_THROW(loomUnhandledCudaError, "cuStreamWaitValue64: error ", r);
}

}  // namespace loom
