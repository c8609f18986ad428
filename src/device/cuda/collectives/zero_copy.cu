// Zero-copy collectives on registered windows; the steps are in zero_copy.hpp.
//
// Arrival and departure are flags in every rank's own communicator window (WindowLayout::sync),
// one per (phase, block, source rank), holding monotonically growing sequence numbers: block b's
// count of zero-copy calls (DevComm::syncSeq) is the same on every rank, since every rank runs
// the same calls with the same grid. A rank can be at most one call ahead of a peer: its next
// arrival waits for the peer's departure from this one. So a tag written with an arrival is read
// by the peer before it can be overwritten.
#include "base/error.hpp"
#include "device/cuda/collectives/launch.cuh"
#include "device/cuda/collectives/primitives.cuh"
#include "device/cuda/collectives/reduce_ops.cuh"
#include "device/cuda/collectives/zero_copy.hpp"

namespace loom::cuda {

namespace {

enum Phase : int { kArrive = 0, kDepart = 1 };

// Rank p's registered buffer `ref` (from its arrival) as mapped here, into `base`; waits while
// this rank's host has not mapped that registration yet (its watchdog looks every millisecond).
// Buffers not registered (kNoSlot) leave `base` alone.
__device__ __forceinline__ bool findRegistered(const DevComm& c, int p, const BufferRef& ref,
                                               uintptr_t& base) {
  if (ref.slot == kNoSlot) return true;
  if (ref.slot >= kMaxRegistrations) {
    giveUp(c, kDevWindowMismatch, p);
    return false;
  }
  const ImportEntry* e = c.imports + static_cast<size_t>(p) * kMaxRegistrations + ref.slot;
  Waiter waiter(c, kDevUnmapped);
  while (loadAcquire(&e->gen) != ref.gen)
    if (waiter.shouldStop(p)) return false;
  base = static_cast<uintptr_t>(loadRelaxed(&e->base)) + ref.offset;
  return true;
}

// A pointer of the arguments as this block uses it (from code 0: as it is).
__device__ __forceinline__ char* located(const char* p, uint8_t from, const uintptr_t* bases) {
  return reinterpret_cast<char*>(reinterpret_cast<uintptr_t>(p) + bases[from]);
}

// Thread p tells block b of rank p that this block reached `phase` of call `seq`, then waits
// until block b of rank p has too. False on every thread when a wait gave up or a peer's arrival
// carried another tag (an asymmetric call: recorded as the kernel's error). On arrival, thread p
// also finds rank p's registered buffers that the call addresses (`bases`, by from code).
__device__ __forceinline__ bool syncPeers(const DevComm& c, Phase phase, uint64_t seq,
                                          const ZeroCopyArgs& a, uintptr_t* bases) {
  __syncthreads();  // the block's accesses of the step before are complete
  const int n = c.nranks, me = c.rank, p = threadIdx.x;
  int stop = 0;
  if (p < n && p != me) {
    const size_t at = (static_cast<size_t>(phase) * kMaxBlocks + blockIdx.x) * n;
    SyncFlag* to = c.sync[p] + at + me;
    storeRelaxed(&to->tag, a.tag);
    if (phase == kArrive && a.resolve) {
      to->send = a.sendRef;
      to->recv = a.recvRef;
    }
    storeRelease(&to->seq, seq);  // after the block's writes into p's memory and the tag
    const SyncFlag* from = c.sync[me] + at + p;
    stop = !waitAtLeast<true>(c, &from->seq, seq, p);
    if (!stop && phase == kArrive && loadRelaxed(&from->tag) != a.tag) {
      giveUp(c, kDevWindowMismatch, p);
      stop = 1;
    }
    if (!stop && phase == kArrive && a.resolve) {
      stop = !findRegistered(c, p, from->send, bases[peerCode(p, 0)]) ||
             !findRegistered(c, p, from->recv, bases[peerCode(p, 1)]);
    }
  }
  return !__syncthreads_or(stop);
}

// The call's sequence number for this block (shared by its threads); clears `bases`.
__device__ __forceinline__ uint64_t openCall(const DevComm& c, uint64_t& shared, uintptr_t* bases) {
  if (threadIdx.x == 0) shared = c.syncSeq[blockIdx.x] + 1;
  if (threadIdx.x < kFromCodes) bases[threadIdx.x] = 0;
  __syncthreads();
  return shared;
}

__device__ __forceinline__ void closeCall(const DevComm& c, uint64_t seq) {
  if (threadIdx.x == 0) c.syncSeq[blockIdx.x] = seq;
}

__global__ void __launch_bounds__(kThreads) zeroCopyCopyKernel(DevComm c, ZeroCopyArgs a) {
  __shared__ uint64_t shared;
  __shared__ uintptr_t bases[kFromCodes];
  const uint64_t seq = openCall(c, shared, bases);
  if (!syncPeers(c, kArrive, seq, a, bases)) return;
  // Pieces in the order of their destinations from this rank on, so that not every rank writes
  // into the same peer at once.
  for (int i = 0; i < a.pieces; ++i) {
    const int k = (i + c.rank) % a.pieces;
    Range r = splitRange(a.bytes[k], blockIdx.x, a.blocks);
    blockCopy<false>(located(a.dst[k], a.dstFrom[k], bases) + r.begin,
                     located(a.src[k], a.srcFrom[k], bases) + r.begin, r.size());
  }
  if (!syncPeers(c, kDepart, seq, a, bases)) return;
  closeCall(c, seq);
}

template <typename R>
__global__ void __launch_bounds__(kThreads) zeroCopyReduceKernel(DevComm c, ZeroCopyArgs a) {
  __shared__ uint64_t shared;
  __shared__ uintptr_t bases[kFromCodes];
  const uint64_t seq = openCall(c, shared, bases);
  if (!syncPeers(c, kArrive, seq, a, bases)) return;
  const Range mine = splitRange(a.reduceBytes, blockIdx.x, a.blocks);
  const size_t stride = static_cast<size_t>(blockDim.x) * 16;
  // kUnroll independent 16-byte loads in flight per input (peers' inputs are reads across the
  // link). Every thread reads and writes the same offsets of every buffer: in place, an offset
  // is read from every input before any output at that offset is written.
  for (size_t base = mine.begin + static_cast<size_t>(threadIdx.x) * 16; base < mine.end;
       base += kUnroll * stride) {
    typename R::template Acc<16> acc[kUnroll];
    for (int q = 0; q < c.nranks; ++q) {
      const char* input = located(a.inputs[q], a.inputsFrom[q], bases);
      uint4 v[kUnroll];
#pragma unroll
      for (int j = 0; j < kUnroll; ++j) {
        const size_t off = base + j * stride;
        v[j] = off < mine.end ? loadBytes16(input + off, mine.end - off) : make_uint4(0, 0, 0, 0);
      }
#pragma unroll
      for (int j = 0; j < kUnroll; ++j) {
        if (q == 0) {
          R::template first<16>(acc[j], &v[j]);
        } else {
          R::template next<16>(acc[j], &v[j]);
        }
      }
    }
#pragma unroll
    for (int j = 0; j < kUnroll; ++j) {
      const size_t off = base + j * stride;
      if (off >= mine.end) break;
      const size_t len = mine.end - off < 16 ? mine.end - off : 16;
      uint4 out;
      R::template finish<16>(&out, acc[j], a.divisor);
      for (int k = 0; k < a.outputCount; ++k)
        storeBytes16(located(a.outputs[k], a.outputsFrom[k], bases) + off, out, len);
    }
  }
  if (!syncPeers(c, kDepart, seq, a, bases)) return;
  closeCall(c, seq);
}

}  // namespace

void launchZeroCopyCopy(const DevComm& comm, const ZeroCopyArgs& args, cudaStream_t stream) {
  const int threads = args.threads > 0 ? args.threads : kThreads;
  zeroCopyCopyKernel<<<args.blocks, threads, 0, stream>>>(comm, args);
  checkLaunch("zero-copy copy");
}

void launchZeroCopyReduce(const DevComm& comm, const ZeroCopyArgs& args, ReduceKey key,
                          cudaStream_t stream) {
  const int threads = args.threads > 0 ? args.threads : kThreads;
  launchReducing(key, "zero-copy reduce", [&](auto reducer) {
    zeroCopyReduceKernel<decltype(reducer)><<<args.blocks, threads, 0, stream>>>(comm, args);
  });
}

}  // namespace loom::cuda
