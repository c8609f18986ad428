// Simple (bulk) exchange: the large-message protocol of every GPU collective but allreduce.
//
// Steps, per block b (block b of every rank works on the same slice of every transfer) and per
// chunk of at most slotBytes:
//   1. slots free: thread p waits until peer p acknowledged the chunk that last used the slot
//      (seq-2); one barrier.
//   2. send: every thread writes 16-byte vectors of the chunks for all peers into their windows;
//      barrier; thread 0 fences once (system scope) and stores seq into every peer's ready flag.
//   3. receive: thread q waits for peer q's ready flag; every thread copies the slots to their
//      destinations (copy), or reads the same vectors of every rank in rank order and reduces
//      them (reduce), four independent 16-byte loads in flight per thread.
//   4. acknowledge (thread q to peer q), which frees the slot for the chunk after next.
// Double-buffered slots let chunk k+1 travel while chunk k is consumed.
#include "base/error.hpp"
#include "device/cuda/collectives/exchange_common.cuh"
#include "device/cuda/collectives/launch.cuh"
#include "device/cuda/collectives/reduce_ops.cuh"

namespace loom::cuda {

namespace {

__device__ bool simpleSendAll(const DevComm& c, const ExchangeArgs& a, int channel,
                              BlockChannels& ch, size_t k, size_t payload) {
  const uint32_t peers = peersWithChunk(c, a, a.sendBytes, k, payload);
  if (peers == 0) return true;
  if (!waitSlotsFree(c, channel, peers, ch)) return false;
  for (int i = 1; i < c.nranks; ++i) {
    const int p = sendPeer(c, i);
    if (((peers >> p) & 1) == 0) continue;
    Range piece = blockChunk(a, a.sendBytes[p], k, payload);
    blockCopy<false>(sendSlot(c, channel, p, ch, false), a.send[p] + piece.begin, piece.size());
  }
  postSends(c, channel, peers, ch, true);
  return true;
}

__global__ void __launch_bounds__(kThreads) simpleCopyKernel(DevComm c, ExchangeArgs a) {
  __shared__ BlockChannels ch;
  const int channel = a.channelBase + blockIdx.x;
  openChannels(c, channel, ch);
  selfCopy(a);
  const size_t payload = c.slotBytes;
  const size_t iterations = exchangeIterations(c, a, payload);
  for (size_t k = 0; k < iterations; ++k) {
    if (!simpleSendAll(c, a, channel, ch, k, payload)) return;
    const uint32_t sources = peersWithChunk(c, a, a.recvBytes, k, payload);
    if (sources == 0) continue;
    if (!waitReadyAll(c, channel, sources, ch)) return;
    for (int i = 1; i < c.nranks; ++i) {
      const int q = recvPeer(c, i);
      if (((sources >> q) & 1) == 0) continue;
      Range piece = blockChunk(a, a.recvBytes[q], k, payload);
      blockCopy<true>(a.recv[q] + piece.begin, receiveSlot(c, channel, q, ch, false), piece.size());
    }
    endReceiveAll(c, channel, sources, ch);
  }
  closeChannels(c, channel, ch);
}

template <typename R>
__global__ void __launch_bounds__(kThreads) simpleReduceKernel(DevComm c, ExchangeArgs a) {
  __shared__ BlockChannels ch;
  const int channel = a.channelBase + blockIdx.x;
  openChannels(c, channel, ch);
  const size_t payload = c.slotBytes;
  const size_t iterations = exchangeIterations(c, a, payload);
  const uint32_t sources = receivingPeers(c, a);
  const int me = c.rank;
  for (size_t k = 0; k < iterations; ++k) {
    if (!simpleSendAll(c, a, channel, ch, k, payload)) return;
    if (a.reduceBytes == 0) continue;
    Range piece = blockChunk(a, a.reduceBytes, k, payload);
    if (piece.size() == 0) continue;
    if (!waitReadyAll(c, channel, sources, ch)) return;
    const char* self = a.selfSend + piece.begin;
    blockReduce<R>(a.reduceOut + piece.begin, piece.size(), sources | (1u << me), a.divisor,
                   [&](int q, size_t off, size_t n) {
                     return q == me ? loadBytes16(self + off, n)
                                    : loadSlot16(receiveSlot(c, channel, q, ch, false) + off);
                   });
    endReceiveAll(c, channel, sources, ch);
  }
  closeChannels(c, channel, ch);
}

}  // namespace

void launchSimpleCopy(const DevComm& comm, const ExchangeArgs& args, cudaStream_t stream) {
  simpleCopyKernel<<<args.blocks, kThreads, 0, stream>>>(comm, args);
  checkLaunch("simple copy");
}

void launchSimpleReduce(const DevComm& comm, const ExchangeArgs& args, ReduceKey key,
                        cudaStream_t stream) {
  launchReducing(key, "simple reduce", [&](auto reducer) {
    simpleReduceKernel<decltype(reducer)><<<args.blocks, kThreads, 0, stream>>>(comm, args);
  });
}

}  // namespace loom::cuda
