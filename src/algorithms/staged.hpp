// Host algorithms on device buffers, for backends without native collectives.
//
// staged: the call's input is copied from the device to pinned host memory on the caller's
// stream, the host algorithm runs on host memory (reducing on the host), and the output is
// copied back; the call returns when the output is in place. Works for any backend, across nodes
// too: the fallback of every optional plug-in entry.
// mapped: where the device's copies and reductions take host pointers and it reduces
// (DeviceCaps), an arena algorithm runs as it is with the device doing every copy and reduction:
// one copy into shared memory per rank instead of two whole-buffer stagings.
#pragma once

#include "algorithms/context.hpp"

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

 private:
  struct Buffer {
    char* data = nullptr;
    size_t bytes = 0;
  };
  char* grow(Buffer& buffer, size_t bytes);
  Device& device_;
  Buffer send_, recv_;
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

 private:
  Device& device_;
  char* data_ = nullptr;
  size_t bytes_ = 0;
};

// True when `algo` can run mapped on `caps`'s device (see above).
bool runsMapped(const Algorithm& algo, const DeviceCaps& caps);

// Runs a host algorithm for a call whose buffers are memory of `device`; hostCtx is the
// communicator's context with the host CPU as its device.
void runStaged(const Algorithm& algo, const AlgoContext& hostCtx, Device& device,
               HostStaging& staging, const CollArgs& args);
// Runs an algorithm with runsMapped(): after the caller's stream, with ctx.device the device.
void runMapped(const Algorithm& algo, const AlgoContext& ctx, const CollArgs& args);

}  // namespace loom
