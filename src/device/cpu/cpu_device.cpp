// The host CPU as a device: plain memory, memcpy, and the vectorized reductions of base/reduce.
#include <cstdlib>
#include <cstring>

#include "base/error.hpp"
#include "base/reduce.hpp"
#include "device/cpu/streaming_copy.hpp"
#include "device/device.hpp"

namespace loom {

namespace {

class CpuDevice final : public Device {
 public:
  DeviceKind kind() const override { return DeviceKind::kCpu; }
  std::string vendor() const override { return "cpu"; }
  std::string name() const override { return "host"; }
  int index() const override { return -1; }

  void* allocate(size_t bytes) override {
    void* ptr = std::aligned_alloc(64, (bytes + 63) / 64 * 64);
    if (ptr == nullptr)
      LOOM_THROW(loomSystemError, "out of host memory allocating ", bytes, " bytes");
    return ptr;
  }
  void release(void* ptr) override { std::free(ptr); }
  void copy(void* dst, const void* src, size_t bytes) override {
    if (dst != src && bytes > 0) std::memcpy(dst, src, bytes);
  }
  void copyToOutput(void* dst, const void* src, size_t bytes) override {
    if (dst != src && bytes > 0) streamingCopy(dst, src, bytes);
  }
  void reduce(void* dst, const void* const* srcs, int nsrc, size_t count, loomDataType_t dtype,
              loomRedOp_t op, int accum, int divisor) override {
    reduceManyAndScale(dst, srcs, nsrc, count, dtype, op, accum, divisor);
  }
};

}  // namespace

std::unique_ptr<Device> createCpuDevice() { return std::make_unique<CpuDevice>(); }

}  // namespace loom
