// LL (low-latency) exchange: the small-message protocol of every GPU collective. Allreduce below
// the LL limit runs here as one-shot: every rank pushes its whole input to every peer and each
// reduces all inputs itself, one network step.
//
// Steps, per block b (block b of every rank works on the same slice of every transfer) and per
// chunk of at most llSlotBytes/2 payload bytes:
//   1. slots free: thread p waits until peer p acknowledged the chunk that last used the slot
//      (seq-2); one barrier.
//   2. send: every thread stores 16-byte packets {8 data bytes, seq, seq} straight into the
//      peers' windows. No fence and no flag: the flag is in the packet.
//   3. receive: every thread polls its packets in its own window until they carry seq, then
//      copies them to the destination (copy) or folds all ranks' words in rank order (reduce).
//   4. acknowledge: thread q tells peer q its chunk was consumed (relaxed store).
// A block has one thread per 8-byte word of its largest part, in whole warps, up to kThreads
// (CudaEngine::llThreads): a small call runs one warp per block.
#include "base/error.hpp"
#include "device/cuda/collectives/exchange_common.cuh"
#include "device/cuda/collectives/launch.cuh"
#include "device/cuda/collectives/reduce_ops.cuh"

namespace loom::cuda {

namespace {

// Steps 1 and 2 for chunk k of every transfer. False when a wait gave up.
__device__ bool llSendAll(const DevComm& c, const ExchangeArgs& a, int channel, BlockChannels& ch,
                          size_t k, size_t payload) {
  const uint32_t peers = peersWithChunk(c, a, a.sendBytes, k, payload);
  if (peers == 0) return true;
  if (!waitSlotsFree(c, channel, peers, ch)) return false;
  for (int i = 1; i < c.nranks; ++i) {
    const int p = sendPeer(c, i);
    if (((peers >> p) & 1) == 0) continue;
    Range piece = blockChunk(a, a.sendBytes[p], k, payload);
    char* slot = sendSlot(c, channel, p, ch, true);
    const uint32_t flag = static_cast<uint32_t>(ch.sent[p] + 1);
    const char* src = a.send[p] + piece.begin;
    const size_t len = piece.size();
    for (size_t w = threadIdx.x; w * 8 < len; w += blockDim.x)
      storePacket(slot, w, loadBytes8(src + w * 8, len - w * 8), flag);
  }
  postSends(c, channel, peers, ch, false);
  return true;
}

__global__ void __launch_bounds__(kThreads) llCopyKernel(DevComm c, ExchangeArgs a) {
  __shared__ BlockChannels ch;
  const int channel = a.channelBase + blockIdx.x;
  openChannels(c, channel, ch);
  selfCopy(a);
  const size_t payload = c.llSlotBytes / 2;
  const size_t iterations = exchangeIterations(c, a, payload);
  for (size_t k = 0; k < iterations; ++k) {
    if (!llSendAll(c, a, channel, ch, k, payload)) return;
    const uint32_t sources = peersWithChunk(c, a, a.recvBytes, k, payload);
    if (sources == 0) continue;
    int stop = 0;
    for (int i = 1; i < c.nranks && !stop; ++i) {
      const int q = recvPeer(c, i);
      if (((sources >> q) & 1) == 0) continue;
      Range piece = blockChunk(a, a.recvBytes[q], k, payload);
      const char* slot = receiveSlot(c, channel, q, ch, true);
      const uint32_t flag = static_cast<uint32_t>(ch.received[q] + 1);
      char* dst = a.recv[q] + piece.begin;
      const size_t len = piece.size();
      for (size_t w = threadIdx.x; w * 8 < len; w += blockDim.x) {
        uint2 data;
        if (!loadPacket(c, slot, w, flag, q, data)) {
          stop = 1;
          break;
        }
        storeBytes8(dst + w * 8, data, len - w * 8);
      }
    }
    if (__syncthreads_or(stop)) return;
    endReceiveAll(c, channel, sources, ch);
  }
  closeChannels(c, channel, ch);
}

template <typename R>
__global__ void __launch_bounds__(kThreads) llReduceKernel(DevComm c, ExchangeArgs a) {
  __shared__ BlockChannels ch;
  const int channel = a.channelBase + blockIdx.x;
  openChannels(c, channel, ch);
  const size_t payload = c.llSlotBytes / 2;
  const size_t iterations = exchangeIterations(c, a, payload);
  const uint32_t sources = receivingPeers(c, a);
  for (size_t k = 0; k < iterations; ++k) {
    if (!llSendAll(c, a, channel, ch, k, payload)) return;
    if (a.reduceBytes == 0) continue;
    Range piece = blockChunk(a, a.reduceBytes, k, payload);
    if (piece.size() == 0) continue;
    const size_t len = piece.size();
    int stop = 0;
    for (size_t w = threadIdx.x; w * 8 < len && !stop; w += blockDim.x) {
      typename R::template Acc<8> acc;
      bool started = false;
      for (int q = 0; q < c.nranks; ++q) {
        uint2 data;
        if (q == c.rank) {
          data = loadBytes8(a.selfSend + piece.begin + w * 8, len - w * 8);
        } else if ((sources >> q) & 1) {
          const char* slot = receiveSlot(c, channel, q, ch, true);
          if (!loadPacket(c, slot, w, static_cast<uint32_t>(ch.received[q] + 1), q, data)) {
            stop = 1;
            break;
          }
        } else {
          continue;
        }
        if (started) {
          R::template next<8>(acc, &data);
        } else {
          R::template first<8>(acc, &data);
          started = true;
        }
      }
      if (stop) break;
      uint2 out;
      R::template finish<8>(&out, acc, a.divisor);
      storeBytes8(a.reduceOut + piece.begin + w * 8, out, len - w * 8);
    }
    if (__syncthreads_or(stop)) return;
    endReceiveAll(c, channel, sources, ch);
  }
  closeChannels(c, channel, ch);
}

}  // namespace

void launchLLCopy(const DevComm& comm, const ExchangeArgs& args, cudaStream_t stream) {
  const int threads = args.threads > 0 ? args.threads : kThreads;
  llCopyKernel<<<args.blocks, threads, 0, stream>>>(comm, args);
  checkLaunch("LL");
}

void launchLLReduce(const DevComm& comm, const ExchangeArgs& args, ReduceKey key,
                    cudaStream_t stream) {
  const int threads = args.threads > 0 ? args.threads : kThreads;
  launchReducing(key, "LL", [&](auto reducer) {
    llReduceKernel<decltype(reducer)><<<args.blocks, threads, 0, stream>>>(comm, args);
  });
}

}  // namespace loom::cuda
