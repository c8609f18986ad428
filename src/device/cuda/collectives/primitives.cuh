// Device-side building blocks of every GPU collective: waits that give up (abort flag, deadline),
// 16-byte and LL-packet copies, and channels between the same block index of two ranks.
//
// A channel (block b, rank r -> rank p) is a pair of slots in p's window plus two counters: r
// posts chunk `seq` into slot seq % 2 and bumps p's ready[b][r]; p consumes it and bumps r's
// acks[b][p]. r may reuse a slot once p acknowledged the chunk that last used it (seq - 2). In the
// LL protocol the flag travels inside every 16-byte packet instead ({data, seq, data, seq}), so the
// receiver needs no separate ready flag and the sender no memory fence.
#pragma once

#include <cstddef>
#include <cstdint>

#include "device/cuda/collectives/dev_comm.hpp"

namespace loom::cuda {

__device__ __forceinline__ uint64_t globalTimer() {
  uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

__device__ __forceinline__ uint64_t loadAcquire(const uint64_t* p) {
  uint64_t v;
  asm volatile("ld.acquire.sys.global.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
  return v;
}

// Flags between blocks of one kernel on this GPU (the plan kernel's progress words): acquire and
// release at GPU scope, cheaper than the system scope that flags read by peers need.
__device__ __forceinline__ uint64_t loadAcquireGpu(const uint64_t* p) {
  uint64_t v;
  asm volatile("ld.acquire.gpu.global.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
  return v;
}
__device__ __forceinline__ void storeReleaseGpu(uint64_t* p, uint64_t v) {
  asm volatile("st.release.gpu.global.u64 [%0], %1;" ::"l"(p), "l"(v) : "memory");
}

// Flags whose only job is to say "that slot is free again" need no ordering of data: relaxed
// system-scope accesses, without the full memory barrier a release costs.
__device__ __forceinline__ uint64_t loadRelaxed(const uint64_t* p) {
  uint64_t v;
  asm volatile("ld.relaxed.sys.global.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
  return v;
}

__device__ __forceinline__ void storeRelaxed(uint64_t* p, uint64_t v) {
  asm volatile("st.relaxed.sys.global.u64 [%0], %1;" ::"l"(p), "l"(v) : "memory");
}

// A flag that publishes data written before it (by this thread, or by the block's threads
// before a barrier): system-scope release.
__device__ __forceinline__ void storeRelease(uint64_t* p, uint64_t v) {
  asm volatile("st.release.sys.global.u64 [%0], %1;" ::"l"(p), "l"(v) : "memory");
}

__device__ __forceinline__ uint4 loadVolatile16(const void* p) {
  uint4 v;
  asm volatile("ld.volatile.global.v4.u32 {%0,%1,%2,%3}, [%4];"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "l"(p)
               : "memory");
  return v;
}

__device__ __forceinline__ void storeVolatile16(void* p, uint4 v) {
  asm volatile("st.volatile.global.v4.u32 [%0], {%1,%2,%3,%4};" ::"l"(p), "r"(v.x), "r"(v.y),
               "r"(v.z), "r"(v.w)
               : "memory");
}

// Records why this rank's kernels stop (the first reason wins) and raises the abort, so every
// other block and kernel of this rank stops as well.
__device__ __forceinline__ void giveUp(const DevComm& comm, int error, int peer) {
  volatile DevStatus* status = comm.status;
  if (status->error == kDevOk) {
    status->errorPeer = peer;
    status->error = error;
  }
  __threadfence_system();
  status->abort = 1;
}

// Gives up a wait: on the host's abort, or past the communicator's timeout (then it records why
// and raises the abort so every other block and kernel of this rank stops as well).
struct Waiter {
  const DevComm& comm;
  int error;  // recorded past the timeout
  uint64_t start = 0;
  uint32_t spins = 0;
  __device__ explicit Waiter(const DevComm& c, int timeoutError = kDevTimeout)
      : comm(c), error(timeoutError) {}
  __device__ bool shouldStop(int peer) {
    if ((++spins & 1023) != 0) return false;
    volatile DevStatus* status = comm.status;
    if (status->abort != 0) return true;
    uint64_t now = globalTimer();
    if (start == 0) start = now;
    if (now - start > 1000000) status->waiting = 1;  // the host's watchdog then checks the peers
    if (now - start <= comm.timeoutNs) return false;
    giveUp(comm, error, peer);
    return true;
  }
};

// Waits until *flag >= target; kAcquire when data written before the flag is read next. False
// when the wait gave up.
template <bool kAcquire>
__device__ __forceinline__ bool waitAtLeast(const DevComm& comm, const uint64_t* flag,
                                            uint64_t target, int peer) {
  Waiter waiter(comm);
  while ((kAcquire ? loadAcquire(flag) : loadRelaxed(flag)) < target)
    if (waiter.shouldStop(peer)) return false;
  return true;
}

// ---- Byte movement. User buffers may be misaligned; windows never are. ----

__device__ __forceinline__ bool aligned16(const void* p) {
  return (reinterpret_cast<uintptr_t>(p) & 15) == 0;
}

__device__ __forceinline__ bool aligned4(const void* p) {
  return (reinterpret_cast<uintptr_t>(p) & 3) == 0;
}

// kWords 4-byte words at p (4-byte aligned): where a range starts off a 16-byte boundary at a
// 4-byte element (an execution plan's chunk of an odd split, a user's offset buffer), a vector
// costs kWords accesses instead of one per byte.
template <bool kThroughL2, int kWords>
__device__ __forceinline__ void loadWords(const char* p, uint32_t* out) {
  const uint32_t* w = reinterpret_cast<const uint32_t*>(p);
#pragma unroll
  for (int i = 0; i < kWords; ++i) out[i] = kThroughL2 ? __ldcg(w + i) : w[i];
}

template <int kWords>
__device__ __forceinline__ void storeWords(char* p, const uint32_t* in) {
  uint32_t* w = reinterpret_cast<uint32_t*>(p);
#pragma unroll
  for (int i = 0; i < kWords; ++i) w[i] = in[i];
}

// Up to 16 bytes from p (n < 16 only at the end of a range); missing bytes read as zero.
// kThroughL2: a buffer other blocks of the running kernel wrote (.cg loads, never a line an
// earlier read left in this SM's L1).
template <bool kThroughL2 = false>
__device__ __forceinline__ uint4 loadBytes16(const char* p, size_t n) {
  if (n >= 16 && aligned16(p))
    return kThroughL2 ? __ldcg(reinterpret_cast<const uint4*>(p))
                      : *reinterpret_cast<const uint4*>(p);
  uint4 v = make_uint4(0, 0, 0, 0);
  if (n >= 16 && aligned4(p)) {
    loadWords<kThroughL2, 4>(p, reinterpret_cast<uint32_t*>(&v));
    return v;
  }
  char* out = reinterpret_cast<char*>(&v);
  for (size_t i = 0; i < n && i < 16; ++i) out[i] = kThroughL2 ? __ldcg(p + i) : p[i];
  return v;
}

__device__ __forceinline__ void storeBytes16(char* p, uint4 v, size_t n) {
  if (n >= 16 && aligned16(p)) {
    *reinterpret_cast<uint4*>(p) = v;
    return;
  }
  if (n >= 16 && aligned4(p)) {
    storeWords<4>(p, reinterpret_cast<const uint32_t*>(&v));
    return;
  }
  const char* in = reinterpret_cast<const char*>(&v);
  for (size_t i = 0; i < n && i < 16; ++i) p[i] = in[i];
}

template <bool kThroughL2 = false>
__device__ __forceinline__ uint2 loadBytes8(const char* p, size_t n) {
  if (n >= 8 && (reinterpret_cast<uintptr_t>(p) & 7) == 0)
    return kThroughL2 ? __ldcg(reinterpret_cast<const uint2*>(p))
                      : *reinterpret_cast<const uint2*>(p);
  uint2 v = make_uint2(0, 0);
  if (n >= 8 && aligned4(p)) {
    loadWords<kThroughL2, 2>(p, reinterpret_cast<uint32_t*>(&v));
    return v;
  }
  char* out = reinterpret_cast<char*>(&v);
  for (size_t i = 0; i < n && i < 8; ++i) out[i] = kThroughL2 ? __ldcg(p + i) : p[i];
  return v;
}

__device__ __forceinline__ void storeBytes8(char* p, uint2 v, size_t n) {
  if (n >= 8 && (reinterpret_cast<uintptr_t>(p) & 7) == 0) {
    *reinterpret_cast<uint2*>(p) = v;
    return;
  }
  if (n >= 8 && aligned4(p)) {
    storeWords<2>(p, reinterpret_cast<const uint32_t*>(&v));
    return;
  }
  const char* in = reinterpret_cast<const char*>(&v);
  for (size_t i = 0; i < n && i < 8; ++i) p[i] = in[i];
}

// Reads 16 bytes of a slot that a peer wrote (after the ready flag was acquired): through L2,
// never a stale L1 line, and without the ordering of a volatile access, so loads pipeline.
__device__ __forceinline__ uint4 loadSlot16(const char* p) {
  return __ldcg(reinterpret_cast<const uint4*>(p));
}

constexpr int kUnroll = 4;  // independent 16-byte loads in flight per thread

// Block-wide copy of n bytes; kFromSlot: src is a slot of this rank's window; kThroughL2: src is
// a buffer other blocks of the running kernel wrote (see loadBytes16). dst may equal src.
template <bool kFromSlot, bool kThroughL2 = false>
__device__ __forceinline__ void blockCopy(char* dst, const char* src, size_t n) {
  const size_t stride = static_cast<size_t>(blockDim.x) * 16;
  size_t off = static_cast<size_t>(threadIdx.x) * 16;
  for (; off + (kUnroll - 1) * stride + 16 <= n; off += kUnroll * stride) {
    uint4 v[kUnroll];
#pragma unroll
    for (int j = 0; j < kUnroll; ++j)
      v[j] = kFromSlot ? loadSlot16(src + off + j * stride)
                       : loadBytes16<kThroughL2>(src + off + j * stride, 16);
#pragma unroll
    for (int j = 0; j < kUnroll; ++j) storeBytes16(dst + off + j * stride, v[j], 16);
  }
  for (; off < n; off += stride) {
    const size_t len = n - off < 16 ? n - off : 16;
    // Slots are padded to 16 bytes: a slot's tail is read whole.
    uint4 v = kFromSlot ? loadSlot16(src + off) : loadBytes16<kThroughL2>(src + off, len);
    storeBytes16(dst + off, v, len);
  }
}

// out = reduction over the sources in `mask` (bit q: source q, a rank's data or a plan's
// operand), in source order, of len bytes; source(q, off, n) returns 16 bytes (n valid) of
// source q at offset off. Each thread loads every source at its offsets before it stores them,
// so out may be one of the sources at the same offsets (in place); keep it so.
template <typename R, typename Source>
__device__ __forceinline__ void blockReduce(char* out, size_t len, uint32_t mask, int divisor,
                                            Source&& source) {
  const size_t stride = static_cast<size_t>(blockDim.x) * 16;
  for (size_t base = static_cast<size_t>(threadIdx.x) * 16; base < len; base += kUnroll * stride) {
    typename R::template Acc<16> acc[kUnroll];
    bool first = true;
    for (uint32_t rest = mask; rest != 0; rest &= rest - 1) {
      const int q = __ffs(rest) - 1;
      uint4 v[kUnroll];
#pragma unroll
      for (int j = 0; j < kUnroll; ++j) {
        const size_t off = base + j * stride;
        v[j] = off < len ? source(q, off, len - off) : make_uint4(0, 0, 0, 0);
      }
#pragma unroll
      for (int j = 0; j < kUnroll; ++j) {
        if (first) {
          R::template first<16>(acc[j], &v[j]);
        } else {
          R::template next<16>(acc[j], &v[j]);
        }
      }
      first = false;
    }
#pragma unroll
    for (int j = 0; j < kUnroll; ++j) {
      const size_t off = base + j * stride;
      if (off >= len) break;
      uint4 o;
      R::template finish<16>(&o, acc[j], divisor);
      storeBytes16(out + off, o, len - off < 16 ? len - off : 16);
    }
  }
}

// ---- LL packets: 8 payload bytes and two copies of the flag in 16 bytes. ----

__device__ __forceinline__ void storePacket(char* slot, size_t word, uint2 data, uint32_t flag) {
  storeVolatile16(slot + word * 16, make_uint4(data.x, flag, data.y, flag));
}

// Polls packet `word` of a slot until it carries `flag`. False when the wait gave up.
__device__ __forceinline__ bool loadPacket(const DevComm& comm, const char* slot, size_t word,
                                           uint32_t flag, int peer, uint2& data) {
  Waiter waiter(comm);
  for (;;) {
    uint4 v = loadVolatile16(slot + word * 16);
    if (v.y == flag && v.w == flag) {
      data = make_uint2(v.x, v.z);
      return true;
    }
    if (waiter.shouldStop(peer)) return false;
  }
}

// ---- Windows and channels. ----

// Offset of a slot within a window's slots (or, with the LL size, llSlots) region.
__device__ __forceinline__ size_t slotOffset(const DevComm& c, int block, int source, uint64_t seq,
                                             size_t bytesPerSlot) {
  return ((static_cast<size_t>(block) * c.nranks + source) * kSlotsPerChannel + (seq & 1)) *
         bytesPerSlot;
}
__device__ __forceinline__ size_t slotOffset(const DevComm& c, int block, int source,
                                             uint64_t seq) {
  return slotOffset(c, block, source, seq, c.slotBytes);
}

// Per-block channel state, kept in shared memory for the length of one kernel. Entry p is
// updated by thread p only (between barriers), so peers' bookkeeping runs in parallel.
struct BlockChannels {
  uint64_t sent[kMaxRanks];
  uint64_t received[kMaxRanks];
  uint64_t freed[kMaxRanks];  // the last chunk peer p acknowledged, as last read here
};

// Loads this block's counters and what each peer last acknowledged. Ends with a barrier. (No
// check of the abort word here: that is a read across PCIe; a kernel of an aborted communicator
// stops at its first wait instead.)
__device__ __forceinline__ void openChannels(const DevComm& c, int channel, BlockChannels& ch) {
  const int p = threadIdx.x;
  if (p < c.nranks) {
    // The three loads are independent, and all are issued before any result is stored, so they
    // are in flight together: one memory latency before the first packet instead of two (the
    // peer's acknowledgement was a second, dependent one in waitSlotsFree).
    const int i = channel * c.nranks + p;
    const uint64_t freed = loadRelaxed(c.acks[c.rank] + i);
    const uint64_t sent = c.sentSeq[i], received = c.recvSeq[i];
    ch.freed[p] = freed;
    ch.sent[p] = sent;
    ch.received[p] = received;
  }
  __syncthreads();
}

__device__ __forceinline__ void closeChannels(const DevComm& c, int channel,
                                              const BlockChannels& ch) {
  __syncthreads();
  const int p = threadIdx.x;
  if (p < c.nranks) {
    c.sentSeq[channel * c.nranks + p] = ch.sent[p];
    c.recvSeq[channel * c.nranks + p] = ch.received[p];
  }
}

// The slot the next chunk to `peer` goes to (in the peer's window) and the slot the next chunk
// from `peer` arrives in (in this rank's window).
__device__ __forceinline__ char* sendSlot(const DevComm& c, int channel, int peer,
                                          const BlockChannels& ch, bool ll) {
  const uint64_t seq = ch.sent[peer] + 1;
  return ll ? c.llSlots[peer] + slotOffset(c, channel, c.rank, seq, c.llSlotBytes)
            : c.slots[peer] + slotOffset(c, channel, c.rank, seq);
}
__device__ __forceinline__ const char* receiveSlot(const DevComm& c, int channel, int peer,
                                                   const BlockChannels& ch, bool ll) {
  const uint64_t seq = ch.received[peer] + 1;
  return ll ? c.llSlots[c.rank] + slotOffset(c, channel, peer, seq, c.llSlotBytes)
            : c.slots[c.rank] + slotOffset(c, channel, peer, seq);
}

// Waits until every peer in `peers` has consumed the chunk that last used the slot of this
// rank's next send to it (thread p waits for peer p; no read when the acknowledgement last seen
// already says so, as acknowledgements only grow). False on all threads when a wait gave up.
// Ends with a barrier.
__device__ __forceinline__ bool waitSlotsFree(const DevComm& c, int channel, uint32_t peers,
                                              BlockChannels& ch) {
  int stop = 0;
  const int p = threadIdx.x;
  if (p < c.nranks && ((peers >> p) & 1)) {
    const uint64_t seq = ch.sent[p] + 1;
    if (seq > kSlotsPerChannel && ch.freed[p] < seq - kSlotsPerChannel) {
      stop = !waitAtLeast<false>(c, c.acks[c.rank] + channel * c.nranks + p, seq - kSlotsPerChannel,
                                 p);
      ch.freed[p] = seq - kSlotsPerChannel;
    }
  }
  return !__syncthreads_or(stop);
}

// After the chunks to `peers` were written: simple protocol, one system fence (thread 0) and
// then every peer's ready flag; LL, only the count. Ends with a barrier.
__device__ __forceinline__ void postSends(const DevComm& c, int channel, uint32_t peers,
                                          BlockChannels& ch, bool setReadyFlags) {
  __syncthreads();
  if (threadIdx.x == 0) {
    if (setReadyFlags && peers != 0) __threadfence_system();
    for (uint32_t rest = peers; rest != 0; rest &= rest - 1) {
      const int p = __ffs(rest) - 1;
      const uint64_t seq = ++ch.sent[p];
      if (setReadyFlags) storeRelaxed(c.ready[p] + channel * c.nranks + c.rank, seq);
    }
  }
  __syncthreads();
}

// Simple protocol: waits (thread q for peer q) for the next chunk of every peer in `peers`.
// False on all threads when a wait gave up. Ends with a barrier.
__device__ __forceinline__ bool waitReadyAll(const DevComm& c, int channel, uint32_t peers,
                                             const BlockChannels& ch) {
  int stop = 0;
  const int q = threadIdx.x;
  if (q < c.nranks && ((peers >> q) & 1))
    stop = !waitAtLeast<true>(c, c.ready[c.rank] + channel * c.nranks + q, ch.received[q] + 1, q);
  return !__syncthreads_or(stop);
}

// Acknowledges the next chunk of every peer in `peers` (after every thread's reads of it, hence
// the barrier first; a relaxed store, since reads that produced values are complete). Ends with a
// barrier.
__device__ __forceinline__ void endReceiveAll(const DevComm& c, int channel, uint32_t peers,
                                              BlockChannels& ch) {
  __syncthreads();
  const int q = threadIdx.x;
  if (q < c.nranks && ((peers >> q) & 1)) {
    const uint64_t seq = ++ch.received[q];
    storeRelaxed(c.acks[q] + channel * c.nranks + c.rank, seq);
  }
  __syncthreads();
}

// ---- Work split. Ranges split on 16-byte units, so every piece starts on an element boundary
// and, for aligned buffers, on a vector boundary. Both ends of a channel compute the same split.

struct Range {
  size_t begin;
  size_t end;
  __device__ size_t size() const { return end - begin; }
};

__device__ __forceinline__ Range splitRange(size_t bytes, int part, int parts) {
  size_t units = (bytes + 15) / 16;
  size_t b = units * part / parts * 16, e = units * (part + 1) / parts * 16;
  return Range{b < bytes ? b : bytes, e < bytes ? e : bytes};
}

__device__ __forceinline__ size_t chunkCount(size_t bytes, size_t payload) {
  return (bytes + payload - 1) / payload;
}

// Chunk k of a range, as a sub-range.
__device__ __forceinline__ Range chunkOf(Range r, size_t k, size_t payload) {
  size_t b = r.begin + k * payload;
  size_t e = b + payload;
  return Range{b < r.end ? b : r.end, e < r.end ? e : r.end};
}

}  // namespace loom::cuda
