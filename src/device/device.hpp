// The device backend: everything the layers above need from the device that holds a rank's
// buffers, and the only way they reach it. One object per rank and communicator.
//
// A backend provides memory (device, pinned host, export/import for peers on the same host),
// stream-ordered asynchronous work (copies in every direction, reductions dst = op(srcs...),
// events) with the caller's stream as the ordering point, its identity and capabilities, and,
// where its kind has them, native collectives (device/native.hpp) with their rows of the
// selector's table. The CPU backend (cpu/) is the reference; CUDA (cuda/) and plug-ins
// (plugin/, include/loom/loom_device_plugin.h) implement the same contract.
#pragma once

#include <cstddef>
#include <memory>
#include <string>

#include "base/coll_args.hpp"
#include "loom/loom.h"

namespace loom {

class NativeCollectives;  // device/native.hpp
struct NativeSetup;
class NativeEp;  // device/native_ep.hpp
struct NativeEpSetup;

// Who a device is. `kind` names the backend ("cpu", "cuda", a plug-in's "loom-emu"): what
// config.device / LOOM_DEVICE name, and what groups ranks into clusters.
struct DeviceIdentity {
  std::string kind;
  std::string vendor;  // "cpu", "nvidia", ...
  std::string model;   // for logs and loom-info
  int index = -1;      // ordinal on its host (-1 for the host CPU)
  std::string busId;   // PCI bus id of an accelerator; empty for the host CPU
};

struct DeviceCaps {
  bool hostAddressable = false;  // the host reads and writes its memory directly (the CPU)
  bool reduces = false;          // reduceAsync works (else Loom reduces on the host)
  bool mapsHostMemory = false;   // its copies and reductions accept host pointers directly
  bool peerMappable = false;     // exportMemory/importMemory work between ranks of one host
  bool hostTasks = false;        // enqueueHostTask works (else device calls block the host)
};

enum class CopyKind { kHostToDevice, kDeviceToHost, kDeviceToDevice };

// Host work that runs in a stream's order (Device::enqueueHostTask): after the work enqueued on
// the stream before it, and the stream's later work waits until run() returned. run() may block
// (a gate waiting for the host part of a collective), but must not call the device's API: on CUDA
// it runs on the runtime's callback thread.
class HostTask {
 public:
  virtual void run() noexcept = 0;

 protected:
  ~HostTask() = default;
};

// An event of a backend, created by Device::createEvent; released by its destructor.
class DeviceEvent {
 public:
  virtual ~DeviceEvent() = default;
};

class Device {
 public:
  virtual ~Device() = default;
  virtual const DeviceIdentity& identity() const = 0;
  virtual DeviceCaps caps() const = 0;
  // What a communicator split from this one passes to create the same device ("cuda:3").
  virtual std::string spec() const = 0;

  // Memory. Allocations throw loomSystemError when the device is out of memory.
  virtual void* allocate(size_t bytes) = 0;
  virtual void release(void* ptr) = 0;
  virtual void* allocateHost(size_t bytes);  // pinned / device-visible host memory
  virtual void releaseHost(void* ptr);
  // True when `ptr` is this device's memory (not host memory): the direction of a copy.
  virtual bool isDeviceMemory(const void* ptr) const = 0;
  // Throws loomInvalidArgument naming `what` unless [ptr, ptr + bytes) is memory this device's
  // work can use (the caller's mistake, caught before it becomes a fault).
  virtual void checkBuffer(const void* ptr, size_t bytes, const char* what) const = 0;
  // Peers of the same kind on one host (caps().peerMappable): an opaque handle to `ptr`, and the
  // mapping of a peer's handle into this process (closed by closeImported).
  virtual std::string exportMemory(void* ptr, size_t bytes);
  virtual void* importMemory(const std::string& handle);
  virtual void closeImported(void* ptr);

  // Stream-ordered work. `stream` is the caller's stream in its kind's native handle (null: the
  // kind's default stream); work runs after everything enqueued there before it.
  virtual void copyAsync(void* dst, const void* src, size_t bytes, CopyKind kind,
                         loomStream_t stream) = 0;
  // dst = srcs[0] op srcs[1] op ... (in index order, accumulated in `accum` for narrow floats),
  // divided by divisor when divisor > 1. Only where caps().reduces.
  virtual void reduceAsync(void* dst, const void* const* srcs, int nsrc, size_t count,
                           loomDataType_t dtype, loomRedOp_t op, int accum, int divisor,
                           loomStream_t stream);
  virtual std::unique_ptr<DeviceEvent> createEvent() = 0;
  virtual void recordEvent(DeviceEvent& event, loomStream_t stream) = 0;
  virtual void waitEvent(loomStream_t stream, DeviceEvent& event) = 0;  // stream waits, not host
  virtual bool eventDone(DeviceEvent& event) = 0;
  virtual void synchronize(loomStream_t stream) = 0;  // the host waits for the stream
  // Runs task.run() in stream order (see HostTask); `task` must live until it ran. Only where
  // caps().hostTasks.
  virtual void enqueueHostTask(HostTask& task, loomStream_t stream);

  // Blocking forms for the host algorithms: done when they return. Pointers may be this
  // device's memory or host memory (where caps().mapsHostMemory or hostAddressable); the
  // defaults run the asynchronous forms on the device's own stream and wait.
  virtual void copy(void* dst, const void* src, size_t bytes);
  // The same, for output that nobody reads soon (a large collective's result): may bypass caches.
  virtual void copyToOutput(void* dst, const void* src, size_t bytes) { copy(dst, src, bytes); }
  virtual void reduce(void* dst, const void* const* srcs, int nsrc, size_t count,
                      loomDataType_t dtype, loomRedOp_t op, int accum, int divisor);

  // This kind's own collectives for a communicator whose ranks all use devices of this kind
  // (null: none; the host algorithms run, through host memory where needed).
  virtual std::unique_ptr<NativeCollectives> createCollectives(const NativeSetup& setup);
  // This kind's own expert-parallel kernels for an object whose ranks all use devices of this
  // kind (null: none; the host paths run, staged through host memory).
  virtual std::unique_ptr<NativeEp> createEp(const NativeEpSetup& setup);

 protected:
  // The stream the blocking forms use (null: the kind's default stream).
  virtual loomStream_t workStream() { return nullptr; }
};

}  // namespace loom
