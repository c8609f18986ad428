// The CUDA device adaptor: device memory, copies and reductions with the runtime API and Loom's
// kernels, and the facts (ordinal, PCI bus id) that peers need to reach this GPU.
#pragma once

#include <cuda_runtime.h>

#include <memory>
#include <string>

#include "device/device.hpp"

namespace loom {

class CudaDevice final : public Device {
 public:
  explicit CudaDevice(int ordinal);
  DeviceKind kind() const override { return DeviceKind::kCuda; }
  std::string vendor() const override { return "nvidia"; }
  std::string name() const override { return name_; }
  int index() const override { return ordinal_; }
  std::string busId() const override { return busId_; }

  void* allocate(size_t bytes) override;
  void release(void* ptr) override;
  void copy(void* dst, const void* src, size_t bytes) override;
  void reduce(void* dst, const void* const* srcs, int nsrc, size_t count, loomDataType_t dtype,
              loomRedOp_t op, int accum, int divisor) override;

  // Makes this device current on the calling thread (CUDA keeps the current device per thread).
  void makeCurrent() const;
  int multiprocessors() const { return multiprocessors_; }

 private:
  int ordinal_;
  std::string name_;
  std::string busId_;
  int multiprocessors_ = 0;
};

// Where a pointer lives, for argument checks: true when `ptr` is memory that kernels on `ordinal`
// can use (device memory of that GPU, managed memory, or mapped pinned host memory).
bool usableOnDevice(const void* ptr, int ordinal);

// The accumulation kind of the GPU reducers for (dtype, accum) (0 native, 1 fp16, 2 fp32, 3 fp64),
// resolved as the CPU reference does; throws loomInvalidArgument for an impossible pair.
int resolveGpuAccum(loomDataType_t dtype, int accum);

}  // namespace loom
