// The bytes an expert-parallel call moves between ranks, one format for every path: a rank's
// "chunk" starts with a header (what the call was on that rank, so that ranks compare their calls
// before reading each other's data) and holds the tokens (or combine rows) of one round. On one
// host a rank writes its chunk into its own shared buffer and the peers read from it
// (ep/ep_shm*); across hosts it sends each peer the part of it that peer needs, in the same
// format (ep/ep_wire_path.cpp); a backend's kernels use it in device memory (native_ep.hpp).
// Here, below both, so that the host paths and the device kernels share it.
//
// Every section starts at a multiple of 64 bytes, so rows stay aligned for vector loads.
#pragma once

#include <cstddef>
#include <cstdint>

#include "base/dtype.hpp"  // LOOM_HOST_DEVICE: the kernels compute the same offsets
#include "loom/loom.h"

namespace loom::ep {

inline constexpr size_t kAlign = 64;
LOOM_HOST_DEVICE inline constexpr size_t align64(size_t bytes) {
  return (bytes + kAlign - 1) & ~(kAlign - 1);
}
inline constexpr int kScaleGroup = 128;  // FP8: one fp32 scale per this many values

enum class CallKind : uint32_t {
  kNone = 0,
  kDispatchCounts = 1,
  kDispatch = 2,
  kCombine = 3,
  kLowLatencyDispatch = 4,
  kLowLatencyCombine = 5,
};
const char* callKindName(CallKind kind);

// Flag bits of a call's shape.
inline constexpr uint32_t kHasWeights = 1u << 0;
inline constexpr uint32_t kCached = 1u << 1;  // a dispatch that reuses its handle's layout
inline constexpr uint32_t kFp8 = 1u << 2;
inline constexpr uint32_t kRoundScale = 1u << 3;
inline constexpr uint32_t kUe8m0 = 1u << 4;

// What must agree across ranks for their calls to meet.
struct CallShape {
  CallKind kind = CallKind::kNone;
  int32_t hidden = 0;
  int32_t dtype = 0;
  int32_t topk = 0;
  int32_t numScales = 0;
  uint32_t flags = 0;
  bool operator==(const CallShape&) const = default;
};

struct alignas(kAlign) CallHeader {
  uint64_t step = 0;  // shared memory: the round it belongs to
  CallShape shape;
  int32_t status = loomSuccess;  // this rank's arguments: loomSuccess or loomInvalidArgument
  int32_t numTokens = 0;         // the rank's tokens (a combine: its tokens at the dispatch)
  int32_t count = 0;             // entries of this chunk
  int32_t first = 0;             // dispatch: the chunk's first token
  char reason[184] = {};         // status's message
};
static_assert(sizeof(CallHeader) == 256);

// Normal dispatch. After the header: the counts block (tokens to each rank, then to each
// expert; filled where the call counts), then, for `count` tokens (those of one round that some
// reader needs): their index, their row of isTokenInRank, their global expert ids and weights
// (topk of each; absent in a cached dispatch), their FP8 scales, their rows.
struct DispatchFormat {
  int nranks = 0, numExperts = 0, topk = 0, numScales = 0;
  bool weights = false;
  size_t rowBytes = 0;

  LOOM_HOST_DEVICE size_t countsOffset() const { return sizeof(CallHeader); }
  LOOM_HOST_DEVICE size_t countsBytes() const {
    return align64(sizeof(int32_t) * (nranks + numExperts));
  }
  LOOM_HOST_DEVICE size_t fixedBytes() const { return countsOffset() + countsBytes(); }
  LOOM_HOST_DEVICE size_t rankBytes() const {
    return (static_cast<size_t>(nranks) + 7) & ~size_t{7};
  }
  LOOM_HOST_DEVICE size_t rowStride() const { return align64(rowBytes); }
  // Bytes of one token in a chunk, and of a chunk of n tokens (its sections aligned).
  LOOM_HOST_DEVICE size_t tokenBytes() const {
    return sizeof(int32_t) + rankBytes() + sizeof(int32_t) * topk +
           (weights ? sizeof(float) * topk : 0) + sizeof(float) * numScales + rowStride();
  }
  LOOM_HOST_DEVICE size_t chunkBytes(size_t n) const { return rowsOffset(n) + n * rowStride(); }
  LOOM_HOST_DEVICE size_t indexOffset() const { return fixedBytes(); }
  LOOM_HOST_DEVICE size_t inRankOffset(size_t n) const {
    return indexOffset() + align64(sizeof(int32_t) * n);
  }
  LOOM_HOST_DEVICE size_t topkOffset(size_t n) const {
    return inRankOffset(n) + align64(rankBytes() * n);
  }
  LOOM_HOST_DEVICE size_t weightsOffset(size_t n) const {
    return topkOffset(n) + align64(sizeof(int32_t) * topk * n);
  }
  LOOM_HOST_DEVICE size_t scalesOffset(size_t n) const {
    return weightsOffset(n) + (weights ? align64(sizeof(float) * topk * n) : 0);
  }
  LOOM_HOST_DEVICE size_t rowsOffset(size_t n) const {
    return scalesOffset(n) + align64(sizeof(float) * numScales * n);
  }
  // The most tokens a chunk of `bytes` holds (at least 1 if it holds a chunk of one at all).
  LOOM_HOST_DEVICE size_t capacity(size_t bytes) const {
    const size_t slack = 6 * kAlign;
    if (bytes < fixedBytes() + slack + tokenBytes()) return 0;
    return (bytes - fixedBytes() - slack) / tokenBytes();
  }
};

// Normal combine: a holder's rows for the tokens of one round of every origin. After the header,
// per origin o: where its rows start in the chunk, the holder's received-row index of the first
// of them, and how many; then the rows' top-k weights (if any), then the rows.
struct CombineFormat {
  int nranks = 0, topk = 0;
  bool weights = false;
  size_t rowBytes = 0;

