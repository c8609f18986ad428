// The plan-interpreting kernel (plan_kernel.hpp): each block runs one lane's operations on one
// slice, part after part, waiting for other lanes through progress words and for peers through
// the window channels of primitives.cuh.
#include "device/cuda/collectives/launch.cuh"
#include "device/cuda/collectives/plan_kernel.hpp"
#include "device/cuda/collectives/primitives.cuh"
#include "device/cuda/collectives/reduce_ops.cuh"

namespace loom::cuda {

namespace {

// Plan buffers are written by other blocks of this kernel: every read of one goes through L2
// (loadBytes16<true>, loadBytes8<true>).

// Slice `index` of `parts` near-equal slices of [0, total) (plan/plan_program.cpp's layout).
__device__ __forceinline__ void sliceOf(uint64_t total, uint64_t parts, uint64_t index,
                                        uint64_t& offset, uint64_t& count) {
  const uint64_t base = total / parts, extra = total % parts;
  offset = index * base + (index < extra ? index : extra);
  count = base + (index < extra ? 1 : 0);
}

struct Span {
  char* at;
  size_t bytes;
};

// Where `ref`'s chunks lie in part `part` of the call.
__device__ Span chunkSpan(const PlanKernelArgs& a, const DevChunks& ref, uint32_t part) {
  uint64_t partOffset, partCount, firstOffset, firstCount, lastOffset, lastCount;
  sliceOf(a.count, a.parts, part, partOffset, partCount);
  const uint64_t block = ref.index / a.chunksPerBlock, first = ref.index % a.chunksPerBlock;
  sliceOf(partCount, a.chunksPerBlock, first, firstOffset, firstCount);
  sliceOf(partCount, a.chunksPerBlock, first + ref.count - 1, lastOffset, lastCount);
  char* base = ref.buffer == 0   ? const_cast<char*>(a.input)
               : ref.buffer == 1 ? a.output
                                 : a.scratch;
  const uint64_t begin = block * a.count + partOffset + firstOffset;
  return {base + begin * a.elementSize, (lastOffset + lastCount - firstOffset) * a.elementSize};
}

// A block's own bookkeeping: the call's number and its lane's channel counters.
struct LaneState {
  uint32_t call;
  uint64_t seq;    // sending lane: chunks posted to the peer; receiving lane: chunks consumed
  uint64_t freed;  // sending lane: the last chunk the peer acknowledged, as last read
};

__device__ __forceinline__ uint32_t progressMark(uint32_t part, uint64_t chunks) {
  return (part << kPlanChunkBits) | static_cast<uint32_t>(chunks);
}

// Waits until `word` says call `call` reached `mark`. False when the wait gave up. The timeout
// counts from the word's last change: a long operation that still moves is no stall.
__device__ bool waitProgress(const DevComm& c, const uint64_t* word, uint32_t call, uint32_t mark,
                             int peer) {
  Waiter waiter(c);
  uint64_t seen = 0;
  for (;;) {
    const uint64_t v = loadAcquireGpu(word);
    if (static_cast<uint32_t>(v >> 32) == call && static_cast<uint32_t>(v) >= mark) return true;
    if (v != seen) {
      seen = v;
      waiter.start = 0;
    }
    if (waiter.shouldStop(peer)) return false;
  }
}

// Where a block works: its slice of every operation, and the window channel it moves them on and
// whose progress words it publishes (slice `slice` of part group g: channel g x slices + slice).
struct Place {
  int slice;
  int channel;
  __device__ int firstChannel() const { return channel - slice; }  // its group's slice 0
};

// After the block's writes of a chunk (a barrier first): thread 0 publishes `mark`.
__device__ __forceinline__ void publish(const PlanKernelArgs& a, const LaneState& st, uint32_t op,
                                        int channel, uint32_t mark) {
  __syncthreads();
  if (threadIdx.x == 0) {
    __threadfence();
    storeReleaseGpu(a.state + planProgressWord(op, channel),
                    (static_cast<uint64_t>(st.call) << 32) | mark);
  }
}

// The peer a wait on operation `on` is in the end waiting for (for the timeout's message).
__device__ __forceinline__ int peerOf(const DevComm& c, const PlanKernelArgs& a, uint32_t on) {
  const int p = a.program.ops[on].peer;
  return p >= 0 ? p : c.rank;
}

// Waits for the dependencies of `op` that are `streamed` (or not) to reach `mark` in their progress
// word of channel `channel`. False when a wait gave up.
__device__ bool waitDeps(const DevComm& c, const PlanKernelArgs& a, const LaneState& st,
                         const DevPlanOp& op, bool streamed, int channel, uint32_t mark) {
  for (uint32_t d = op.depBegin; d < op.depEnd; ++d) {
    const DevPlanDep dep = a.program.deps[d];
    if ((dep.streamed != 0) != streamed) continue;
    if (!waitProgress(c, a.state + planProgressWord(dep.on, channel), st.call, mark,
                      peerOf(c, a, dep.on)))
      return false;
  }
  return true;
}

// Whole-operation dependencies of `op` in `part`: thread t waits for slice t of each (in this
// block's part group). False on every thread when a wait gave up.
__device__ bool waitWhole(const DevComm& c, const PlanKernelArgs& a, const LaneState& st,
                          const DevPlanOp& op, uint32_t part, int firstChannel) {
  int stop = 0;
  for (int t = threadIdx.x; t < a.slices && !stop; t += blockDim.x)
    stop = !waitDeps(c, a, st, op, false, firstChannel + t, progressMark(part + 1, 0));
  if (__syncthreads_or(stop)) return false;
  __threadfence();
  return true;
}

// Streamed dependencies for chunk k of this block's slice. False on every thread when a wait gave
// up.
__device__ bool waitStreamed(const DevComm& c, const PlanKernelArgs& a, const LaneState& st,
                             const DevPlanOp& op, uint32_t part, int channel, uint64_t k) {
  int stop = 0;
  if (threadIdx.x == 0) stop = !waitDeps(c, a, st, op, true, channel, progressMark(part, k + 1));
  if (__syncthreads_or(stop)) return false;
  __threadfence();
  return true;
}

// ---- Data movement of one chunk: `len` bytes at the same offset of every operand. ----

// Local work: every source read through L2 (other blocks of this kernel may have written it),
// kUnroll loads in flight per thread (primitives.cuh).
template <typename R>
__device__ __forceinline__ void reduceLocal(char* dst, const Span* srcs, int nsrc, size_t offset,
                                            size_t len, int divisor) {
  blockReduce<R>(dst, len, (1u << nsrc) - 1, divisor, [&](int q, size_t off, size_t n) {
    return loadBytes16<true>(srcs[q].at + offset + off, n);
  });
}

__device__ __forceinline__ void copyLocal(char* dst, const char* src, size_t len) {
  blockCopy<false, true>(dst, src, len);
}

// Sending lane: chunk `src` (len bytes) to the peer's slot on channel `channel`.
__device__ bool sendChunk(const DevComm& c, const PlanKernelArgs& a, LaneState& st, int peer,
                          int channel, const char* src, size_t len) {
  const uint64_t seq = st.seq + 1;
  int stop = 0;
  if (threadIdx.x == 0 && seq > kSlotsPerChannel && st.freed < seq - kSlotsPerChannel) {
    stop = !waitAtLeast<false>(c, c.acks[c.rank] + channel * c.nranks + peer,
                               seq - kSlotsPerChannel, peer);
    st.freed = seq - kSlotsPerChannel;
  }
  if (__syncthreads_or(stop)) return false;
  if (a.ll) {
    char* slot = c.llSlots[peer] + slotOffset(c, channel, c.rank, seq, c.llSlotBytes);
    for (size_t w = threadIdx.x; w * 8 < len; w += blockDim.x)
      storePacket(slot, w, loadBytes8<true>(src + w * 8, len - w * 8), static_cast<uint32_t>(seq));
  } else {
    char* slot = c.slots[peer] + slotOffset(c, channel, c.rank, seq);
    copyLocal(slot, src, len);
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    if (!a.ll) {
      __threadfence_system();
      storeRelaxed(c.ready[peer] + channel * c.nranks + c.rank, seq);
    }
    st.seq = seq;
  }
  __syncthreads();
  return true;
}

// Receiving lane: the next chunk from the peer on channel `channel` into dst, reduced with `with`
// first where it is given. False on every thread when a wait gave up.
template <typename R>
__device__ bool receiveChunk(const DevComm& c, const PlanKernelArgs& a, LaneState& st, int peer,
                             int channel, char* dst, const char* with, size_t len, int divisor) {
  const uint64_t seq = st.seq + 1;
  int stop = 0;
  if (a.ll) {
    const char* slot = c.llSlots[c.rank] + slotOffset(c, channel, peer, seq, c.llSlotBytes);
    for (size_t w = threadIdx.x; w * 8 < len && !stop; w += blockDim.x) {
      uint2 data;
      if (!loadPacket(c, slot, w, static_cast<uint32_t>(seq), peer, data)) {
        stop = 1;
        break;
      }
      const size_t n = len - w * 8 < 8 ? len - w * 8 : 8;
      if (with != nullptr) {
        typename R::template Acc<8> acc;
        uint2 mine = loadBytes8<true>(with + w * 8, n);
        R::template first<8>(acc, &mine);
        R::template next<8>(acc, &data);
        R::template finish<8>(&data, acc, divisor);
      }
      storeBytes8(dst + w * 8, data, n);
    }
    if (__syncthreads_or(stop)) return false;
  } else {
    if (threadIdx.x == 0)
      stop = !waitAtLeast<true>(c, c.ready[c.rank] + channel * c.nranks + peer, seq, peer);
    if (__syncthreads_or(stop)) return false;
    const char* slot = c.slots[c.rank] + slotOffset(c, channel, peer, seq);
    if (with == nullptr) {
      blockCopy<true>(dst, slot, len);
    } else {  // `with` first, then the peer's data: the reduction order of the plan
      blockReduce<R>(dst, len, 3u, divisor, [&](int q, size_t off, size_t n) {
        return q == 0 ? loadBytes16<true>(with + off, n) : loadSlot16(slot + off);
      });
    }
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    st.seq = seq;
    storeRelaxed(c.acks[peer] + channel * c.nranks + c.rank, seq);
  }
  __syncthreads();
  return true;
}

// Operation `index` of the program, part `part`, this block's slice.
template <typename R>
__device__ bool runOp(const DevComm& c, const PlanKernelArgs& a, LaneState& st, uint32_t index,
                      uint32_t part, const Place& at) {
  const DevPlanOp op = a.program.ops[index];
  if (!waitWhole(c, a, st, op, part, at.firstChannel())) return false;
  const bool sends = op.kind == kPlanSend;
  const Span moved = chunkSpan(a, sends ? a.program.srcs[op.srcBegin] : op.dst, part);
  Span srcs[kPlanMaxReduceSources];
  const int nsrc = static_cast<int>(op.srcEnd - op.srcBegin);
  for (int s = 0; s < nsrc && s < kPlanMaxReduceSources; ++s)
    srcs[s] = chunkSpan(a, a.program.srcs[op.srcBegin + s], part);
  const int divisor = op.final ? a.divisor : 1;
  const Range mine = splitRange(moved.bytes, at.slice, a.slices);
  const uint64_t chunks = chunkCount(mine.size(), a.payload);
  for (uint64_t k = 0; k < chunks; ++k) {
    if (op.streamsBehind && !waitStreamed(c, a, st, op, part, at.channel, k)) return false;
    const Range piece = chunkOf(mine, k, a.payload);
    const size_t len = piece.size();
    bool ok = true;
    switch (op.kind) {
      case kPlanSend:
        ok = sendChunk(c, a, st, op.peer, at.channel, moved.at + piece.begin, len);
        break;
      case kPlanRecv:
        ok =
            receiveChunk<R>(c, a, st, op.peer, at.channel, moved.at + piece.begin, nullptr, len, 1);
        break;
      case kPlanRecvReduce:
        ok = receiveChunk<R>(c, a, st, op.peer, at.channel, moved.at + piece.begin,
                             srcs[0].at + piece.begin, len, divisor);
        break;
      case kPlanCopy:
        copyLocal(moved.at + piece.begin, srcs[0].at + piece.begin, len);
        break;
      default:
        reduceLocal<R>(moved.at + piece.begin, srcs, nsrc, piece.begin, len, divisor);
        break;
    }
    if (!ok) return false;
    if (op.streamedAfter) publish(a, st, index, at.channel, progressMark(part, k + 1));
  }
  publish(a, st, index, at.channel, progressMark(part + 1, 0));
  return true;
}

template <typename R>
__global__ void __launch_bounds__(kThreads) planKernel(DevComm c, PlanKernelArgs a) {
  __shared__ LaneState st;
  // Blocks in order: lane, then part group, then slice.
  const int block = static_cast<int>(blockIdx.x), group = block / a.slices % a.groups;
  const Place at{block % a.slices, group * a.slices + block % a.slices};
  const DevPlanLane lane = a.program.lanes[block / (a.slices * a.groups)];
  const int counter = at.channel * c.nranks + lane.peer;  // this lane's, where it has a peer
  if (threadIdx.x == 0) {
    st.call = static_cast<uint32_t>(a.state[0]) + 1;
    st.seq = st.freed = 0;
    if (lane.kind == kSendLane) {
      st.seq = c.sentSeq[counter];
      st.freed = loadRelaxed(c.acks[c.rank] + counter);
    } else if (lane.kind == kRecvLane) {
      st.seq = c.recvSeq[counter];
    }
  }
  __syncthreads();
  bool ok = true;
  // Parts are independent (disjoint bytes, dependencies within a part): group g runs parts g,
  // g + groups, ..., each on its own channels, so a part's round trips overlap the next's.
  for (uint32_t part = group; part < a.parts && ok; part += a.groups)
    for (uint32_t i = lane.opBegin; i < lane.opEnd && ok; ++i)
      ok = runOp<R>(c, a, st, a.program.laneOps[i], part, at);
  __syncthreads();
  if (threadIdx.x != 0) return;
  if (ok && lane.kind == kSendLane) c.sentSeq[counter] = st.seq;
  if (ok && lane.kind == kRecvLane) c.recvSeq[counter] = st.seq;
  // The last block to finish numbers the call, for the next one (blocks read it at their start,
  // all before any finishes).
  __threadfence();
  unsigned long long* finished = reinterpret_cast<unsigned long long*>(a.state + 1);
  if (atomicAdd(finished, 1ull) == gridDim.x - 1) {
    *finished = 0;
    a.state[0] = st.call;
    __threadfence();
  }
}

}  // namespace

int planBlocksPerMultiprocessor() {
  int fewest = kMaxBlocks;
  for (int t = 0; t < loomNumTypes; ++t) {
    for (loomRedOp_t op : {loomSum, loomProd, loomMax, loomMin}) {
      for (Accum accum : {Accum::kNative, Accum::kFp16, Accum::kFp32, Accum::kFp64}) {
        withReducer(static_cast<loomDataType_t>(t), op, accum, [&](auto reducer) {
          int blocks = 0;
          if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, planKernel<decltype(reducer)>,
                                                            kThreads, 0) == cudaSuccess)
            fewest = blocks < fewest ? blocks : fewest;
        });
      }
    }
  }
  cudaGetLastError();
  return fewest;
}

void launchPlan(const DevComm& comm, const PlanKernelArgs& args, ReduceKey key, int blocks,
                int threads, cudaStream_t stream) {
  launchReducing(key, "plan", [&](auto reducer) {
    planKernel<decltype(reducer)><<<blocks, threads, 0, stream>>>(comm, args);
  });
}

}  // namespace loom::cuda
