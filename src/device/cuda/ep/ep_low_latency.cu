// Low-latency dispatch and combine on CUDA GPUs, each a send kernel and a receive kernel on the
// caller's stream (a hook launches the receive kernel later), with at most kLowLatencyBlocks
// blocks each and no host synchronization: every step number lives in device memory, so a
// captured CUDA graph replays them. The formats, orders and sums are the shared-memory path's
// (ep/ep_shm_low_latency.cpp): all tokens staged once (FP8 quantized by DeepEP's recipe, bit for
// bit the host's), pulled per local expert in source order; combine sums weight * row in top-k
// order in fp32 without fused multiply-adds.
#include "base/error.hpp"
#include "device/cuda/ep/ep_dev.cuh"

namespace loom::cuda::ep {

namespace {

using loom::ep::LowLatencyCombineFormat;
using loom::ep::LowLatencyDispatchFormat;

constexpr int kLane = 1;  // low latency

__device__ __forceinline__ uint64_t beginSend(const EpRegions& d) {
  return *word(d, d.rank, kSendStepOffset) + 1;
}

// The last block of a send kernel: the header, the post, and the step the receive will use.
__device__ void postSend(const EpRegions& d, char* chunk, int slot, uint64_t step,
                         const CallShape& shape, int status, int numTokens, int count) {
  CallHeader* h = reinterpret_cast<CallHeader*>(chunk);
  h->step = step;
  h->shape = shape;
  h->status = status;
  h->numTokens = numTokens;
  h->count = count;
  __threadfence_system();
  storeRelease(word(d, d.rank, postedOffset(kLane, slot)), step);
  *word(d, d.rank, pendingOffset(slot)) = step;
  *word(d, d.rank, kSendStepOffset) = step;
}

// 2^ceil(log2(v)) for a positive normal float (the host's powerOfTwoCeil).
__device__ __forceinline__ float powerOfTwoCeil(float v) {
  const uint32_t bits = __float_as_uint(v);
  const int exponent = static_cast<int>((bits >> 23) & 0xff) - 127 + ((bits & 0x7fffff) ? 1 : 0);
  return __uint_as_float(static_cast<uint32_t>(exponent + 127) << 23);
}

// A bf16 row into e4m3 values and one scale per 128 values, a warp per group.
__device__ void quantizeRow(const uint16_t* in, int hidden, bool round, uint8_t* values,
                            float* scales) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
  for (int g = warp; g * loom::ep::kScaleGroup < hidden; g += warps) {
    const int begin = g * loom::ep::kScaleGroup;
    const int end = min(hidden, begin + loom::ep::kScaleGroup);
    float amax = 1e-4f;
    for (int i = begin + lane; i < end; i += 32) amax = fmaxf(amax, fabsf(bf16ToFloat(in[i])));
    for (int o = 16; o > 0; o >>= 1) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
    float scale = __fdiv_rn(448.0f, amax), scaleInv = __fdiv_rn(amax, 448.0f);
    if (round) {
      scaleInv = powerOfTwoCeil(scaleInv);
      scale = __fdiv_rn(1.0f, scaleInv);
    }
    for (int i = begin + lane; i < end; i += 32)
      values[i] = floatToE4m3(__fmul_rn(bf16ToFloat(in[i]), scale));
    if (lane == 0) scales[g] = scaleInv;
  }
}

// This rank's tokens that pick each expert, in token order, and their number (a warp per
// expert, 32 tokens per ballot), written into this rank's inbox on the expert's rank: the
// receivers read where their rows are from their own memory.
__device__ void listTokensPerExpert(const EpRegions& d, int slot, const int64_t* topkIdx, int topk,
                                    int count) {
  const int lane = threadIdx.x & 31, warps = blockDim.x >> 5;
  for (int e = blockIdx.x * warps + (threadIdx.x >> 5); e < d.numExperts; e += gridDim.x * warps) {
    char* inbox = llInbox(d, e / d.localExperts, slot, d.rank);
    int32_t* tokens = inboxTokens(d, inbox, e % d.localExperts);
    int taken = 0;
    for (int base = 0; base < count; base += 32) {
      const int t = base + lane;
      bool picks = false;
      if (t < count) {
#pragma unroll 8
        for (int k = 0; k < topk; ++k) picks |= topkIdx[static_cast<size_t>(t) * topk + k] == e;
      }
      const unsigned mask = __ballot_sync(0xffffffffu, picks);
      if (picks) tokens[taken + __popc(mask & ((1u << lane) - 1))] = t;
      taken += __popc(mask);
    }
    if (lane == 0) inboxCounts(inbox)[e % d.localExperts] = taken;
  }
  // Each thread's writes to the peers are ordered before the post the last block makes.
  __threadfence_system();
}

// After postSend: this rank's header and post into its inbox on every rank (thread 0 of the last
// block; the lists are there already).
__device__ void postToInboxes(const EpRegions& d, const char* chunk, int slot, uint64_t step) {
  const uint4* header = reinterpret_cast<const uint4*>(chunk);
  for (int r = 0; r < d.nranks; ++r) {
    uint4* copy = inboxHeader(llInbox(d, r, slot, d.rank));
    for (int j = 0; j < kHeaderVectors; ++j) copy[j] = header[j];
  }
  __threadfence_system();
  for (int r = 0; r < d.nranks; ++r) storeRelease(inboxPosted(llInbox(d, r, slot, d.rank)), step);
}

__global__ void dispatchSendKernel(EpRegions d, CallShape shape, int status, int slot,
                                   loomEpLowLatencyDispatchArgs_t a) {
  const uint64_t step = beginSend(d);
  const bool ready = step <= 2 || waitAllRanks(d, consumedOffset(kLane, slot), step - 2);
  const LowLatencyDispatchFormat f{a.topk, a.hidden, a.useFp8 != 0};
  char* chunk = llDispatchChunk(d, d.rank, slot);
  const int count = ready && status == loomSuccess ? a.numTokens : 0;
  int32_t* index = reinterpret_cast<int32_t*>(chunk + f.indexOffset());
  int32_t* topk = reinterpret_cast<int32_t*>(chunk + f.topkOffset(count));
  char* rows = chunk + f.rowsOffset(count);
  unsigned long long* bad = reinterpret_cast<unsigned long long*>(word(d, d.rank, kBadIdsOffset));
  const uint16_t* x = static_cast<const uint16_t*>(a.x);
  for (int t = blockIdx.x; t < count; t += gridDim.x) {
    if (threadIdx.x == 0) index[t] = t;
    if (threadIdx.x < a.topk) {
      const int64_t e = a.topkIdx[static_cast<size_t>(t) * a.topk + threadIdx.x];
      if (e < -1 || e >= d.numExperts) atomicExch(bad, 1ull);
      topk[t * a.topk + threadIdx.x] = static_cast<int32_t>(e);
    }
    char* row = rows + t * f.rowStride();
    const uint16_t* in = x + static_cast<size_t>(t) * a.hidden;
    if (f.fp8)
      quantizeRow(in, a.hidden, a.roundScale != 0, reinterpret_cast<uint8_t*>(row),
                  reinterpret_cast<float*>(row + loom::ep::align64(a.hidden)));
    else
      copyBytes(row, reinterpret_cast<const char*>(in), 2 * static_cast<size_t>(a.hidden), 0,
                blockDim.x);
  }
  listTokensPerExpert(d, slot, a.topkIdx, a.topk, count);
  if (!lastBlock(reinterpret_cast<unsigned int*>(word(d, d.rank, ticketOffset(4)))) ||
      threadIdx.x != 0)
    return;
  const int verdict = atomicExch(bad, 0ull) != 0 ? loomInvalidArgument : status;
  postSend(d, chunk, slot, step, shape, verdict, count, count);
  postToInboxes(d, chunk, slot, step);
}

// Where this rank's received rows go: per local expert, where each source's rows start
// (start[el][s], s in [0, n], the sources in rank order) and where the expert's rows start among
// all received rows (rowStart[el], el in [0, local]), from every source's expert counts.
__device__ void buildDispatchTable(const EpRegions& d, int slot, int32_t* start,
                                   int32_t* rowStart) {
  const int n = d.nranks, local = d.localExperts, me = d.rank;
  for (int i = threadIdx.x; i < local * n; i += blockDim.x) {
    const int el = i / n, s = i % n;
    start[el * (n + 1) + s + 1] = __ldcg(inboxCounts(llInbox(d, me, slot, s)) + el);
  }
  __syncthreads();
  for (int el = threadIdx.x; el < local; el += blockDim.x) {
    int32_t* row = start + el * (n + 1);
    row[0] = 0;
    for (int s = 0; s < n; ++s) row[s + 1] += row[s];
  }
  __syncthreads();
  int carry = 0;
  for (int base = 0; base < local; base += blockDim.x) {
    const int el = base + threadIdx.x;
    int total = 0;
    const int before = blockScan(el < local ? start[el * (n + 1) + n] : 0, &total);
    if (el < local) rowStart[el] = carry + before;
    carry += total;
  }
  if (threadIdx.x == 0) rowStart[local] = carry;
  __syncthreads();
}

// Received row r (of all this rank's): its local expert (the last whose rows start at or before
// r), its source and its position among the expert's rows.
struct RowPlace {
  int el, src, pos;
};
__device__ __forceinline__ RowPlace placeRow(const int32_t* start, const int32_t* rowStart, int n,
                                             int local, int r) {
  int lo = 0, hi = local - 1;
  while (lo < hi) {
    const int mid = (lo + hi + 1) / 2;
    if (rowStart[mid] <= r)
      lo = mid;
    else
      hi = mid - 1;
  }
  const int pos = r - rowStart[lo];
  const int32_t* row = start + lo * (n + 1);
  int src = 0;
  while (row[src + 1] <= pos) ++src;
  return {lo, src, pos};
}

// A warp per received row: the row (and its FP8 scales) from its source's chunk into
// recvX[el][pos], read over NVLink.
__device__ void pullRow(const EpRegions& d, const loomEpLowLatencyDispatchArgs_t& a,
                        const loom::ep::LowLatencyDispatchFormat& f, int slot,
                        const HeaderCopies& headers, const int32_t* start, RowPlace p) {
  const int lane = threadIdx.x & 31, n = d.nranks;
  const size_t slots = static_cast<size_t>(d.maxTokens) * n;
  const int token = __ldcg(inboxTokens(d, llInbox(d, d.rank, slot, p.src), p.el) + p.pos -
                           start[p.el * (n + 1) + p.src]);
  const int count = headerCopy(headers, p.src)->count;
  const char* row = llDispatchChunk(d, p.src, slot) + f.rowsOffset(count) + token * f.rowStride();
  const size_t at = p.el * slots + p.pos;
  const size_t outRow = f.fp8 ? static_cast<size_t>(a.hidden) : 2 * static_cast<size_t>(a.hidden);
  copyBytes(static_cast<char*>(a.recvX) + at * outRow, row, outRow, threadIdx.x - lane, 32);
  if (lane == 0) a.recvSrcInfo[at] = token;  // the chunk's index of token t is t
  if (!f.fp8) return;
  const int groups = f.scaleGroups();
  const float* scales = reinterpret_cast<const float*>(row + loom::ep::align64(a.hidden));
  for (int g = lane; g < groups; g += 32) {
    if (a.useUe8m0) {
      const size_t words = (groups + 3) / 4;
      static_cast<uint8_t*>(a.recvScales)[((p.el * words + g / 4) * slots + p.pos) * 4 + g % 4] =
          static_cast<uint8_t>(__float_as_uint(scales[g]) >> 23);
    } else {
      static_cast<float*>(a.recvScales)[(p.el * groups + g) * slots + p.pos] = scales[g];
    }
  }
}

__global__ void dispatchReceiveKernel(EpRegions d, CallShape shape, int slot,
                                      loomEpLowLatencyDispatchArgs_t a) {
  const int n = d.nranks, local = d.localExperts, me = d.rank;
  const uint64_t step = *word(d, me, pendingOffset(slot));
  // Every source's post, header, counts and lists are in this rank's own memory (its inboxes).
  const bool ok =
      waitAllWords(d, step, [&](int r) { return inboxPosted(llInbox(d, me, slot, r)); });
  __shared__ __align__(64) HeaderCopies headers;
  const bool agree = headersAgree(d, shape, ok, headers, [&](int r) {
    return reinterpret_cast<const char*>(inboxHeader(llInbox(d, me, slot, r)));
  });
  extern __shared__ int32_t table[];
  int32_t* start = table;
  int32_t* rowStart = table + local * (n + 1);
  if (agree) buildDispatchTable(d, slot, start, rowStart);
  if (agree && blockIdx.x == 0) {
    for (int i = threadIdx.x; i < local * n; i += blockDim.x) {
      const int el = i / n, s = i % n;
      const int32_t* row = start + el * (n + 1);
      a.recvLayoutRange[i] = loom::ep::packRange(row[s], row[s + 1] - row[s]);
    }
    for (int el = threadIdx.x; el < local; el += blockDim.x) {
      a.recvCount[el] = start[el * (n + 1) + n];
      if (a.cumulativeRecvStats != nullptr) a.cumulativeRecvStats[el] += start[el * (n + 1) + n];
    }
  }
  const LowLatencyDispatchFormat f{a.topk, a.hidden, a.useFp8 != 0};
  const int warps = blockDim.x >> 5, rows = agree ? rowStart[local] : 0;
  for (int r = blockIdx.x * warps + (threadIdx.x >> 5); r < rows; r += gridDim.x * warps)
    pullRow(d, a, f, slot, headers, start, placeRow(start, rowStart, n, local, r));
  if (lastBlock(reinterpret_cast<unsigned int*>(word(d, me, ticketOffset(5)))) &&
      threadIdx.x == 0) {
    __threadfence_system();
    storeRelease(word(d, me, consumedOffset(kLane, slot)), step);
  }
}

__global__ void combineSendKernel(EpRegions d, CallShape shape, int status, int slot,
                                  loomEpLowLatencyCombineArgs_t a) {
  const int n = d.nranks, local = d.localExperts;
  const uint64_t step = beginSend(d);
  const bool ready = step <= 2 || waitAllRanks(d, consumedOffset(kLane, slot), step - 2);
  const LowLatencyCombineFormat f{n, local, d.maxTokens, a.hidden};
  char* chunk = llCombineChunk(d, d.rank, slot);
  const bool copy = ready && status == loomSuccess;
  if (copy && blockIdx.x == 0)
    for (int i = threadIdx.x; i < local * n; i += blockDim.x)
      reinterpret_cast<int64_t*>(chunk + f.rangesOffset())[i] = a.layoutRange[i];
  // The rows each expert received (zero copy: they are in place already), an expert per block
  // and a row per warp: with an expert's rows over all blocks, most blocks would idle.
  const int warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
  for (int el = blockIdx.x; copy && a.x != nullptr && el < local; el += gridDim.x) {
    int rows = 0;
    for (int s = 0; s < n; ++s) {
      const int64_t range = a.layoutRange[el * n + s];
      rows = max(rows, loom::ep::rangeBegin(range) + loom::ep::rangeCount(range));
    }
    for (int i = warp; i < rows; i += warps) {
      const size_t at = (el * f.expertRows() + i) * f.rowBytes();
      copyBytes(chunk + f.rowsOffset() + at, static_cast<const char*>(a.x) + at, f.rowBytes(),
                warp * 32, 32);
    }
  }
  if (!lastBlock(reinterpret_cast<unsigned int*>(word(d, d.rank, ticketOffset(6)))) ||
      threadIdx.x != 0)
    return;
  postSend(d, chunk, slot, step, shape, status, copy ? a.numTokens : 0, 0);
}

// Token t's rows to combine, one per top-k pick in top-k order (null where it picked no expert),
// a warp per pick: the row of (token, expert) comes after this origin's earlier tokens that
// picked the expert, which the warp's lanes count together.
__device__ void findTerms(const EpRegions& d, const LowLatencyCombineFormat& f, int slot,
                          const loomEpLowLatencyCombineArgs_t& a, int t, const char** rows,
                          float* weights) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
  const int64_t* mine = a.topkIdx + static_cast<size_t>(t) * a.topk;
  for (int k = warp; k < a.topk; k += warps) {
    const int64_t e = mine[k];
    int earlier = 0;
    for (int u = lane; e >= 0 && u < t; u += 32) {
      const int64_t* theirs = a.topkIdx + static_cast<size_t>(u) * a.topk;
      bool picked = false;
      for (int q = 0; q < a.topk; ++q) picked = picked || theirs[q] == e;
      earlier += picked;
    }
    earlier = warpSum(earlier);
    if (lane != 0) continue;
    weights[k] = a.topkWeights[static_cast<size_t>(t) * a.topk + k];
    if (e < 0) {
      rows[k] = nullptr;
      continue;
    }
    const int r = static_cast<int>(e / d.localExperts), el = static_cast<int>(e % d.localExperts);
    const char* chunk = llCombineChunk(d, r, slot);
    const int64_t range =
        reinterpret_cast<const int64_t*>(chunk + f.rangesOffset())[el * d.nranks + d.rank];
    rows[k] = chunk + f.rowsOffset() +
              (el * f.expertRows() + loom::ep::rangeBegin(range) + earlier) * f.rowBytes();
  }
}

