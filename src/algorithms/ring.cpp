// "ring": bandwidth-optimal collectives over pair channels, so they run on any transport.
// allreduce = reduce-scatter ring (N-1 steps, each rank reduces the segment arriving from the left
// into its result) then all-gather ring (N-1 steps forwarding finished segments). allgather and
// reduce-scatter are the two halves on their own. Steps stream through runRing (ring_engine.hpp).
#include <vector>

#include "algorithms/context.hpp"
#include "algorithms/families.hpp"
#include "algorithms/partition.hpp"
#include "algorithms/ring_engine.hpp"
#include "base/dtype.hpp"

namespace loom {

namespace {

int wrap(int index, int n) { return ((index % n) + n) % n; }

RingReduction reductionOf(const CollArgs& a) { return {a.dtype, kernelOp(a.op), a.accum}; }

void allReduceRing(const AlgoContext& ctx, const CollArgs& a) {
  size_t esize = dtypeSize(a.dtype);
  const int n = ctx.nranks, r = ctx.rank;
  const char* send = static_cast<const char*>(a.send);
  char* recv = static_cast<char*>(a.recv);
  if (n == 1) {
    const void* srcs[1] = {send};
    ctx.device->reduce(recv, srcs, 1, a.count, a.dtype, loomSum, a.accum, 1);
    return;
  }
  auto seg = [&](int i) { return sliceOf(a.count, n, wrap(i, n)); };
  std::vector<RingStep>& steps = *ctx.ringSteps;
  steps.clear();
  for (int k = 0; k < n - 1; ++k) {  // reduce-scatter
    Range out = seg(r - k), in = seg(r - k - 1);
    RingStep s;
    s.send = (k == 0 ? send : recv) + out.offset * esize;
    s.sendBytes = out.count * esize;
    s.sendAfterPrevRecv = k > 0;
    s.recvDst = recv + in.offset * esize;
    s.recvBytes = in.count * esize;
    s.reduceWith = send + in.offset * esize;
    s.divisor = k == n - 2 ? averageDivisor(a.op, n) : 1;
    steps.push_back(s);
  }
  for (int k = 0; k < n - 1; ++k) {  // all-gather
    Range out = seg(r + 1 - k), in = seg(r - k);
    RingStep s;
    s.send = recv + out.offset * esize;
    s.sendBytes = out.count * esize;
    s.sendAfterPrevRecv = true;
    s.recvDst = recv + in.offset * esize;
    s.recvBytes = in.count * esize;
    steps.push_back(s);
  }
  runRing(ctx, steps, reductionOf(a));
}

void allGatherRing(const AlgoContext& ctx, const CollArgs& a) {
  size_t block = a.count * dtypeSize(a.dtype);
  const int n = ctx.nranks, r = ctx.rank;
  char* recv = static_cast<char*>(a.recv);
  ctx.device->copy(recv + r * block, a.send, block);
  std::vector<RingStep>& steps = *ctx.ringSteps;
  steps.clear();
  for (int k = 0; k < n - 1; ++k) {
    RingStep s;
    s.send = recv + wrap(r - k, n) * block;
    s.sendBytes = block;
    s.sendAfterPrevRecv = k > 0;
    s.recvDst = recv + wrap(r - k - 1, n) * block;
    s.recvBytes = block;
    steps.push_back(s);
  }
  runRing(ctx, steps, reductionOf(a));
}

void reduceScatterRing(const AlgoContext& ctx, const CollArgs& a) {
  size_t block = a.count * dtypeSize(a.dtype);
  const int n = ctx.nranks, r = ctx.rank;
  const char* send = static_cast<const char*>(a.send);
  if (n == 1) {
    const void* srcs[1] = {send};
    ctx.device->reduce(a.recv, srcs, 1, a.count, a.dtype, loomSum, a.accum, 1);
    return;
  }
  // Partial sums travel through scratch (indexed by block) so the send buffer stays untouched.
  char* scratch = ctx.scratchBytes(block * n);
  std::vector<RingStep>& steps = *ctx.ringSteps;
  steps.clear();
  for (int k = 0; k < n - 1; ++k) {
    int out = wrap(r - k - 1, n), in = wrap(r - k - 2, n);
    bool last = k == n - 2;
    RingStep s;
    s.send = (k == 0 ? send : scratch) + out * block;
    s.sendBytes = block;
    s.sendAfterPrevRecv = k > 0;
    s.recvDst = last ? static_cast<char*>(a.recv) : scratch + in * block;
    s.recvBytes = block;
    s.reduceWith = send + in * block;
    s.divisor = last ? averageDivisor(a.op, n) : 1;
    steps.push_back(s);
  }
  runRing(ctx, steps, reductionOf(a));
}

// Distance of this rank from `root` going right around the ring.
int distanceFrom(int rank, int root, int n) { return wrap(rank - root, n); }

void broadcastRing(const AlgoContext& ctx, const CollArgs& a) {
  size_t bytes = a.count * dtypeSize(a.dtype);
  const int n = ctx.nranks;
  char* recv = static_cast<char*>(a.recv);
  int d = distanceFrom(ctx.rank, a.root, n);
  if (d == 0 && a.send != a.recv) ctx.device->copy(recv, a.send, bytes);
  if (n == 1) return;
  std::vector<RingStep>& steps = *ctx.ringSteps;
  steps.clear();
  if (d > 0) {  // receive from the left
    RingStep s;
    s.recvDst = recv;
    s.recvBytes = bytes;
    steps.push_back(s);
  }
  if (d < n - 1) {  // forward to the right, as it arrives
    RingStep s;
    s.send = recv;
    s.sendBytes = bytes;
    s.sendAfterPrevRecv = d > 0;
    steps.push_back(s);
  }
  runRing(ctx, steps, reductionOf(a));
}

void reduceRing(const AlgoContext& ctx, const CollArgs& a) {
  size_t bytes = a.count * dtypeSize(a.dtype);
  const int n = ctx.nranks;
  const char* send = static_cast<const char*>(a.send);
  if (n == 1) {
    const void* srcs[1] = {send};
    ctx.device->reduce(a.recv, srcs, 1, a.count, a.dtype, loomSum, a.accum, 1);
    return;
  }
  // The chain starts right of the root and ends at it: distance 1 sends its input, each next
  // rank adds its own and passes the partial sum on, the root adds the last input.
  int d = distanceFrom(ctx.rank, a.root, n);
  std::vector<RingStep>& steps = *ctx.ringSteps;
  steps.clear();
  if (d == 1) {
    RingStep s;
    s.send = send;
    s.sendBytes = bytes;
    steps.push_back(s);
  } else {
    char* partial = d == 0 ? static_cast<char*>(a.recv) : ctx.scratchBytes(bytes);
    RingStep in;
    in.recvDst = partial;
    in.recvBytes = bytes;
    in.reduceWith = send;
    in.divisor = d == 0 ? averageDivisor(a.op, n) : 1;
    steps.push_back(in);
    if (d != 0) {
      RingStep out;
      out.send = partial;
      out.sendBytes = bytes;
      out.sendAfterPrevRecv = true;
      steps.push_back(out);
    }
  }
  runRing(ctx, steps, reductionOf(a));
}

}  // namespace

void registerRingAlgorithms(std::vector<Algorithm>& out) {
  out.push_back({loomFuncAllReduce, "ring", allReduceRing, false});
  out.push_back({loomFuncAllGather, "ring", allGatherRing, false});
  out.push_back({loomFuncReduceScatter, "ring", reduceScatterRing, false});
  out.push_back({loomFuncBroadcast, "ring", broadcastRing, false});
  out.push_back({loomFuncReduce, "ring", reduceRing, false});
}

}  // namespace loom
