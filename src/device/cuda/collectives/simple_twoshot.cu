// Two-shot allreduce for large messages: a reduce-scatter then an all-gather, both over simple
// channels, interleaved chunk by chunk so that both phases keep NVLink busy.
//
// The message is cut into nranks shards (rank p owns shard p); block b of every rank handles the
// same slice of every shard. Per chunk k of the block's slices:
//   1. scatter: send the chunk of shard p of the input to every peer p.
//   2. reduce: wait for every peer's chunk of shard `rank`; reduce them with this rank's own, in
//      rank order, into the output (this block's threads, 16-byte vectors); acknowledge.
//   3. gather-send: send that reduced chunk to every peer.
//   4. gather-receive: copy every peer's reduced chunk of its shard into the output.
// Every rank moves 2 (n-1)/n of the message over NVLink, the bandwidth-optimal amount. In place
// is safe: chunk k of a shard is read (steps 1-2) before any step writes it (2, 4).
#include "base/error.hpp"
#include "device/cuda/collectives/exchange.hpp"
#include "device/cuda/collectives/launch.cuh"
#include "device/cuda/collectives/primitives.cuh"
#include "device/cuda/collectives/reduce_ops.cuh"

namespace loom::cuda {

namespace {

__device__ __forceinline__ Range shardOf(const TwoShotArgs& a, int shard, int shards) {
  return splitRange(a.bytes, shard, shards);
}

// Chunk k of block b's slice of a shard, in message offsets; empty past the slice's end.
__device__ __forceinline__ Range shardChunk(const TwoShotArgs& a, Range shard, size_t k,
                                            size_t payload) {
  Range local = splitRange(shard.size(), blockIdx.x, a.blocks);
  if (k >= chunkCount(local.size(), payload)) return Range{0, 0};
  Range piece = chunkOf(local, k, payload);
  return Range{shard.begin + piece.begin, shard.begin + piece.end};
}

template <typename R>
__global__ void __launch_bounds__(kThreads) twoShotKernel(DevComm c, TwoShotArgs a) {
  __shared__ BlockChannels ch;
  const int channel = blockIdx.x;
  openChannels(c, channel, ch);
  const size_t payload = c.slotBytes;
  const int n = c.nranks, me = c.rank;
  size_t iterations = 0;
  for (int p = 0; p < n; ++p) {
    size_t k =
        chunkCount(splitRange(shardOf(a, p, n).size(), blockIdx.x, a.blocks).size(), payload);
    iterations = k > iterations ? k : iterations;
  }
  const uint32_t everyone = (n >= 32 ? ~0u : (1u << n) - 1u);
  const uint32_t others = everyone & ~(1u << me);
  const Range myShard = shardOf(a, me, n);
  for (size_t k = 0; k < iterations; ++k) {
    // 1. scatter: the chunk of shard p to peer p.
    uint32_t scatterTo = 0;
    for (int p = 0; p < n; ++p)
      if (p != me && shardChunk(a, shardOf(a, p, n), k, payload).size() > 0) scatterTo |= 1u << p;
    if (scatterTo != 0) {
      if (!waitSlotsFree(c, channel, scatterTo, ch)) return;
      for (int i = 1; i < n; ++i) {
        const int p = (me + i) % n;
        if (((scatterTo >> p) & 1) == 0) continue;
        Range piece = shardChunk(a, shardOf(a, p, n), k, payload);
        blockCopy<false>(sendSlot(c, channel, p, ch, false), a.send + piece.begin, piece.size());
      }
      postSends(c, channel, scatterTo, ch, true);
    }
    Range mine = shardChunk(a, myShard, k, payload);
    if (mine.size() > 0) {
      // 2. reduce every rank's chunk of this rank's shard into the output.
      if (!waitReadyAll(c, channel, others, ch)) return;
      const char* self = a.send + mine.begin;
      blockReduce<R>(a.recv + mine.begin, mine.size(), everyone, a.divisor,
                     [&](int q, size_t off, size_t m) {
                       return q == me ? loadBytes16(self + off, m)
                                      : loadSlot16(receiveSlot(c, channel, q, ch, false) + off);
                     });
      endReceiveAll(c, channel, others, ch);
      // 3. gather-send: the reduced chunk to every peer.
      if (!waitSlotsFree(c, channel, others, ch)) return;
      for (int i = 1; i < n; ++i) {
        const int p = (me + i) % n;
        blockCopy<false>(sendSlot(c, channel, p, ch, false), a.recv + mine.begin, mine.size());
      }
      postSends(c, channel, others, ch, true);
    }
    // 4. gather-receive: every peer's reduced chunk of its shard.
    uint32_t gatherFrom = 0;
    for (int q = 0; q < n; ++q)
      if (q != me && shardChunk(a, shardOf(a, q, n), k, payload).size() > 0) gatherFrom |= 1u << q;
    if (gatherFrom != 0) {
      if (!waitReadyAll(c, channel, gatherFrom, ch)) return;
      for (int i = 1; i < n; ++i) {
        const int q = (me - i + n) % n;
        if (((gatherFrom >> q) & 1) == 0) continue;
        Range piece = shardChunk(a, shardOf(a, q, n), k, payload);
        blockCopy<true>(a.recv + piece.begin, receiveSlot(c, channel, q, ch, false), piece.size());
      }
      endReceiveAll(c, channel, gatherFrom, ch);
    }
  }
  closeChannels(c, channel, ch);
}

template <typename R>
__global__ void __launch_bounds__(kThreads)
    localReduceKernel(char* dst, const char* const* srcs, int nsrc, size_t bytes, int divisor) {
  for (size_t off = (static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x) * 16; off < bytes;
       off += static_cast<size_t>(gridDim.x) * blockDim.x * 16) {
    const size_t m = bytes - off < 16 ? bytes - off : 16;
    typename R::template Acc<16> acc;
    for (int q = 0; q < nsrc; ++q) {
      uint4 v = loadBytes16(srcs[q] + off, m);
      if (q == 0) {
        R::template first<16>(acc, &v);
      } else {
        R::template next<16>(acc, &v);
      }
    }
    uint4 out;
    R::template finish<16>(&out, acc, divisor);
    storeBytes16(dst + off, out, m);
  }
}

}  // namespace

void launchTwoShot(const DevComm& comm, const TwoShotArgs& args, ReduceKey key,
                   cudaStream_t stream) {
  launchReducing(key, "two-shot", [&](auto reducer) {
    twoShotKernel<decltype(reducer)><<<args.blocks, kThreads, 0, stream>>>(comm, args);
  });
}

void launchLocalReduce(char* dst, const char* const* srcs, int nsrc, size_t bytes, ReduceKey key,
                       int divisor, cudaStream_t stream) {
  const int blocks = static_cast<int>((bytes / 16 + kThreads - 1) / kThreads);
  const int grid = blocks < 1 ? 1 : (blocks > 1024 ? 1024 : blocks);
  launchReducing(key, "reduce", [&](auto reducer) {
    localReduceKernel<decltype(reducer)>
        <<<grid, kThreads, 0, stream>>>(dst, srcs, nsrc, bytes, divisor);
  });
}

}  // namespace loom::cuda
