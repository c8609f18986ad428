// The CUDA backend: device memory, copies and reductions with the runtime API and Loom's
// kernels, events, CUDA IPC for peers on the host, the facts (ordinal, PCI bus id) peers need to
// reach this GPU, and the native collectives (cuda_engine.hpp) a communicator of GPUs runs.
#pragma once

#include <cuda_runtime.h>

#include <memory>
#include <string>

#include "device/cuda/cuda_driver.hpp"
#include "device/device.hpp"

namespace loom {

// Makes `ordinal` the calling thread's current CUDA device for one scope and gives the caller
// back its own device at the end, as NCCL's calls do: one thread may drive communicators on
// several GPUs (nccl-tests -g N, ncclCommInitAll), each call on its own communicator's device,
// and the caller's own CUDA calls after it must still go where it meant them to.
class DeviceScope {
 public:
  explicit DeviceScope(int ordinal);
  ~DeviceScope();
  DeviceScope(const DeviceScope&) = delete;
  DeviceScope& operator=(const DeviceScope&) = delete;

 private:
  int previous_ = -1;  // -1: nothing to give back
};

// CUDA errors that say the context is gone (cudaDeviceReset, or the runtime unloading at exit):
// a thread of Loom that meets one stops using CUDA.
bool contextGone(cudaError_t error);

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
  std::unique_ptr<NativeEp> createEp(const NativeEpSetup& setup) override;

  int ordinal() const { return identity_.index; }
  int multiprocessors() const { return multiprocessors_; }
  const CudaDriver& driver() const { return driver_; }
  // Whether the primary context this device's resources were made in still exists: false once
  // cudaDeviceReset (or the runtime's teardown at exit) destroyed it, even after a new one came.
  // Its memory, events and streams are then neither used nor freed (a stale pointer may name the
  // new context's memory). `thorough` also compares the context's identity (retains it for a
  // moment: not for the hot path); otherwise only whether one is active.
  bool contextAlive(bool thorough) const;

 private:
  DeviceIdentity identity_;
  int multiprocessors_ = 0;
  CudaDriver driver_;
  unsigned long long contextId_ = 0;  // the primary context's identity at creation; 0: unknown
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