  LOOM_HOST_DEVICE size_t originsOffset() const { return sizeof(CallHeader); }
  LOOM_HOST_DEVICE size_t fixedBytes() const {
    return originsOffset() + align64(sizeof(int32_t) * 3 * nranks);
  }
  LOOM_HOST_DEVICE size_t rowStride() const { return align64(rowBytes); }
  LOOM_HOST_DEVICE size_t weightsOffset() const { return fixedBytes(); }
  LOOM_HOST_DEVICE size_t rowsOffset(size_t n) const {
    return weightsOffset() + (weights ? align64(sizeof(float) * topk * n) : 0);
  }
  LOOM_HOST_DEVICE size_t chunkBytes(size_t n) const { return rowsOffset(n) + n * rowStride(); }
  // Tokens of every origin per round that a chunk of `bytes` holds.
  LOOM_HOST_DEVICE size_t tokensPerRound(size_t bytes) const {
    const size_t slack = 2 * kAlign;
    const size_t perToken =
        static_cast<size_t>(nranks) * (rowStride() + (weights ? sizeof(float) * topk : 0));
    if (bytes < fixedBytes() + slack + perToken) return 0;
    return (bytes - fixedBytes() - slack) / perToken;
  }
};

// Low-latency dispatch: after the header, `count` tokens: their index, their global expert ids
// (topk each), their rows (bf16; or e4m3 values followed by their fp32 scales).
struct LowLatencyDispatchFormat {
  int topk = 0, hidden = 0;
  bool fp8 = false;

  LOOM_HOST_DEVICE int scaleGroups() const { return (hidden + kScaleGroup - 1) / kScaleGroup; }
  LOOM_HOST_DEVICE size_t rowBytes() const {
    return fp8 ? align64(static_cast<size_t>(hidden)) + sizeof(float) * scaleGroups()
               : sizeof(uint16_t) * static_cast<size_t>(hidden);
  }
  LOOM_HOST_DEVICE size_t rowStride() const { return align64(rowBytes()); }
  LOOM_HOST_DEVICE size_t indexOffset() const { return sizeof(CallHeader); }
  LOOM_HOST_DEVICE size_t topkOffset(size_t n) const {
    return indexOffset() + align64(sizeof(int32_t) * n);
  }
  LOOM_HOST_DEVICE size_t rowsOffset(size_t n) const {
    return topkOffset(n) + align64(sizeof(int32_t) * topk * n);
  }
  LOOM_HOST_DEVICE size_t chunkBytes(size_t n) const { return rowsOffset(n) + n * rowStride(); }
};

// Low-latency combine, shared memory: after the header, the holder's layout ranges
// [localExperts][nranks] (begin << 32 | count), then its rows [localExperts][M * nranks][hidden]
// in bf16, as the dispatch received them (the zero-copy buffer).
struct LowLatencyCombineFormat {
  int nranks = 0, localExperts = 0, maxTokens = 0, hidden = 0;

  LOOM_HOST_DEVICE size_t rangesOffset() const { return sizeof(CallHeader); }
  LOOM_HOST_DEVICE size_t rowsOffset() const {
    return rangesOffset() + align64(sizeof(int64_t) * localExperts * nranks);
  }
  LOOM_HOST_DEVICE size_t rowBytes() const {
    return sizeof(uint16_t) * static_cast<size_t>(hidden);
  }
  LOOM_HOST_DEVICE size_t expertRows() const { return static_cast<size_t>(maxTokens) * nranks; }
  LOOM_HOST_DEVICE size_t bytes() const {
    return rowsOffset() + localExperts * expertRows() * rowBytes();
  }
};

LOOM_HOST_DEVICE inline int64_t packRange(int begin, int count) {
  return static_cast<int64_t>(static_cast<uint64_t>(static_cast<uint32_t>(begin)) << 32 |
                              static_cast<uint32_t>(count));
}
LOOM_HOST_DEVICE inline int rangeBegin(int64_t range) {
  return static_cast<int>(static_cast<uint64_t>(range) >> 32);
}
LOOM_HOST_DEVICE inline int rangeCount(int64_t range) {
  return static_cast<int>(range & 0xffffffff);
}

}  // namespace loom::ep
