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
  if (!openChannels(c, channel, ch)) return;
  const size_t payload = c.slotBytes;
  const int n = c.nranks, me = c.rank;
  size_t iterations = 0;
  for (int p = 0; p < n; ++p) {
    size_t k =
        chunkCount(splitRange(shardOf(a, p, n).size(), blockIdx.x, a.blocks).size(), payload);
    iterations = k > iterations ? k : iterations;
  }
  const uint32_t peers = ((n >= 32 ? 0u : (1u << n)) - 1u) & ~(1u << me);
  const Range myShard = shardOf(a, me, n);
  for (size_t k = 0; k < iterations; ++k) {
    for (int i = 1; i < n; ++i) {  // 1. scatter
      const int p = (me + i) % n;
      Range piece = shardChunk(a, shardOf(a, p, n), k, payload);
      if (piece.size() == 0) continue;
      char* slot = beginSend(c, channel, p, ch, false);
      if (slot == nullptr) return;
      blockCopy<false>(slot, a.send + piece.begin, piece.size());
      endSend(c, channel, p, ch, true);
    }
    Range mine = shardChunk(a, myShard, k, payload);
    if (mine.size() > 0) {
      if (!waitReadyAll(c, channel, peers, ch)) return;  // 2. reduce
      const size_t len = mine.size();
      for (size_t off = static_cast<size_t>(threadIdx.x) * 16; off < len;
           off += static_cast<size_t>(blockDim.x) * 16) {
        const size_t m = len - off < 16 ? len - off : 16;
        typename R::template Acc<16> acc;
        for (int q = 0; q < n; ++q) {
          uint4 v = q == me ? loadBytes16(a.send + mine.begin + off, m)
                            : loadVolatile16(c.slots[me] +
                                             slotOffset(c, channel, q, ch.received[q] + 1) + off);
          if (q == 0) {
            R::template first<16>(acc, &v);
          } else {
            R::template next<16>(acc, &v);
          }
        }
        uint4 out;
        R::template finish<16>(&out, acc, a.divisor);
        storeBytes16(a.recv + mine.begin + off, out, m);
      }
      endReceiveAll(c, channel, peers, ch);
      for (int i = 1; i < n; ++i) {  // 3. gather-send
        const int p = (me + i) % n;
        char* slot = beginSend(c, channel, p, ch, false);
        if (slot == nullptr) return;
        blockCopy<false>(slot, a.recv + mine.begin, len);
        endSend(c, channel, p, ch, true);
      }
    }
    for (int i = 1; i < n; ++i) {  // 4. gather-receive
      const int q = (me - i + n) % n;
      Range piece = shardChunk(a, shardOf(a, q, n), k, payload);
      if (piece.size() == 0) continue;
      const char* slot = beginReceive(c, channel, q, ch, true);
      if (slot == nullptr) return;
      blockCopy<true>(a.recv + piece.begin, slot, piece.size());
      endReceive(c, channel, q, ch);
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
  bool found = withReducer(key.dtype, key.op, static_cast<Accum>(key.accum), [&](auto reducer) {
    twoShotKernel<decltype(reducer)><<<args.blocks, kThreads, 0, stream>>>(comm, args);
  });
  if (!found)
    LOOM_THROW(loomInvalidArgument, "no GPU reduction for this type, op and accumulation");
  cudaError_t err = cudaGetLastError();
  if (err != cudaSuccess)
    LOOM_THROW(loomUnhandledCudaError, "launching the two-shot kernel: ", cudaGetErrorString(err));
}

void launchLocalReduce(char* dst, const char* const* srcs, int nsrc, size_t bytes, ReduceKey key,
                       int divisor, cudaStream_t stream) {
  const int blocks = static_cast<int>((bytes / 16 + kThreads - 1) / kThreads);
  const int grid = blocks < 1 ? 1 : (blocks > 1024 ? 1024 : blocks);
  bool found = withReducer(key.dtype, key.op, static_cast<Accum>(key.accum), [&](auto reducer) {
    localReduceKernel<decltype(reducer)>
        <<<grid, kThreads, 0, stream>>>(dst, srcs, nsrc, bytes, divisor);
  });
  if (!found)
    LOOM_THROW(loomInvalidArgument, "no GPU reduction for this type, op and accumulation");
  cudaError_t err = cudaGetLastError();
  if (err != cudaSuccess)
    LOOM_THROW(loomUnhandledCudaError, "launching the reduce kernel: ", cudaGetErrorString(err));
}

}  // namespace loom::cuda
