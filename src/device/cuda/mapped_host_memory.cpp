#include "device/cuda/mapped_host_memory.hpp"

#include <cuda_runtime.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <utility>

#include "device/cuda/cuda_check.hpp"

namespace loom {

MappedHostMemory::MappedHostMemory(size_t bytes) {
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  const size_t rounded = (bytes + page - 1) / page * page;
  host_ = std::aligned_alloc(page, rounded == 0 ? page : rounded);
  if (host_ == nullptr) LOOM_THROW(loomSystemError, "no host memory for ", bytes, " bytes");
  std::memset(host_, 0, rounded == 0 ? page : rounded);
  cudaError_t err = cudaHostRegister(host_, rounded == 0 ? page : rounded, cudaHostRegisterMapped);
  if (err == cudaSuccess) {
    registered_ = true;
    err = cudaHostGetDevicePointer(&device_, host_, 0);
  }
  if (err != cudaSuccess) {
    cudaGetLastError();
    reset();
    LOOM_THROW(loomUnhandledCudaError, "mapping ", bytes,
               " bytes of host memory for the GPU failed: ", cudaGetErrorString(err));
  }
}

MappedHostMemory::~MappedHostMemory() { reset(); }

MappedHostMemory::MappedHostMemory(MappedHostMemory&& other) noexcept
    : host_(std::exchange(other.host_, nullptr)),
      device_(std::exchange(other.device_, nullptr)),
      registered_(std::exchange(other.registered_, false)) {}

MappedHostMemory& MappedHostMemory::operator=(MappedHostMemory&& other) noexcept {
  if (this != &other) {
    reset();
    host_ = std::exchange(other.host_, nullptr);
    device_ = std::exchange(other.device_, nullptr);
    registered_ = std::exchange(other.registered_, false);
  }
  return *this;
}

void MappedHostMemory::reset() {
  if (registered_ && cudaHostUnregister(host_) != cudaSuccess) cudaGetLastError();
  registered_ = false;
  std::free(host_);
  host_ = device_ = nullptr;
}

}  // namespace loom
