// Host algorithms on device buffers, for backends without native collectives.
//
// staged: the call's input is copied from the device to pinned host memory on the caller's
// stream, the host algorithm runs on host memory (reducing on the host), and the output is
// copied back; the call returns when the output is in place. Works for any backend, across nodes
// too: the fallback of every optional plug-in entry.
// mapped: where the device's copies and reductions take host pointers and it reduces
// (DeviceCaps), an arena algorithm runs as it is with the device doing every copy and reduction:
// one copy into shared memory per rank instead of two whole-buffer stagings.
//
// In stream order (devices that run host tasks, caps().hostTasks), each is split in two halves:
// at call time the stream side is enqueued on the caller's stream (staged: the copy in, the
// recording of an input event, a gate task, the copy out; mapped: the event and the gate) and the
// call returns; the communicator's progress thread later runs runGated: it waits for the input
// event, runs the algorithm and releases the gate, which lets the copy out and the caller's later
// work run.
#pragma once

#include <vector>

#include "algorithms/context.hpp"
#include "algorithms/stream_gate.hpp"

namespace loom {

// Pinned host buffers of one device, grown to the largest call and then reused.
class HostStaging {
 public:
  explicit HostStaging(Device& device) : device_(device) {}
  ~HostStaging();
  HostStaging(const HostStaging&) = delete;
  HostStaging& operator=(const HostStaging&) = delete;
  char* send(size_t bytes) { return grow(send_, bytes); }
  char* recv(size_t bytes) { return grow(recv_, bytes); }
  // A buffer that grows leaves its old memory here, as calls in flight may still use it
  // (stream-ordered device ranks); freed by releaseRetired() once nothing does.
  bool retiring() const { return !retired_.empty(); }
  void releaseRetired();

 private:
  struct Buffer {
    char* data = nullptr;
    size_t bytes = 0;
  };
  char* grow(Buffer& buffer, size_t bytes);
  Device& device_;
  Buffer send_, recv_;
  std::vector<char*> retired_;
};

// Memory of one device, grown to the largest call and then reused: where a device rank of a
// heterogeneous communicator passes host buffers, its call runs on this (comm/hetero.cpp).
class DeviceScratch {
 public:
  explicit DeviceScratch(Device& device) : device_(device) {}
  ~DeviceScratch();
  DeviceScratch(const DeviceScratch&) = delete;
  DeviceScratch& operator=(const DeviceScratch&) = delete;
  char* get(size_t bytes);
  // Memory that growing replaced stays allocated (calls in flight on a stream may still use it)
  // until releaseRetired(), once nothing does.
  bool retiring() const { return !retired_.empty(); }
  void releaseRetired();

 private:
  Device& device_;
  char* data_ = nullptr;
  size_t bytes_ = 0;
  std::vector<char*> retired_;
};

// True when `algo` can run mapped on `caps`'s device (see above).
bool runsMapped(const Algorithm& algo, const DeviceCaps& caps);

// Runs a host algorithm for a call whose buffers are memory of `device`; hostCtx is the
// communicator's context with the host CPU as its device.
void runStaged(const Algorithm& algo, const AlgoContext& hostCtx, Device& device,
               HostStaging& staging, const CollArgs& args);
// Runs an algorithm with runsMapped(): after the caller's stream, with ctx.device the device.
void runMapped(const Algorithm& algo, const AlgoContext& ctx, const CollArgs& args);

// Stream half of a staged call (see above); returns the call as the host algorithm runs it, on
// the staging memory. Enqueues one gate task.
CollArgs enqueueStaged(Device& device, StreamGate& gate, HostStaging& staging, const CollArgs& args,
                       int rank, int nranks, DeviceEvent& input);
// Stream half of a mapped call: the input event and one gate task.
void enqueueMapped(Device& device, StreamGate& gate, const CollArgs& args, DeviceEvent& input);
// Host half of either, on the progress thread: `args` as enqueueStaged returned it (staged, with
// the host CPU's context) or the call itself (mapped, with the device's context).
void runGated(const Algorithm& algo, const AlgoContext& ctx, Device& device, StreamGate& gate,
              const CollArgs& args, DeviceEvent& input);

}  // namespace loom
