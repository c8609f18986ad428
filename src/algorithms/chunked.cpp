#include "algorithms/chunked.hpp"

#include <algorithm>

#include "algorithms/partition.hpp"
#include "base/dtype.hpp"

namespace loom {

namespace {

struct Chunk {
  size_t offset;  // bytes from the buffers' start
  size_t bytes;
};

// Chunk `index` of a call of `total` bytes cut into `chunkBytes`.
Chunk chunkAt(size_t index, size_t total, size_t chunkBytes) {
  size_t offset = index * chunkBytes;
  return {offset, std::min(chunkBytes, total - offset)};
}

CollArgs chunkArgs(const CollArgs& args, const Chunk& chunk, size_t elementBytes) {
  CollArgs c = args;
  c.count = chunk.bytes / elementBytes;
  if (c.send != nullptr) c.send = static_cast<const char*>(args.send) + chunk.offset;
  if (c.recv != nullptr) c.recv = static_cast<char*>(args.recv) + chunk.offset;
  return c;
}

// Who brings input and who takes output: reduce's result is the root's only, broadcast's input
// too (an in-place root has its output already).
struct Roles {
  bool hasInput;
  bool takesOutput;
};

Roles rolesOf(const CollArgs& args, int rank) {
  const bool isRoot = rank == args.root;
  return {args.func != loomFuncBroadcast || isRoot, args.func == loomFuncReduce ? isRoot
                                                    : args.func == loomFuncBroadcast
                                                        ? !(isRoot && args.send == args.recv)
                                                        : true};
}

// Chunk `index` of the call, as the host algorithm runs it: in place in the staging memory.
CollArgs hostChunkArgs(const CollArgs& args, char* host, const Chunk& chunk, size_t elementBytes) {
  CollArgs onHost = args;
  onHost.stream = nullptr;
  onHost.count = chunk.bytes / elementBytes;
  onHost.send = host + chunk.offset;
  onHost.recv = host + chunk.offset;
  return onHost;
}

// Chunk i's device->host copy (where this rank has input), then `ready` recorded behind it.
void copyChunkIn(Device& device, char* host, const CollArgs& args, bool hasInput, size_t i,
                 size_t total, size_t chunkBytes, DeviceEvent& ready) {
  Chunk chunk = chunkAt(i, total, chunkBytes);
  if (hasInput && chunk.bytes > 0)
    device.copyAsync(host + chunk.offset, static_cast<const char*>(args.send) + chunk.offset,
                     chunk.bytes, CopyKind::kDeviceToHost, args.stream);
  device.recordEvent(ready, args.stream);
}

}  // namespace

bool elementwise(loomFunc_t func) {
  return func == loomFuncAllReduce || func == loomFuncReduce || func == loomFuncBroadcast;
}

size_t heteroChunkBytes(size_t bytes, size_t elementBytes, size_t configured) {
  // Enough chunks to overlap copies with the exchange, each large enough that the per-chunk
  // costs (a host algorithm's synchronization, a device operation's launch: ~10 us on CUDA,
  // ~100 us on the emulated device) stay small against its bytes. Measured on one H100 with 3 and
  // 7 CPU ranks (docs/benchmarks.md): below 1 MiB chunks gained nothing.
  constexpr size_t kMinChunk = 1 << 20, kMaxChunk = 4 << 20;
  size_t chunk = configured > 0 ? configured : std::clamp(bytes / 8, kMinChunk, kMaxChunk);
  chunk -= chunk % elementBytes;
  return std::max(chunk, elementBytes);
}

void runChunked(const ChunkAlgorithm& select, const AlgoContext& ctx, const CollArgs& args,
                size_t chunkBytes) {
  const size_t elementBytes = dtypeSize(args.dtype), total = args.count * elementBytes;
  for (size_t i = 0, n = chunkCount(total, chunkBytes); i < n; ++i) {
    Chunk chunk = chunkAt(i, total, chunkBytes);
    runAlgorithm(select(chunk.bytes), ctx, chunkArgs(args, chunk, elementBytes));
  }
}

StagingEvents::StagingEvents(Device& device) {
  for (int i = 0; i <= kLookahead; ++i) events_.push_back(device.createEvent());
}

void runPipelinedStaged(const ChunkAlgorithm& select, const AlgoContext& hostCtx, Device& device,
                        HostStaging& staging, StagingEvents& events, const CollArgs& args,
                        size_t chunkBytes) {
  const size_t elementBytes = dtypeSize(args.dtype), total = args.count * elementBytes;
  const auto [hasInput, takesOutput] = rolesOf(args, hostCtx.rank);
  char* host = staging.recv(total);
  staging.releaseRetired();  // blocking calls: nothing in flight uses old staging memory
  char* recv = static_cast<char*>(args.recv);
  const size_t n = chunkCount(total, chunkBytes);
  auto copyIn = [&](size_t i) {
    copyChunkIn(device, host, args, hasInput, i, total, chunkBytes, events[i]);
  };
  try {
    for (size_t i = 0; i < std::min<size_t>(n, StagingEvents::kLookahead); ++i) copyIn(i);
    for (size_t i = 0; i < n; ++i) {
      DeviceEvent& ready = events[i];
      hostCtx.wait([&] { return device.eventDone(ready); }, -1);
      Chunk chunk = chunkAt(i, total, chunkBytes);
      runAlgorithm(select(chunk.bytes), hostCtx, hostChunkArgs(args, host, chunk, elementBytes));
      if (takesOutput && chunk.bytes > 0)
        device.copyAsync(recv + chunk.offset, host + chunk.offset, chunk.bytes,
                         CopyKind::kHostToDevice, args.stream);
      if (i + StagingEvents::kLookahead < n) copyIn(i + StagingEvents::kLookahead);
    }
  } catch (...) {
    // A failure (a peer's, the device's) must not leave copies in flight into the staging
    // memory, which the abort or destroy that follows may release: drain the stream first.
    try {
      device.synchronize(args.stream);
    } catch (...) {
      // The device's own failure: the error being reported already says it.
    }
    throw;
  }
  // The staging memory is reused by the next call: its copies must be done with it.
  device.synchronize(args.stream);
}

int enqueuePipelinedStaged(Device& device, StreamGate& gate, char* host, const CollArgs& args,
                           size_t chunkBytes, int rank, DeviceEvent* const* inputs,
                           EnqueueProgress& progress) {
  const size_t total = args.count * dtypeSize(args.dtype);
  const auto [hasInput, takesOutput] = rolesOf(args, rank);
  char* recv = static_cast<char*>(args.recv);
  const size_t n = chunkCount(total, chunkBytes);
  auto copyIn = [&](size_t i) {
    copyChunkIn(device, host, args, hasInput, i, total, chunkBytes, *inputs[i]);
    progress.recorded.store(i + 1, std::memory_order_release);
  };
  // The blocking schedule's order on the stream: copies in run the lookahead ahead of the gate
  // and copy out of each chunk, so the copies of chunk c+k overlap the exchange of chunk c.
  int gates = 0;
  for (size_t i = 0; i < std::min<size_t>(n, StagingEvents::kLookahead); ++i) copyIn(i);
  for (size_t i = 0; i < n; ++i) {
    Chunk chunk = chunkAt(i, total, chunkBytes);
    if (takesOutput) {
      device.enqueueHostTask(gate, args.stream);
      ++gates;
      if (chunk.bytes > 0)
        device.copyAsync(recv + chunk.offset, host + chunk.offset, chunk.bytes,
                         CopyKind::kHostToDevice, args.stream);
    }
    if (i + StagingEvents::kLookahead < n) copyIn(i + StagingEvents::kLookahead);
  }
  // No output: one gate at the end still holds the next call's copies out of the staging memory
  // until this call's host part is done with it.
  if (!takesOutput) {
    device.enqueueHostTask(gate, args.stream);
    ++gates;
  }
  return gates;
}

void runPipelinedHost(const ChunkAlgorithm& select, const AlgoContext& hostCtx, Device& device,
                      StreamGate& gate, char* host, const CollArgs& args, size_t chunkBytes,
                      DeviceEvent* const* inputs, const EnqueueProgress& progress) {
  const size_t elementBytes = dtypeSize(args.dtype), total = args.count * elementBytes;
  const bool takesOutput = rolesOf(args, hostCtx.rank).takesOutput;
  for (size_t i = 0, n = chunkCount(total, chunkBytes); i < n; ++i) {
    DeviceEvent& ready = *inputs[i];
    auto recorded = [&] { return progress.recorded.load(std::memory_order_acquire) > i; };
    hostCtx.wait([&] { return recorded() || progress.abandoned.load(std::memory_order_acquire); },
                 -1);
    if (!recorded())
      LOOM_THROW(loomInternalError, "the call failed on its rank while its chunk ", i,
                 " was enqueued on the stream");
    hostCtx.wait([&] { return device.eventDone(ready); }, -1);
    Chunk chunk = chunkAt(i, total, chunkBytes);
    runAlgorithm(select(chunk.bytes), hostCtx, hostChunkArgs(args, host, chunk, elementBytes));
    if (takesOutput) gate.release();
  }
  if (!takesOutput) gate.release();
}

}  // namespace loom
