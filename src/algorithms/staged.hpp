// Host algorithms on device buffers, for backends without native collectives: one schedule per
// shape (exec/schedule.hpp), run by either of the executor's drivers (exec/executor.hpp): inline
// where the call blocks, stream-ordered where the device runs host tasks (DeviceCaps::hostTasks:
// the call returns once its device lane is enqueued; the host part runs on the progress queue).
//
//   staged:    the input copied from the device to pinned host memory, the host algorithm on it
//              (a host call), the output copied back. Works for any backend and across nodes:
//              the fallback of every optional plug-in entry.
//   mapped:    where the device's copies and reductions take host pointers and it reduces
//              (DeviceCaps), an arena algorithm runs as it is with the device doing every copy
//              and reduction (one copy into shared memory per rank instead of two stagings):
//              a marker the host call waits for (the input is complete), the call, a marker the
//              stream waits for (its later work sees the output).
//   pipelined: elementwise calls of a heterogeneous communicator cut into chunks
//              (algorithms/chunked.hpp).
//
// The host calls' arguments point into the staging memory the caller binds (stagedHostArgs,
// pipelinedChunkArgs). Staging and scratch grow once and are reused.
#pragma once

#include <span>
#include <vector>

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

// The staged shape of `args` on rank `rank` of `nranks` into a cleared schedule; its staging
// buffers are "stage-in" (absent where the call runs in place on the host or has no input) and
// "stage-out". Host call 0 runs the algorithm.
void buildStaged(Schedule& s, const CollArgs& args, int rank, int nranks);
// The call as the host algorithm runs it, on the staging memory bound to `s`'s buffers.
CollArgs stagedHostArgs(const Schedule& s, std::span<char* const> bound, const CollArgs& args);
// The mapped shape: host call 0 runs the algorithm on the device's own buffers.
void buildMapped(Schedule& s);

// The host calls of a device call: each runs one algorithm on one CollArgs with one context.
class AlgorithmCalls final : public HostCalls {
 public:
  void clear(const AlgoContext& ctx) {
    ctx_ = &ctx;
    calls_.clear();
  }
  void add(const Algorithm& algo, const CollArgs& args) { calls_.push_back({&algo, args}); }
  void run(uint32_t call) override { runAlgorithm(*calls_[call].algo, *ctx_, calls_[call].args); }

 private:
  struct Call {
    const Algorithm* algo;
    CollArgs args;
  };
  const AlgoContext* ctx_ = nullptr;
  std::vector<Call> calls_;
};

}  // namespace loom
