#include "algorithms/chunked.hpp"

#include <algorithm>

#include "algorithms/partition.hpp"
#include "base/dtype.hpp"
#include "base/error.hpp"

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

}  // namespace

CollArgs chunkOfCall(const CollArgs& args, size_t index, size_t chunkBytes) {
  const size_t elementBytes = dtypeSize(args.dtype);
  const Chunk chunk = chunkAt(index, args.count * elementBytes, chunkBytes);
  CollArgs c = args;
  c.count = chunk.bytes / elementBytes;
  if (c.send != nullptr) c.send = static_cast<const char*>(args.send) + chunk.offset;
  if (c.recv != nullptr) c.recv = static_cast<char*>(args.recv) + chunk.offset;
  return c;
}

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
    const CollArgs part = chunkOfCall(args, i, chunkBytes);
    runAlgorithm(select(part.count * elementBytes), ctx, part);
  }
}

void buildPipelined(Schedule& s, const CollArgs& args, int rank, size_t chunkBytes) {
  const size_t total = args.count * dtypeSize(args.dtype);
  // Named members, not a structured binding: the lambdas below capture it, which clang before 16
  // refuses (make fuzz builds with the system's clang).
  const Roles roles = rolesOf(args, rank);
  const bool hasInput = roles.hasInput, takesOutput = roles.takesOutput;
  s.setExtents(hasInput ? total : 0, takesOutput ? total : 0);
  const uint16_t stage = s.addStaging("stage", total);
  const size_t n = chunkCount(total, chunkBytes);
  // The device lane in the blocking schedule's order: copies in run kLookahead chunks ahead of
  // each chunk's copy out, so the copies of chunk c+k overlap the exchange of chunk c.
  auto copyIn = [&](size_t i) {
    const Chunk c = chunkAt(i, total, chunkBytes);
    return hasInput && c.bytes > 0 ? s.deviceCopy(s.scratch(stage, c.offset), s.input(c.offset),
                                                  c.bytes, CopyKind::kDeviceToHost)
                                   : s.deviceMarker();
  };
  uint32_t in[kLookahead + 1] = {};
  for (size_t i = 0; i < std::min(n, kLookahead); ++i) in[i % (kLookahead + 1)] = copyIn(i);
  uint32_t host = 0;
  for (size_t i = 0; i < n; ++i) {
    host = s.call(static_cast<uint32_t>(i));
    s.after(host, in[i % (kLookahead + 1)]);
    if (takesOutput) {
      const Chunk c = chunkAt(i, total, chunkBytes);
      s.after(c.bytes > 0 ? s.deviceCopy(s.output(c.offset), s.scratch(stage, c.offset), c.bytes,
                                         CopyKind::kHostToDevice)
                          : s.deviceMarker(),
              host);
    }
    if (i + kLookahead < n) in[(i + kLookahead) % (kLookahead + 1)] = copyIn(i + kLookahead);
  }
  if (!takesOutput) s.after(s.deviceMarker(), host);
}

void addPipelinedCalls(AlgorithmCalls& calls, const ChunkAlgorithm& select, const Schedule& s,
                       std::span<char* const> bound, const CollArgs& args, size_t chunkBytes) {
  const size_t elementBytes = dtypeSize(args.dtype), total = args.count * elementBytes;
  LOOM_CHECK_INTERNAL(s.buffers().size() == 3 && s.buffers()[2].staging,
                      "not a pipelined schedule");
  char* host = bound[2];  // the "stage" buffer
  for (size_t i = 0, n = chunkCount(total, chunkBytes); i < n; ++i) {
    const Chunk chunk = chunkAt(i, total, chunkBytes);
    CollArgs onHost = args;
    onHost.stream = nullptr;
    onHost.count = chunk.bytes / elementBytes;
    onHost.send = host + chunk.offset;
    onHost.recv = host + chunk.offset;
    calls.add(select(chunk.bytes), onHost);
  }
}

}  // namespace loom
