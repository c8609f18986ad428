// The host CPU as a device: plain memory, memcpy, and the vectorized reductions of base/reduce.
// Work is done when the call returns, so streams and events are trivial.
#include "device/cpu/cpu_device.hpp"

#include <cstdlib>
#include <cstring>

#include "base/error.hpp"
#include "base/reduce.hpp"
#include "device/cpu/streaming_copy.hpp"

namespace loom {

namespace {

class CpuEvent final : public DeviceEvent {};

class CpuDevice final : public Device {
 public:
  CpuDevice() { identity_ = {"cpu", "cpu", "host", -1, ""}; }
  const DeviceIdentity& identity() const override { return identity_; }
  DeviceCaps caps() const override { return {true, true, true, false, true}; }
  std::string spec() const override { return "cpu"; }

  void* allocate(size_t bytes) override { return allocateHost(bytes); }
  void release(void* ptr) override { releaseHost(ptr); }
  bool isDeviceMemory(const void*) const override { return false; }
  void checkBuffer(const void*, size_t, const char*) const override {}

  void copyAsync(void* dst, const void* src, size_t bytes, CopyKind, loomStream_t) override {
    copy(dst, src, bytes);
  }
  void reduceAsync(void* dst, const void* const* srcs, int nsrc, size_t count, loomDataType_t dtype,
                   loomRedOp_t op, int accum, int divisor, loomStream_t) override {
    reduce(dst, srcs, nsrc, count, dtype, op, accum, divisor);
  }
  std::unique_ptr<DeviceEvent> createEvent() override { return std::make_unique<CpuEvent>(); }
  void recordEvent(DeviceEvent&, loomStream_t) override {}
  void waitEvent(loomStream_t, DeviceEvent&) override {}
  bool eventDone(DeviceEvent&) override { return true; }
  void synchronize(loomStream_t) override {}
  void enqueueHostTask(HostTask& task, loomStream_t) override { task.run(); }  // in order: now

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

 private:
  DeviceIdentity identity_;
};

}  // namespace

std::unique_ptr<Device> createCpuDevice() { return std::make_unique<CpuDevice>(); }

}  // namespace loom