__global__ void combineReceiveKernel(EpRegions d, CallShape shape, int slot,
                                     loomEpLowLatencyCombineArgs_t a) {
  const int n = d.nranks, local = d.localExperts, me = d.rank;
  const uint64_t step = *word(d, me, pendingOffset(slot));
  const bool ok = waitAllRanks(d, postedOffset(kLane, slot), step);
  __shared__ __align__(64) HeaderCopies headers;
  __shared__ const char* rows[kMaxTopk];
  __shared__ float weights[kMaxTopk];
  const bool agree =
      headersAgree(d, shape, ok, headers, [&](int r) { return llCombineChunk(d, r, slot); });
  const LowLatencyCombineFormat f{n, local, d.maxTokens, a.hidden};
  for (int t = blockIdx.x; agree && t < a.numTokens; t += gridDim.x) {
    findTerms(d, f, slot, a, t, rows, weights);
    __syncthreads();
    char* out = static_cast<char*>(a.combinedX) + static_cast<size_t>(t) * a.hidden * 2;
    bool wide = a.hidden % 8 == 0 && sixteenAligned(out);
    for (int k = 0; k < a.topk; ++k) wide = wide && sixteenAligned(rows[k]);
    for (int g = threadIdx.x; wide && g < a.hidden / 8; g += blockDim.x) {
      float acc[8] = {0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f};
      addEightRows<true>(acc, rows, weights, a.topk, g, loomBfloat16);
      storeEight(out, g, loomBfloat16, acc);
    }
    for (int v = threadIdx.x; !wide && v < a.hidden; v += blockDim.x) {
      float acc = 0.0f;
      for (int k = 0; k < a.topk; ++k)
        if (rows[k] != nullptr)
          acc = __fadd_rn(
              acc,
              __fmul_rn(weights[k], bf16ToFloat(reinterpret_cast<const uint16_t*>(rows[k])[v])));
      reinterpret_cast<uint16_t*>(out)[v] = floatToBf16(acc);
    }
    __syncthreads();
  }
  if (lastBlock(reinterpret_cast<unsigned int*>(word(d, me, ticketOffset(7)))) &&
      threadIdx.x == 0) {
    __threadfence_system();
    storeRelease(word(d, me, consumedOffset(kLane, slot)), step);
  }
}

