// Device-side helpers of the expert-parallel kernels: the control words of a rank's region,
// waits that give up past the timeout, the header comparison every pulling block does, block-wide
// scans and copies, and the "last block" ticket that lets one kernel post its round when every
// block of it is done.
#pragma once

#include <cstddef>
#include <cstdint>

#include "base/dtype.hpp"
#include "device/cuda/collectives/primitives.cuh"
#include "device/cuda/ep/ep_kernels.hpp"

namespace loom::cuda::ep {

using loom::ep::CallHeader;
using loom::ep::CallKind;

__device__ __forceinline__ uint64_t* word(const EpRegions& d, int rank, size_t offset) {
  return reinterpret_cast<uint64_t*>(d.region[rank] + offset);
}
__device__ __forceinline__ char* normalChunk(const EpRegions& d, int rank, uint64_t step) {
  return d.region[rank] + d.normalOffset + (step & 1) * d.normalBytes;
}
__device__ __forceinline__ char* llDispatchChunk(const EpRegions& d, int rank, int buffer) {
  return d.region[rank] + d.llOffset + buffer * (d.llDispatchBytes + d.llCombineBytes);
}
__device__ __forceinline__ char* llCombineChunk(const EpRegions& d, int rank, int buffer) {
  return llDispatchChunk(d, rank, buffer) + d.llDispatchBytes;
}
// Source `source`'s inbox on rank `owner` (ep_kernels.hpp: inboxBytes) and its parts.
__device__ __forceinline__ char* llInbox(const EpRegions& d, int owner, int buffer, int source) {
  return llDispatchChunk(d, owner, buffer) + d.llInboxOffset +
         static_cast<size_t>(source) * inboxBytes(d.localExperts, d.maxTokens);
}
__device__ __forceinline__ uint64_t* inboxPosted(char* inbox) {
  return reinterpret_cast<uint64_t*>(inbox);
}
__device__ __forceinline__ uint4* inboxHeader(char* inbox) {
  return reinterpret_cast<uint4*>(inbox + 64);
}
__device__ __forceinline__ int32_t* inboxCounts(char* inbox) {
  return reinterpret_cast<int32_t*>(inbox + kInboxTokensStart);
}
__device__ __forceinline__ int32_t* inboxTokens(const EpRegions& d, char* inbox, int localExpert) {
  return reinterpret_cast<int32_t*>(inbox + kInboxTokensStart + inboxCountsBytes(d.localExperts)) +
         static_cast<size_t>(localExpert) * d.maxTokens;
}

// The first error wins; every later wait of this object gives up at once.
__device__ __forceinline__ void record(const EpRegions& d, int error, int peer) {
  volatile EpStatus* s = d.status;
  if (s->error == kEpOk) {
    s->peer = peer;
    s->error = error;
  }
  __threadfence_system();
}

__device__ __forceinline__ bool failed(const EpRegions& d) {
  return static_cast<volatile EpStatus*>(d.status)->error != kEpOk;
}

// Waits until *w >= target (acquire: what was written before it is visible); false when the
// wait gave up (past the timeout, or another wait of this object did).
__device__ __forceinline__ bool waitAtLeast(const EpRegions& d, const uint64_t* w, uint64_t target,
                                            int peer) {
  uint64_t start = 0;
  uint32_t spins = 0;
  while (loadAcquire(w) < target) {
    if ((++spins & 1023) != 0) continue;
    if (static_cast<volatile EpStatus*>(d.status)->error == kEpTimeout) return false;
    const uint64_t now = globalTimer();
    if (start == 0) start = now;
    if (now - start > d.timeoutNs) {
      record(d, kEpTimeout, peer);
      return false;
    }
  }
  return true;
}

// Thread r < nranks waits for rank r's word at `offset`; every thread learns whether all did.
__device__ __forceinline__ bool waitAllRanks(const EpRegions& d, size_t offset, uint64_t target) {
  __shared__ int ok;
  if (threadIdx.x == 0) ok = 1;
  __syncthreads();
  if (threadIdx.x < d.nranks && !waitAtLeast(d, word(d, threadIdx.x, offset), target, threadIdx.x))
    ok = 0;
  __syncthreads();
  return ok != 0;
}

// Thread r < nranks waits until *wordOf(r) >= target; every thread learns whether all did.
template <typename WordOf>
__device__ __forceinline__ bool waitAllWords(const EpRegions& d, uint64_t target, WordOf wordOf) {
  __shared__ int ok;
  if (threadIdx.x == 0) ok = 1;
  __syncthreads();
  if (threadIdx.x < d.nranks && !waitAtLeast(d, wordOf(threadIdx.x), target, threadIdx.x)) ok = 0;
  __syncthreads();
  return ok != 0;
}

__device__ __forceinline__ bool sameShape(const CallShape& a, const CallShape& b) {
  return a.kind == b.kind && a.hidden == b.hidden && a.dtype == b.dtype && a.topk == b.topk &&
         a.numScales == b.numScales && a.flags == b.flags;
}

// Rank r's header against this rank's call: records why not and returns false when the calls
// cannot meet (another call, a bad verdict, another shape).
__device__ __forceinline__ bool headerAgrees(const EpRegions& d, const CallHeader* h,
                                             const CallShape& mine, int r) {
  if (h->shape.kind != mine.kind) return record(d, kEpCallsDiffer, r), false;
  if (h->status != loomSuccess) return record(d, kEpBadArgument, r), false;
  if (!sameShape(h->shape, mine)) return record(d, kEpShapesDiffer, r), false;
  return true;
}

// Every rank's header is read in parallel (thread r: rank r's first kHeaderVectors * 16 bytes:
// step, shape, status, counts) into shared `headers`, then compared with this rank's call in
// rank order, so the first disagreement is the one recorded. Over NVLink a field-by-field check
// of one rank after another costs a round trip per field. The result is the same in every thread.
constexpr int kHeaderVectors = 3;
static_assert(offsetof(CallHeader, first) + sizeof(int32_t) <= 16 * kHeaderVectors);
using HeaderCopies = uint4[kMaxRanks][kHeaderVectors];

__device__ __forceinline__ const CallHeader* headerCopy(const HeaderCopies& headers, int r) {
  return reinterpret_cast<const CallHeader*>(headers[r]);
}

template <typename ChunkOf>
__device__ __forceinline__ bool headersAgree(const EpRegions& d, const CallShape& mine, bool ok,
                                             HeaderCopies& headers, ChunkOf chunkOf) {
  __shared__ int agree;
  if (ok && threadIdx.x < d.nranks) {
    const uint4* h = reinterpret_cast<const uint4*>(chunkOf(threadIdx.x));
#pragma unroll
    for (int j = 0; j < kHeaderVectors; ++j) headers[threadIdx.x][j] = __ldcg(h + j);
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    agree = ok;
    for (int r = 0; r < d.nranks && agree; ++r)
      agree = headerAgrees(d, headerCopy(headers, r), mine, r);
  }
  __syncthreads();
  return agree != 0;
}

// Called by every block at its end: true in the one block that ends last (its writes and every
// other block's are then visible to it). The ticket is reset for the next launch.
__device__ __forceinline__ bool lastBlock(unsigned int* ticket) {
  __shared__ bool last;
  __syncthreads();
  if (threadIdx.x == 0) {
    __threadfence();
    last = atomicAdd(ticket, 1u) == gridDim.x - 1;
    if (last) atomicExch(ticket, 0u);
  }
  __syncthreads();
  if (last) __threadfence();
  return last;
}

// Block-wide exclusive prefix sum of one value per thread (blockDim.x a multiple of 32, at most
// 1024); *total gets the block's sum.
__device__ __forceinline__ int blockScan(int value, int* total) {
  __shared__ int warpSums[32];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
  int inclusive = value;
  for (int o = 1; o < 32; o <<= 1) {
    const int v = __shfl_up_sync(0xffffffffu, inclusive, o);
    if (lane >= o) inclusive += v;
  }
  if (lane == 31) warpSums[warp] = inclusive;
  __syncthreads();
  if (warp == 0) {
    int s = lane < warps ? warpSums[lane] : 0;
    for (int o = 1; o < 32; o <<= 1) {
      const int v = __shfl_up_sync(0xffffffffu, s, o);
      if (lane >= o) s += v;
    }
    warpSums[lane] = s;  // inclusive over warps
  }
  __syncthreads();
  const int before = warp == 0 ? 0 : warpSums[warp - 1];
  *total = warpSums[warps - 1];
  __syncthreads();
  return before + inclusive - value;
}

__device__ __forceinline__ int blockSum(int value) {
  int total = 0;
  blockScan(value, &total);
  return total;
}

// `bytes` from src to dst by the threads [first, first + count) of the block: 16-byte steps where
// both are aligned to 16 (bytes otherwise), kInFlight loads issued before their stores. Rows are
// read over NVLink, where one load at a time (the compiler cannot reorder a load past a store
// that may alias it) leaves the link idle for a round trip per 16 bytes.
constexpr int kInFlight = 8;
__device__ __forceinline__ void copyBytes(char* dst, const char* src, size_t bytes, int first,
                                          int count) {
  const int t = threadIdx.x - first;
  if (t < 0 || t >= count) return;
  if (((reinterpret_cast<uintptr_t>(dst) | reinterpret_cast<uintptr_t>(src)) & 15) == 0) {
    const size_t vectors = bytes / 16;
    const uint4* in = reinterpret_cast<const uint4*>(src);
    uint4* out = reinterpret_cast<uint4*>(dst);
    for (size_t i = t; i < vectors; i += kInFlight * count) {
      uint4 v[kInFlight];
#pragma unroll
      for (int j = 0; j < kInFlight; ++j)
        if (i + j * count < vectors) v[j] = __ldcg(in + i + j * count);
#pragma unroll
      for (int j = 0; j < kInFlight; ++j)
        if (i + j * count < vectors) out[i + j * count] = v[j];
    }
    for (size_t b = vectors * 16 + t; b < bytes; b += count) dst[b] = src[b];
    return;
  }
  for (size_t i = t; i < bytes; i += count) dst[i] = src[i];
}

// Values of a combine's data type, as fp32 (no fused multiply-add anywhere: the host paths'
// rounding, bit for bit).
__device__ __forceinline__ float loadValue(const char* row, int i, loomDataType_t dtype) {
  if (dtype == loomBfloat16) return bf16ToFloat(reinterpret_cast<const uint16_t*>(row)[i]);
  if (dtype == loomFloat16) return halfToFloat(reinterpret_cast<const uint16_t*>(row)[i]);
  return reinterpret_cast<const float*>(row)[i];
}
__device__ __forceinline__ void storeValue(char* row, int i, loomDataType_t dtype, float v) {
  if (dtype == loomBfloat16)
    reinterpret_cast<uint16_t*>(row)[i] = floatToBf16(v);
  else if (dtype == loomFloat16)
    reinterpret_cast<uint16_t*>(row)[i] = floatToHalf(v);
  else
    reinterpret_cast<float*>(row)[i] = v;
}

// Eight 16-bit values (bf16 or fp16) at once: rows are read 16 bytes per thread where their
// addresses allow it, since 2-byte loads leave NVLink mostly idle. Each value is still added on
// its own, in the same order as the scalar path (bit for bit the same sums).
__device__ __forceinline__ bool sixteenAligned(const void* p) {
  return (reinterpret_cast<uintptr_t>(p) & 15) == 0;
}
__device__ __forceinline__ void addEight(float* acc, const char* row, int group,
                                         loomDataType_t dtype) {
  const uint4 raw = reinterpret_cast<const uint4*>(row)[group];
  const uint16_t* h = reinterpret_cast<const uint16_t*>(&raw);
#pragma unroll
  for (int i = 0; i < 8; ++i)
    acc[i] = __fadd_rn(acc[i], dtype == loomBfloat16 ? bf16ToFloat(h[i]) : halfToFloat(h[i]));
}
__device__ __forceinline__ void storeEight(char* row, int group, loomDataType_t dtype,
                                           const float* values) {
  uint4 raw;
  uint16_t* h = reinterpret_cast<uint16_t*>(&raw);
#pragma unroll
  for (int i = 0; i < 8; ++i)
    h[i] = dtype == loomBfloat16 ? floatToBf16(values[i]) : floatToHalf(values[i]);
  reinterpret_cast<uint4*>(row)[group] = raw;
}

// acc[i] += (weights[k] *) value i of group `group` of rows[k], for k in [0, count) in order
// (null rows skipped): the loads of up to eight rows are in flight together, the adds keep the
// scalar path's order and rounding (no fused multiply-add), so the sums are bit for bit the same.
template <bool kWeighted>
__device__ __forceinline__ void addEightRows(float* acc, const char* const* rows,
                                             const float* weights, int count, int group,
                                             loomDataType_t dtype) {
  for (int k0 = 0; k0 < count; k0 += 8) {
    uint4 raw[8];
#pragma unroll
    for (int j = 0; j < 8; ++j) {
      raw[j] = make_uint4(0, 0, 0, 0);
      if (k0 + j < count && rows[k0 + j] != nullptr)
        raw[j] = __ldcg(reinterpret_cast<const uint4*>(rows[k0 + j]) + group);
    }
#pragma unroll
    for (int j = 0; j < 8; ++j) {
      if (k0 + j >= count || rows[k0 + j] == nullptr) continue;
      const uint16_t* h = reinterpret_cast<const uint16_t*>(&raw[j]);
#pragma unroll
      for (int i = 0; i < 8; ++i) {
        const float v = dtype == loomBfloat16 ? bf16ToFloat(h[i]) : halfToFloat(h[i]);
        acc[i] = __fadd_rn(acc[i], kWeighted ? __fmul_rn(weights[k0 + j], v) : v);
      }
    }
  }
}

// The sum of one value per lane over the warp.
__device__ __forceinline__ int warpSum(int value) {
  for (int o = 16; o > 0; o >>= 1) value += __shfl_xor_sync(0xffffffffu, value, o);
  return value;
}

}  // namespace loom::cuda::ep
