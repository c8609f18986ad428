// The CUDA backend: device memory, copies and reductions with the runtime API and Loom's
// kernels, events, CUDA IPC for peers on the host, the facts (ordinal, PCI bus id) peers need to
// reach this GPU, and the native collectives (cuda_engine.hpp) a communicator of GPUs runs.
#pragma once

#include <cuda_runtime.h>

#include <memory>
#include <string>

#include "device/device.hpp"

namespace loom {

class CudaDevice final : public Device {
 public:
  explicit CudaDevice(int ordinal);
  const DeviceIdentity& identity() const override { return identity_; }
  // Not mapsHostMemory: its kernels cannot read pageable host memory (the shared arena), so host
  // algorithms reach it through pinned staging.
  // hostTasks: cudaLaunchHostFunc. A gate task only waits on a condition variable (a host function
  // must not call CUDA, and CUDA may run the host functions of several streams on one thread).
  DeviceCaps caps() const override { return {false, true, false, true, true}; }
  std::string spec() const override { return "cuda:" + std::to_string(ordinal()); }

  void* allocate(size_t bytes) override;
  void release(void* ptr) override;
  void* allocateHost(size_t bytes) override;
  void releaseHost(void* ptr) override;
  bool isDeviceMemory(const void* ptr) const override;
  void checkBuffer(const void* ptr, size_t bytes, const char* what) const override;
  std::string exportMemory(void* ptr, size_t bytes) override;
  void* importMemory(const std::string& handle) override;
  void closeImported(void* ptr) override;

  void copyAsync(void* dst, const void* src, size_t bytes, CopyKind kind,
                 loomStream_t stream) override;
  void reduceAsync(void* dst, const void* const* srcs, int nsrc, size_t count, loomDataType_t dtype,
                   loomRedOp_t op, int accum, int divisor, loomStream_t stream) override;
  std::unique_ptr<DeviceEvent> createEvent() override;
  void recordEvent(DeviceEvent& event, loomStream_t stream) override;
  void waitEvent(loomStream_t stream, DeviceEvent& event) override;
  bool eventDone(DeviceEvent& event) override;
  void synchronize(loomStream_t stream) override;
  void enqueueHostTask(HostTask& task, loomStream_t stream) override;

  std::unique_ptr<NativeCollectives> createCollectives(const NativeSetup& setup) override;

  int ordinal() const { return identity_.index; }
  // Makes this device current on the calling thread (CUDA keeps the current device per thread).
  void makeCurrent() const;
  int multiprocessors() const { return multiprocessors_; }

 private:
  DeviceIdentity identity_;
  int multiprocessors_ = 0;
  // Buffers are reused call after call: the last pointers that passed checkBuffer. (Under
  // unified addressing a device address never becomes host memory, so a remembered one stays a
  // device pointer even if it was freed and allocated again.)
  static constexpr size_t kCheckedCache = 16;
  mutable const void* checked_[kCheckedCache] = {};
};

// Creates the device of "cuda" (the calling thread's current device) or "cuda:N".
std::unique_ptr<Device> createCudaDevice(const std::string& spec);

// Where a pointer lives, for argument checks: true when `ptr` is memory that kernels on `ordinal`
// can use (device memory of that GPU, managed memory, or mapped pinned host memory).
bool usableOnDevice(const void* ptr, int ordinal);

// The accumulation kind of the GPU reducers for (dtype, accum) (0 native, 1 fp16, 2 fp32, 3 fp64),
// resolved as the CPU reference does; throws loomInvalidArgument for an impossible pair.
int resolveGpuAccum(loomDataType_t dtype, int accum);

}  // namespace loom
