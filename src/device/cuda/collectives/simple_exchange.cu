// Simple (bulk) exchange: the large-message protocol of every GPU collective but allreduce.
//
// Steps, per block b (block b of every rank works on the same slice of every transfer) and per
// chunk of at most slotBytes:
//   1. send: for each peer p (rank+1, rank+2, ...): wait until p acknowledged the chunk that last
//      used the slot (seq-2); every thread writes 16-byte vectors of the chunk into p's window;
//      barrier; thread 0 fences (system scope) and stores seq into p's ready flag.
//   2. receive: thread 0 waits for the source's ready flag; every thread copies the slot to the
//      destination (copy), or reads the same vector of every rank in rank order and reduces it.
//   3. acknowledge (thread 0, after a barrier), which frees the slot for the chunk after next.
// Double-buffered slots let chunk k+1 travel while chunk k is consumed.
#include "base/error.hpp"
#include "device/cuda/collectives/exchange_common.cuh"
#include "device/cuda/collectives/reduce_ops.cuh"

namespace loom::cuda {

namespace {

__device__ bool simpleSendAll(const DevComm& c, const ExchangeArgs& a, int channel,
                              BlockChannels& ch, size_t k, size_t payload) {
  for (int i = 1; i < c.nranks; ++i) {
    const int p = sendPeer(c, i);
    if (a.sendBytes[p] == 0) continue;
    Range piece = blockChunk(a, a.sendBytes[p], k, payload);
    if (piece.size() == 0) continue;
    char* slot = beginSend(c, channel, p, ch, false);
    if (slot == nullptr) return false;
    blockCopy<false>(slot, a.send[p] + piece.begin, piece.size());
    endSend(c, channel, p, ch, true);
  }
  return true;
}

__global__ void __launch_bounds__(kThreads) simpleCopyKernel(DevComm c, ExchangeArgs a) {
  __shared__ BlockChannels ch;
  const int channel = a.channelBase + blockIdx.x;
  if (!openChannels(c, channel, ch)) return;
  selfCopy(a);
  const size_t payload = c.slotBytes;
  const size_t iterations = exchangeIterations(c, a, payload);
  for (size_t k = 0; k < iterations; ++k) {
    if (!simpleSendAll(c, a, channel, ch, k, payload)) return;
    for (int i = 1; i < c.nranks; ++i) {
      const int q = recvPeer(c, i);
      if (a.recvBytes[q] == 0) continue;
      Range piece = blockChunk(a, a.recvBytes[q], k, payload);
      if (piece.size() == 0) continue;
      const char* slot = beginReceive(c, channel, q, ch, true);
      if (slot == nullptr) return;
      blockCopy<true>(a.recv[q] + piece.begin, slot, piece.size());
      endReceive(c, channel, q, ch);
    }
  }
  closeChannels(c, channel, ch);
}

// Reduces the chunk `piece` of every rank in rank order: this rank's from selfSend, the others'
// from their slots (ready already). Every thread takes 16-byte vectors.
template <typename R>
__device__ void reduceFromSlots(const DevComm& c, const ExchangeArgs& a, int channel,
                                const BlockChannels& ch, uint32_t sources, Range piece) {
  const size_t len = piece.size();
  for (size_t off = static_cast<size_t>(threadIdx.x) * 16; off < len;
       off += static_cast<size_t>(blockDim.x) * 16) {
    const size_t n = len - off < 16 ? len - off : 16;
    typename R::template Acc<16> acc;
    bool started = false;
    for (int q = 0; q < c.nranks; ++q) {
      uint4 v;
      if (q == c.rank) {
        v = loadBytes16(a.selfSend + piece.begin + off, n);
      } else if ((sources >> q) & 1) {
        v = loadVolatile16(c.slots[c.rank] + slotOffset(c, channel, q, ch.received[q] + 1) + off);
      } else {
        continue;
      }
      if (started) {
        R::template next<16>(acc, &v);
      } else {
        R::template first<16>(acc, &v);
        started = true;
      }
    }
    uint4 out;
    R::template finish<16>(&out, acc, a.divisor);
    storeBytes16(a.reduceOut + piece.begin + off, out, n);
  }
}

template <typename R>
__global__ void __launch_bounds__(kThreads) simpleReduceKernel(DevComm c, ExchangeArgs a) {
  __shared__ BlockChannels ch;
  const int channel = a.channelBase + blockIdx.x;
  if (!openChannels(c, channel, ch)) return;
  const size_t payload = c.slotBytes;
  const size_t iterations = exchangeIterations(c, a, payload);
  const uint32_t sources = receivingPeers(c, a);
  for (size_t k = 0; k < iterations; ++k) {
    if (!simpleSendAll(c, a, channel, ch, k, payload)) return;
    if (a.reduceBytes == 0) continue;
    Range piece = blockChunk(a, a.reduceBytes, k, payload);
    if (piece.size() == 0) continue;
    if (!waitReadyAll(c, channel, sources, ch)) return;
    reduceFromSlots<R>(c, a, channel, ch, sources, piece);
    endReceiveAll(c, channel, sources, ch);
  }
  closeChannels(c, channel, ch);
}

void checkLaunch(const char* what) {
  cudaError_t err = cudaGetLastError();
  if (err != cudaSuccess)
    LOOM_THROW(loomUnhandledCudaError, "launching the ", what,
               " kernel: ", cudaGetErrorString(err));
}

}  // namespace

void launchSimpleCopy(const DevComm& comm, const ExchangeArgs& args, cudaStream_t stream) {
  simpleCopyKernel<<<args.blocks, kThreads, 0, stream>>>(comm, args);
  checkLaunch("simple copy");
}

void launchSimpleReduce(const DevComm& comm, const ExchangeArgs& args, ReduceKey key,
                        cudaStream_t stream) {
  bool found = withReducer(key.dtype, key.op, static_cast<Accum>(key.accum), [&](auto reducer) {
    simpleReduceKernel<decltype(reducer)><<<args.blocks, kThreads, 0, stream>>>(comm, args);
  });
  if (!found)
    LOOM_THROW(loomInvalidArgument, "no GPU reduction for this type, op and accumulation");
  checkLaunch("simple reduce");
}

}  // namespace loom::cuda
