// Elementwise collectives (allreduce, reduce, broadcast) as a sequence of chunk calls, for
// heterogeneous communicators: every rank cuts a call at the same element boundaries and runs the
// host algorithm on each chunk, so a rank whose data is on a device can overlap its device-host
// copies with the exchange of the neighbouring chunks.
//
// Roles of one rank, chunk after chunk:
//   host-addressable rank: runs the chunk's algorithm on its own buffers.
//   device rank (staged, pipelined): device->host copies run `lookahead` chunks ahead on the
//     caller's stream, each marked by an event; the host algorithm runs on chunk c in pinned host
//     memory as soon as its copy is done; chunk c's host->device copy is enqueued behind it.
//     The call returns when the last copy is done (the staging memory is reused by the next call).
//   device rank in stream order (the device runs host tasks, caps().hostTasks): the same schedule
//     split in two halves that run at the same time. Call time (enqueuePipelinedStaged): every
//     copy is enqueued on the caller's stream, each host->device copy behind a gate task
//     (algorithms/stream_gate), and the call returns. Progress thread (runPipelinedHost), started
//     before the enqueue ends (EnqueueProgress): chunk after chunk, waits for the chunk's input
//     event, runs the host algorithm, releases the chunk's gate.
// Nothing is allocated per call: the staging and its events grow once and are reused.
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <vector>

#include "algorithms/staged.hpp"
#include "algorithms/stream_gate.hpp"

namespace loom {

// True for the collectives whose every output element depends only on the same element of the
// inputs, so that cutting them into chunks changes nothing of the result.
bool elementwise(loomFunc_t func);

// The chunk size, in bytes, a heterogeneous communicator uses for a call of `bytes` of elements of
// `elementBytes`: whole elements, the same on every rank (it depends only on the call and on
// `configured`, LOOM_HETERO_CHUNK_BYTES, which must agree; 0: chosen from the size).
size_t heteroChunkBytes(size_t bytes, size_t elementBytes, size_t configured);

// The algorithm to run on a chunk of `bytes` (the selector's choice for that size).
using ChunkAlgorithm = std::function<const Algorithm&(size_t bytes)>;

// Runs `args` chunk by chunk on host-addressable buffers with ctx (a CPU rank's part).
void runChunked(const ChunkAlgorithm& select, const AlgoContext& ctx, const CollArgs& args,
                size_t chunkBytes);

// Events a device rank's pipelined staging marks its copies with, created once.
class StagingEvents {
 public:
  static constexpr int kLookahead = 2;  // chunks copied to the host ahead of the exchange
  explicit StagingEvents(Device& device);
  DeviceEvent& operator[](size_t chunk) { return *events_[chunk % events_.size()]; }

 private:
  std::vector<std::unique_ptr<DeviceEvent>> events_;
};

// Runs `args` (buffers of `device`) chunk by chunk through pinned host memory, pipelined as above;
// hostCtx is the communicator's context with the host CPU as its device.
void runPipelinedStaged(const ChunkAlgorithm& select, const AlgoContext& hostCtx, Device& device,
                        HostStaging& staging, StagingEvents& events, const CollArgs& args,
                        size_t chunkBytes);

// How far a call's stream half has been enqueued, read by its host half on the progress thread.
// The host half must start before the enqueue ends: a call of many chunks enqueues more than a
// device's launch queue holds (CUDA then blocks the enqueue until the stream drains), and the
// stream drains past its first gate only once the host half released it. The host half asks about
// an input event only once it is recorded: a device reports an event never recorded as done.
struct EnqueueProgress {
  std::atomic<size_t> recorded{0};     // input events recorded, in chunk order
  std::atomic<bool> abandoned{false};  // the enqueue failed: no more will be recorded
  void reset() {
    recorded.store(0, std::memory_order_relaxed);
    abandoned.store(false, std::memory_order_relaxed);
  }
};

// The stream half of runPipelinedStaged (device ranks whose device runs host tasks): enqueues on
// args.stream the device->host copy of every chunk into `host` (the call's staging), each followed
// by the recording of inputs[c] (chunkCount(bytes, chunkBytes) events, algorithms/partition.hpp)
// and counted in `progress`, and the host->device copies of the results, each behind a gate task
// of `gate`. Returns the number of gate tasks it enqueued (one per chunk, or one at the end where
// this rank takes no output), which runPipelinedHost releases.
int enqueuePipelinedStaged(Device& device, StreamGate& gate, char* host, const CollArgs& args,
                           size_t chunkBytes, int rank, DeviceEvent* const* inputs,
                           EnqueueProgress& progress);
// The host half, on the communicator's progress thread: chunk after chunk, once inputs[c] is
// recorded (`progress`) and done, the host algorithm in `host`, then the chunk's gate released.
// Throws if the enqueue was abandoned before recording an input it needs.
void runPipelinedHost(const ChunkAlgorithm& select, const AlgoContext& hostCtx, Device& device,
                      StreamGate& gate, char* host, const CollArgs& args, size_t chunkBytes,
                      DeviceEvent* const* inputs, const EnqueueProgress& progress);

}  // namespace loom
