#include "device/cuda/cuda_device.hpp"

#include <cstring>
#include <vector>

#include "base/dtype.hpp"
#include "device/cuda/collectives/exchange.hpp"
#include "device/cuda/cuda_check.hpp"

namespace loom {

namespace {

int deviceCount() {
  int count = 0;
  cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess) {
    cudaGetLastError();  // not sticky: leave no error behind for the caller's own CUDA calls
    LOOM_THROW(loomInvalidArgument, "device \"cuda\": no usable CUDA GPU (",
               cudaGetErrorString(err), ")");
  }
  return count;
}

}  // namespace

CudaDevice::CudaDevice(int ordinal) : ordinal_(ordinal) {
  cudaDeviceProp prop{};
  LOOM_CUDA_CHECK(cudaGetDeviceProperties(&prop, ordinal_));
  name_ = prop.name;
  multiprocessors_ = prop.multiProcessorCount;
  char bus[32] = {0};
  LOOM_CUDA_CHECK(cudaDeviceGetPCIBusId(bus, sizeof(bus) - 1, ordinal_));
  busId_ = bus;
}

void CudaDevice::makeCurrent() const {
  int current = -1;
  if (cudaGetDevice(&current) == cudaSuccess && current == ordinal_) return;
  LOOM_CUDA_CHECK(cudaSetDevice(ordinal_));
}

void* CudaDevice::allocate(size_t bytes) {
  makeCurrent();
  void* ptr = nullptr;
  LOOM_CUDA_CHECK(cudaMalloc(&ptr, bytes == 0 ? 1 : bytes));
  return ptr;
}

void CudaDevice::release(void* ptr) {
  if (ptr != nullptr) cudaFree(ptr);
}

void CudaDevice::copy(void* dst, const void* src, size_t bytes) {
  if (dst == src || bytes == 0) return;
  makeCurrent();
  LOOM_CUDA_CHECK(cudaMemcpy(dst, src, bytes, cudaMemcpyDefault));
}

void CudaDevice::reduce(void* dst, const void* const* srcs, int nsrc, size_t count,
                        loomDataType_t dtype, loomRedOp_t op, int accum, int divisor) {
  LOOM_CHECK_ARG(nsrc >= 1 && nsrc <= cuda::kMaxRanks, "reduce takes 1 to ", cuda::kMaxRanks,
                 " sources, got ", nsrc);
  if (count == 0) return;
  makeCurrent();
  const size_t bytes = count * dtypeSize(dtype);
  // The kernel reads the source list from device memory.
  const char** table = nullptr;
  LOOM_CUDA_CHECK(cudaMalloc(&table, sizeof(char*) * nsrc));
  cudaError_t err = cudaMemcpy(table, srcs, sizeof(char*) * nsrc, cudaMemcpyHostToDevice);
  if (err == cudaSuccess) {
    try {
      cuda::ReduceKey key{dtype, op == loomAvg ? loomSum : op, resolveGpuAccum(dtype, accum)};
      cuda::launchLocalReduce(static_cast<char*>(dst), table, nsrc, bytes, key,
                              divisor < 1 ? 1 : divisor, nullptr);
      err = cudaDeviceSynchronize();
    } catch (...) {
      cudaFree(table);
      throw;
    }
  }
  cudaFree(table);
  if (err != cudaSuccess)
    LOOM_THROW(loomUnhandledCudaError, "device reduce: ", cudaGetErrorString(err));
}

bool usableOnDevice(const void* ptr, int ordinal) {
  cudaPointerAttributes attr{};
  cudaError_t err = cudaPointerGetAttributes(&attr, ptr);
  if (err != cudaSuccess) {
    cudaGetLastError();
    return false;
  }
  switch (attr.type) {
    case cudaMemoryTypeDevice:
      return attr.device == ordinal;
    case cudaMemoryTypeManaged:
      return true;
    case cudaMemoryTypeHost:
      return attr.devicePointer != nullptr;
    default:
      return false;
  }
}

int resolveGpuAccum(loomDataType_t dtype, int accum) {
  if (!dtypeIsNarrowFloat(dtype) || accum < 0 || accum == dtype) return 0;
  switch (accum) {
    case loomFloat16:
      return 1;
    case loomFloat32:
      return 2;
    case loomFloat64:
      return 3;
    default:
      break;
  }
  LOOM_THROW(loomInvalidArgument, "cannot accumulate ", dtypeName(dtype), " in ",
             dtypeValid(accum) ? dtypeName(static_cast<loomDataType_t>(accum)) : "type ", accum);
}

std::unique_ptr<Device> createCudaDevice(const std::string& spec) {
  const int count = deviceCount();
  int ordinal = -1;
  if (spec == "cuda") {
    LOOM_CUDA_CHECK(cudaGetDevice(&ordinal));
  } else {
    const std::string digits = spec.substr(5);
    char* end = nullptr;
    long value = std::strtol(digits.c_str(), &end, 10);
    LOOM_CHECK_ARG(!digits.empty() && end != nullptr && *end == '\0' && value >= 0, "device '",
                   spec, "': expected cuda:N with N a device ordinal");
    ordinal = static_cast<int>(value);
  }
  LOOM_CHECK_ARG(ordinal >= 0 && ordinal < count, "device '", spec, "': this process sees ", count,
                 " CUDA device(s)");
  auto device = std::make_unique<CudaDevice>(ordinal);
  device->makeCurrent();
  return device;
}

}  // namespace loom
