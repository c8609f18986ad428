// Device memory made the way PyTorch's expandable segments and ncclMemAlloc make it: physical
// allocations of the device's granularity (cuMemCreate), mapped one after another into one
// reserved range, so that a buffer in it spans several of them. Exportable as POSIX file
// descriptors unless made without (to test the refusal). The driver is reached through the
// runtime, so the test binary links no libcuda and still starts (and skips) without a GPU.
#pragma once

#include <cuda.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <string>
#include <vector>

namespace loom::gputest {

class CuMemBuffer {
 public:
  // At least `bytes`, in whole physical allocations of the device's minimum granularity (at
  // least two). ok() false, with error(), when the driver cannot.
  CuMemBuffer(int device, size_t bytes, bool exportable = true);
  ~CuMemBuffer();
  CuMemBuffer(const CuMemBuffer&) = delete;
  CuMemBuffer& operator=(const CuMemBuffer&) = delete;

  bool ok() const { return base_ != nullptr; }
  const std::string& error() const { return error_; }
  char* data() const { return base_; }
  size_t bytes() const { return reserved_; }
  size_t allocations() const { return handles_.size(); }
  size_t granularity() const { return granularity_; }

 private:
  struct Driver;
  void fail(const std::string& what, int code);
  void releaseAll();

  char* base_ = nullptr;
  size_t reserved_ = 0;
  size_t granularity_ = 0;
  size_t mapped_ = 0;
  std::vector<CUmemGenericAllocationHandle> handles_;
  std::string error_;
};

}  // namespace loom::gputest
