// Normal-mode dispatch and combine on CUDA GPUs of one host, pulling from the peers' regions as
// the shared-memory path does (ep/ep_shm_path.hpp), one round per call:
//   counts: one block writes this rank's counts into its chunk and posts it; one block then
//     waits for every rank's, compares the headers, and writes the handle (rank prefix matrix,
//     sendHead) and the received counts for the host, which waits for its stream (as DeepEP's
//     notify does).
//   dispatch: every block stages a stride of this rank's tokens (metadata and rows) into its
//     chunk and the last one posts it; then block (source, segment) takes the tokens of its
//     segment of that source's chunk that go to this rank, at the rows the handle says, reading
//     them over NVLink straight into recvX. The last block says the round is consumed.
//   combine: every block stages a stride of this rank's received rows (and weights); then
//     blocks over this rank's tokens sum, per token and in rank order, the rows of the ranks it
//     went to (sendHead), in fp32, reading the peers' chunks in place.
// A round that does not fit a buffer is loomInvalidArgument on the host (no rounds on the GPU).
#include "base/error.hpp"
#include "device/cuda/ep/ep_dev.cuh"

namespace loom::cuda::ep {

namespace {

using loom::ep::CombineFormat;
using loom::ep::DispatchFormat;

constexpr int kLane = 0;  // normal
// Tokens of one source per pulling block: small, so that a call's rows spread over many blocks
// (512 left 8 busy blocks per source at 4096 tokens, 54 GB/s on NVLink).
constexpr int kSegment = 64;
static_assert(kSegment <= kThreads && kSegment % 32 == 0);

// Tallies in shared memory ([n] tokens per rank, then [numExperts] picks per expert), added to
// memory once: thousands of tokens adding to the same few words of global memory serialize.
__global__ void layoutKernel(EpRegions d, const int64_t* topkIdx, int numTokens, int topk,
                             int32_t* perRank, int32_t* perExpert, uint8_t* inRank) {
  const int n = d.nranks, local = d.localExperts;
  extern __shared__ int32_t tally[];
  for (int i = threadIdx.x; i < n + d.numExperts; i += blockDim.x) tally[i] = 0;
  __syncthreads();
  for (int t = threadIdx.x; t < numTokens; t += blockDim.x) {
    uint32_t ranks = 0;  // bit r: the token goes to rank r (kMaxRanks <= 32)
    for (int k = 0; k < topk; ++k) {
      const int64_t e = topkIdx[static_cast<size_t>(t) * topk + k];
      if (e < -1 || e >= d.numExperts) {
        record(d, kEpBadExpert, d.rank);
      } else if (e >= 0) {
        ranks |= 1u << (e / local);
        atomicAdd(&tally[n + e], 1);
      }
    }
    for (int r = 0; r < n; ++r) {
      const bool goes = (ranks >> r & 1) != 0;
      if (inRank != nullptr) inRank[static_cast<size_t>(t) * n + r] = goes;
      if (goes) atomicAdd(&tally[r], 1);
    }
  }
  __syncthreads();
  for (int i = threadIdx.x; i < n && perRank != nullptr; i += blockDim.x) perRank[i] = tally[i];
  for (int i = threadIdx.x; i < d.numExperts && perExpert != nullptr; i += blockDim.x)
    perExpert[i] = tally[n + i];
}

// This rank's counts into its chunk (tokens to each rank, to each expert), then the post.
__global__ void countsKernel(EpRegions d, uint64_t step, CallShape shape, int status,
                             DispatchArgs a) {
  const int me = d.rank, n = d.nranks;
  if (step > 2 && !waitAllRanks(d, consumedOffset(kLane, step & 1), step - 2)) return;
  char* chunk = normalChunk(d, me, step);
  int32_t* counts = reinterpret_cast<int32_t*>(chunk + sizeof(CallHeader));
  for (int i = threadIdx.x; i < n + d.numExperts; i += blockDim.x) counts[i] = 0;
  __shared__ int badIds;
  if (threadIdx.x == 0) badIds = 0;
  __syncthreads();
  const int tokens = status == loomSuccess ? a.numTokens : 0;
  for (int t = threadIdx.x; t < tokens; t += blockDim.x) {
    for (int r = 0; r < n; ++r)
      if (a.inRank[static_cast<size_t>(t) * n + r]) atomicAdd(&counts[r], 1);
    for (int k = 0; k < a.topk && a.topkIdx != nullptr; ++k) {
      const int64_t e = a.topkIdx[static_cast<size_t>(t) * a.topk + k];
      if (e < -1 || e >= d.numExperts) badIds = 1;
      if (e >= 0 && e < d.numExperts && a.perExpertIn == nullptr) atomicAdd(&counts[n + e], 1);
    }
  }
  for (int e = threadIdx.x; e < d.numExperts && a.perExpertIn != nullptr && tokens > 0;
       e += blockDim.x)
    counts[n + e] = a.perExpertIn[e];
  __syncthreads();
  if (threadIdx.x != 0) return;
  CallHeader* h = reinterpret_cast<CallHeader*>(chunk);
  h->step = step;
  h->shape = shape;
  h->status = badIds ? loomInvalidArgument : status;
  h->numTokens = tokens;
  h->count = 0;
  __threadfence_system();
  storeRelease(word(d, me, postedOffset(kLane, step & 1)), step);
}

// Every rank's counts: the handle (rank prefix matrix, sendHead) and the host's results.
__global__ void planKernel(EpRegions d, uint64_t step, CallShape shape, DispatchArgs a) {
  const int me = d.rank, n = d.nranks;
  if (!waitAllRanks(d, postedOffset(kLane, step & 1), step)) return;
  __shared__ int agree;
  if (threadIdx.x == 0) {
    agree = 1;
    for (int r = 0; r < n && agree; ++r)
      agree =
          headerAgrees(d, reinterpret_cast<const CallHeader*>(normalChunk(d, r, step)), shape, r);
  }
  __syncthreads();
  auto counts = [&](int r) {
    return reinterpret_cast<const int32_t*>(normalChunk(d, r, step) + sizeof(CallHeader));
  };
  if (agree) {
    for (int ij = threadIdx.x; ij < n * n; ij += blockDim.x) {
      const int i = ij / n, j = ij % n;
      int32_t sum = 0;
      for (int s = 0; s <= i; ++s) sum += counts(s)[j];
      a.rankPrefix[ij] = sum;
    }
    for (int l = threadIdx.x; l < d.localExperts; l += blockDim.x) {
      int32_t sum = 0;
      for (int s = 0; s < n; ++s) sum += counts(s)[n + me * d.localExperts + l];
      const int align = a.alignment > 1 ? a.alignment : 1;
      d.status->perExpert[l] = (sum + align - 1) / align * align;
    }
    // sendHead[t][r]: the row token t lands at on rank r (ranks before this one's rows first).
    for (int r = 0; r < n; ++r) {
      int base = 0;
      for (int s = 0; s < me; ++s) base += counts(s)[r];
      for (int first = 0; first < a.numTokens; first += blockDim.x) {
        const int t = first + threadIdx.x;
        const bool goes = t < a.numTokens && a.inRank[static_cast<size_t>(t) * n + r];
        int total = 0;
        const int before = blockScan(goes ? 1 : 0, &total);
        if (t < a.numTokens) a.sendHead[static_cast<size_t>(t) * n + r] = goes ? base + before : -1;
        base += total;
      }
    }
    if (threadIdx.x == 0) {
      int32_t received = 0;
      for (int s = 0; s < n; ++s) received += counts(s)[me];
      d.status->numRecv = received;
    }
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    __threadfence_system();
    storeRelease(word(d, me, consumedOffset(kLane, step & 1)), step);
  }
}

// Every block stages a stride of this rank's tokens; the last posts the round.
__global__ void stageDispatchKernel(EpRegions d, uint64_t step, CallShape shape, int status,
                                    DispatchArgs a, DispatchFormat f) {
  const int me = d.rank, n = d.nranks;
  const bool ready = step <= 2 || waitAllRanks(d, consumedOffset(kLane, step & 1), step - 2);
  char* chunk = normalChunk(d, me, step);
  const int count = ready && status == loomSuccess ? a.numTokens : 0;
  int32_t* index = reinterpret_cast<int32_t*>(chunk + f.indexOffset());
  uint8_t* ranks = reinterpret_cast<uint8_t*>(chunk + f.inRankOffset(count));
  int32_t* topk = reinterpret_cast<int32_t*>(chunk + f.topkOffset(count));
  float* weights = reinterpret_cast<float*>(chunk + f.weightsOffset(count));
  float* scales = reinterpret_cast<float*>(chunk + f.scalesOffset(count));
  char* rows = chunk + f.rowsOffset(count);
  unsigned long long* bad = reinterpret_cast<unsigned long long*>(word(d, me, kBadIdsOffset));
  // A warp per token: a row copied by a whole block leaves most of its threads one load each.
  const int lane = threadIdx.x & 31, warps = blockDim.x >> 5;
  for (int t = blockIdx.x * warps + (threadIdx.x >> 5); t < count; t += gridDim.x * warps) {
    if (lane == 0) index[t] = t;
    for (int i = lane; i < n; i += 32)
      ranks[t * f.rankBytes() + i] = a.inRank[static_cast<size_t>(t) * n + i];
    for (int i = lane; i < f.topk; i += 32) {
      const int64_t e = a.topkIdx[static_cast<size_t>(t) * f.topk + i];
      if (e < -1 || e >= d.numExperts) atomicExch(bad, 1ull);
      topk[t * f.topk + i] = static_cast<int32_t>(e);
      if (f.weights) weights[t * f.topk + i] = a.weights[static_cast<size_t>(t) * f.topk + i];
    }
    for (int i = lane; i < f.numScales; i += 32)
      scales[t * f.numScales + i] = a.scales[static_cast<size_t>(t) * f.numScales + i];
    copyBytes(rows + t * f.rowStride(), a.x + t * a.rowBytes, a.rowBytes, threadIdx.x - lane, 32);
  }
  if (!lastBlock(reinterpret_cast<unsigned int*>(word(d, me, ticketOffset(0))))) return;
  if (threadIdx.x != 0) return;
  CallHeader* h = reinterpret_cast<CallHeader*>(chunk);
  h->step = step;
  h->shape = shape;
  h->status = atomicExch(bad, 0ull) != 0 ? loomInvalidArgument : status;
  h->numTokens = count;
  h->count = count;
  __threadfence_system();
  storeRelease(word(d, me, postedOffset(kLane, step & 1)), step);
}

// Block (source, segment): the segment's tokens of that source that go to this rank.
__global__ void pullDispatchKernel(EpRegions d, uint64_t step, CallShape shape, DispatchArgs a,
                                   DispatchFormat f, int segments) {
  const int me = d.rank, n = d.nranks;
  const int source = blockIdx.x / segments, segment = blockIdx.x % segments;
  __shared__ int ok;
  if (threadIdx.x == 0)
    ok = waitAtLeast(d, word(d, source, postedOffset(kLane, step & 1)), step, source) &&
         headerAgrees(d, reinterpret_cast<const CallHeader*>(normalChunk(d, source, step)), shape,
                      source) &&
         segment * kSegment <
             reinterpret_cast<const CallHeader*>(normalChunk(d, source, step))->count;
  __syncthreads();
  if (ok) {  // a segment with tokens
    const char* chunk = normalChunk(d, source, step);
    const int count = reinterpret_cast<const CallHeader*>(chunk)->count;
    const uint8_t* ranks = reinterpret_cast<const uint8_t*>(chunk + f.inRankOffset(count));
    const int first = segment * kSegment;
    // This source's rows before the segment's: its block's start, then the earlier tokens.
    int before = source == 0 ? 0 : a.rankPrefix[(source - 1) * n + me];
    int mine = 0;
    for (int j = threadIdx.x; j < first && j < count; j += blockDim.x)
      mine += ranks[j * f.rankBytes() + me] != 0;
    before += blockSum(mine);
    const int j = first + threadIdx.x;
    const bool take = threadIdx.x < kSegment && j < count && ranks[j * f.rankBytes() + me] != 0;
    int total = 0;
    const int pos = before + blockScan(take ? 1 : 0, &total);
    if (take && pos < a.capacity) {
      const int32_t* topk = reinterpret_cast<const int32_t*>(chunk + f.topkOffset(count));
      const float* weights = reinterpret_cast<const float*>(chunk + f.weightsOffset(count));
      const float* scales = reinterpret_cast<const float*>(chunk + f.scalesOffset(count));
      a.recvSrcIdx[pos] = reinterpret_cast<const int32_t*>(chunk + f.indexOffset())[j];
      const int base = me * d.localExperts;
      for (int k = 0; k < f.topk && a.recvTopk != nullptr; ++k) {
        const int e = topk[j * f.topk + k];
        const bool here = e >= base && e < base + d.localExperts;
        a.recvTopk[static_cast<size_t>(pos) * f.topk + k] = here ? e - base : -1;
        if (a.recvWeights != nullptr)
          a.recvWeights[static_cast<size_t>(pos) * f.topk + k] =
              here ? weights[j * f.topk + k] : 0.0f;
      }
      for (int s = 0; s < f.numScales && a.recvScales != nullptr; ++s)
        a.recvScales[static_cast<size_t>(pos) * f.numScales + s] = scales[j * f.numScales + s];
    }
    if (take && pos >= a.capacity) record(d, kEpOverflow, me);
    // Rows: a warp per taken token, in turn.
    __shared__ int where[kSegment];
    if (threadIdx.x < kSegment) where[threadIdx.x] = take && pos < a.capacity ? pos : -1;
    __syncthreads();
    const int warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
    const char* rows = chunk + f.rowsOffset(count);
    for (int i = warp; i < kSegment; i += warps)
      if (where[i] >= 0)
        copyBytes(a.recvX + where[i] * a.rowBytes, rows + (first + i) * f.rowStride(), a.rowBytes,
                  warp * 32, 32);
  }
  // Rows past the received ones: top-k -1 (the worst-case receive arrays).
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  const size_t end = static_cast<size_t>(a.capacity) * f.topk;
  for (size_t i = static_cast<size_t>(a.numRecv) * f.topk + blockIdx.x * blockDim.x + threadIdx.x;
       a.recvTopk != nullptr && i < end; i += stride)
    a.recvTopk[i] = -1;
  if (lastBlock(reinterpret_cast<unsigned int*>(word(d, me, ticketOffset(1)))) &&
      threadIdx.x == 0) {
    __threadfence_system();
    storeRelease(word(d, me, consumedOffset(kLane, step & 1)), step);
  }
}

// Every block stages a stride of this rank's received rows (and their weights).
__global__ void stageCombineKernel(EpRegions d, uint64_t step, CallShape shape, int status,
                                   CombineArgs a, CombineFormat f) {
  const int me = d.rank;
  const bool ready = step <= 2 || waitAllRanks(d, consumedOffset(kLane, step & 1), step - 2);
  char* chunk = normalChunk(d, me, step);
  const int count = ready && status == loomSuccess ? a.numRecv : 0;
  char* rows = chunk + f.rowsOffset(count);
  float* weights = reinterpret_cast<float*>(chunk + f.weightsOffset());
  const int lane = threadIdx.x & 31, warps = blockDim.x >> 5;  // a warp per row
  for (int i = blockIdx.x * warps + (threadIdx.x >> 5); i < count; i += gridDim.x * warps) {
    copyBytes(rows + i * f.rowStride(), a.x + i * a.rowBytes, a.rowBytes, threadIdx.x - lane, 32);
    for (int k = lane; f.weights && k < f.topk; k += 32)
      weights[i * f.topk + k] = a.weights[static_cast<size_t>(i) * f.topk + k];
  }
  if (!lastBlock(reinterpret_cast<unsigned int*>(word(d, me, ticketOffset(2)))) || threadIdx.x != 0)
    return;
  CallHeader* h = reinterpret_cast<CallHeader*>(chunk);
  h->step = step;
  h->shape = shape;
  h->status = status;
  h->numTokens = status == loomSuccess ? a.numTokens : 0;
  h->count = count;
  __threadfence_system();
  storeRelease(word(d, me, postedOffset(kLane, step & 1)), step);
}

// Token t's combined row 8 values per thread (bf16/fp16 rows whose addresses are 16-byte
// aligned); false, having done nothing, where the scalar loop must do it.
__device__ bool sumRowWide(const EpRegions& d, uint64_t step, const CombineArgs& a,
                           const CombineFormat& f, int t, const int32_t* head) {
  if (a.dtype != loomBfloat16 && a.dtype != loomFloat16) return false;
  if (a.hidden % 8 != 0 || !sixteenAligned(a.combined) || !sixteenAligned(a.bias0) ||
      !sixteenAligned(a.bias1))
    return false;
  const char* rows[kMaxRanks];
  for (int r = 0; r < d.nranks; ++r) {
    const char* chunk = normalChunk(d, r, step);
    const int count = reinterpret_cast<const CallHeader*>(chunk)->count;
    rows[r] = head[r] < 0 ? nullptr : chunk + f.rowsOffset(count) + head[r] * f.rowStride();
    if (!sixteenAligned(rows[r])) return false;
  }
  const size_t at = static_cast<size_t>(t) * a.rowBytes;
  for (int g = threadIdx.x; g < a.hidden / 8; g += blockDim.x) {
    float acc[8] = {0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f};
    if (a.bias0 != nullptr) addEight(acc, a.bias0 + at, g, a.dtype);
    if (a.bias1 != nullptr) addEight(acc, a.bias1 + at, g, a.dtype);
    addEightRows<false>(acc, rows, nullptr, d.nranks, g, a.dtype);
    storeEight(a.combined + at, g, a.dtype, acc);
  }
  return true;
}

// Blocks over this rank's tokens: each token's rows from the ranks it went to, in rank order.
__global__ void reduceCombineKernel(EpRegions d, uint64_t step, CallShape shape, CombineArgs a,
                                    CombineFormat f) {
  const int me = d.rank, n = d.nranks;
  __shared__ int ok;
  if (threadIdx.x == 0) ok = 1;
  __syncthreads();
  if (threadIdx.x < n) {
    const int r = threadIdx.x;
    if (!waitAtLeast(d, word(d, r, postedOffset(kLane, step & 1)), step, r) ||
        !headerAgrees(d, reinterpret_cast<const CallHeader*>(normalChunk(d, r, step)), shape, r))
      ok = 0;
  }
  __syncthreads();
  for (int t = blockIdx.x; ok && t < a.numTokens; t += gridDim.x) {
    const int32_t* head = a.sendHead + static_cast<size_t>(t) * n;
    const bool wide = sumRowWide(d, step, a, f, t, head);
    for (int v = threadIdx.x; !wide && v < a.hidden; v += blockDim.x) {
      float acc = 0.0f;
      if (a.bias0 != nullptr) acc = __fadd_rn(acc, loadValue(a.bias0 + t * a.rowBytes, v, a.dtype));
      if (a.bias1 != nullptr) acc = __fadd_rn(acc, loadValue(a.bias1 + t * a.rowBytes, v, a.dtype));
      for (int r = 0; r < n; ++r) {
        const int row = head[r];
        if (row < 0) continue;
        const char* chunk = normalChunk(d, r, step);
        const int count = reinterpret_cast<const CallHeader*>(chunk)->count;
        acc = __fadd_rn(acc,
                        loadValue(chunk + f.rowsOffset(count) + row * f.rowStride(), v, a.dtype));
      }
      storeValue(a.combined + t * a.rowBytes, v, a.dtype, acc);
    }
    if (a.combinedWeights != nullptr && threadIdx.x < a.topk) {
      float sum = 0.0f;
      for (int r = 0; r < n; ++r) {
        const int row = head[r];
        if (row < 0) continue;
        const char* chunk = normalChunk(d, r, step);
        sum = __fadd_rn(sum, reinterpret_cast<const float*>(
                                 chunk + f.weightsOffset())[row * a.topk + threadIdx.x]);
      }
      a.combinedWeights[static_cast<size_t>(t) * a.topk + threadIdx.x] = sum;
    }
  }
  if (lastBlock(reinterpret_cast<unsigned int*>(word(d, me, ticketOffset(3)))) &&
      threadIdx.x == 0) {
    __threadfence_system();
    storeRelease(word(d, me, consumedOffset(kLane, step & 1)), step);
  }
}

int gridFor(int work) { return work < 1 ? 1 : work < 132 ? work : 132; }

void checkLaunch(const char* kernel) {
  const cudaError_t err = cudaGetLastError();
  if (err != cudaSuccess)
    LOOM_THROW(loomUnhandledCudaError, "launching the expert-parallel ", kernel,
               " kernel: ", cudaGetErrorString(err));
}

}  // namespace

void launchLayout(const EpRegions& d, const int64_t* topkIdx, int numTokens, int topk,
                  int32_t* perRank, int32_t* perExpert, uint8_t* inRank, cudaStream_t stream) {
  layoutKernel<<<1, kThreads, layoutTallyBytes(d.nranks, d.numExperts), stream>>>(
      d, topkIdx, numTokens, topk, perRank, perExpert, inRank);
  checkLaunch("layout");
}

void launchCounts(const EpRegions& d, uint64_t step, const CallShape& shape, int status,
                  const DispatchArgs& a, cudaStream_t stream) {
  countsKernel<<<1, 1024, 0, stream>>>(d, step, shape, status, a);
  planKernel<<<1, 1024, 0, stream>>>(d, step, shape, a);
  checkLaunch("dispatch counts");
}

void launchDispatch(const EpRegions& d, uint64_t step, const CallShape& shape, int status,
                    const DispatchArgs& a, cudaStream_t stream) {
  DispatchFormat f{d.nranks,
                   d.numExperts,
                   shape.topk,
                   shape.numScales,
                   (shape.flags & loom::ep::kHasWeights) != 0,
                   a.rowBytes};
  stageDispatchKernel<<<gridFor(a.numTokens), kThreads, 0, stream>>>(d, step, shape, status, a, f);
  const int segments = (d.maxTokens + kSegment - 1) / kSegment;
  pullDispatchKernel<<<d.nranks * segments, kThreads, 0, stream>>>(d, step, shape, a, f, segments);
  checkLaunch("dispatch");
}

void launchCombine(const EpRegions& d, uint64_t step, const CallShape& shape, int status,
                   const CombineArgs& a, cudaStream_t stream) {
  CombineFormat f{d.nranks, shape.topk, (shape.flags & loom::ep::kHasWeights) != 0, a.rowBytes};
  stageCombineKernel<<<gridFor(a.numRecv), kThreads, 0, stream>>>(d, step, shape, status, a, f);
  reduceCombineKernel<<<gridFor(a.numTokens), kThreads, 0, stream>>>(d, step, shape, a, f);
  checkLaunch("combine");
}

}  // namespace loom::cuda::ep