int blocksFor(int work) {
  return work < 1 ? 1 : work < kLowLatencyBlocks ? work : kLowLatencyBlocks;
}

void checkLaunch(const char* kernel) {
  const cudaError_t err = cudaGetLastError();
  if (err != cudaSuccess)
    LOOM_THROW(loomUnhandledCudaError, "launching the expert-parallel ", kernel,
               " kernel: ", cudaGetErrorString(err));
}

}  // namespace

void launchLowLatencyDispatch(const EpRegions& d, const CallShape& shape, int status, int slot,
                              bool send, bool receive, const loomEpLowLatencyDispatchArgs_t& a,
                              cudaStream_t stream) {
  if (send)
    dispatchSendKernel<<<blocksFor(max(a.numTokens, d.numExperts / (kThreads / 32))), kThreads, 0,
                         stream>>>(d, shape, status, slot, a);
  if (receive)
    dispatchReceiveKernel<<<kLowLatencyBlocks, kThreads,
                            dispatchTableBytes(d.nranks, d.localExperts), stream>>>(d, shape, slot,
                                                                                    a);
  checkLaunch("low-latency dispatch");
}

void launchLowLatencyCombine(const EpRegions& d, const CallShape& shape, int status, int slot,
                             bool send, bool receive, const loomEpLowLatencyCombineArgs_t& a,
                             cudaStream_t stream) {
  if (send)
    combineSendKernel<<<blocksFor(d.localExperts), kThreads, 0, stream>>>(d, shape, status, slot,
                                                                          a);
  if (receive)
    combineReceiveKernel<<<blocksFor(a.numTokens), kThreads, 0, stream>>>(d, shape, slot, a);
  checkLaunch("low-latency combine");
}

}  // namespace loom::cuda::ep
