// "ring": bandwidth-optimal collectives over pair channels, so they run on any transport, built as
// schedules (algorithms/ring_steps.hpp) for the executor.
// allreduce = reduce-scatter ring (N-1 steps, each rank reduces the segment arriving from the left
// into its result) then all-gather ring (N-1 steps forwarding finished segments). allgather and
// reduce-scatter are the two halves on their own; broadcast and reduce a chain along the ring.
#include <vector>

#include "algorithms/context.hpp"
#include "algorithms/families.hpp"
#include "algorithms/partition.hpp"
#include "algorithms/ring_steps.hpp"
#include "base/dtype.hpp"

namespace loom {

namespace {

Reduction reductionOf(const CollArgs& a) { return {a.dtype, kernelOp(a.op), a.accum, 1}; }

int leftOf(const AlgoContext& ctx) { return wrapIndex(ctx.rank - 1, ctx.nranks); }
int rightOf(const AlgoContext& ctx) { return wrapIndex(ctx.rank + 1, ctx.nranks); }

// A one-rank reduction: the input, reduced alone (so that the output has the reduction's
// rounding, as with more ranks).
void reduceAlone(Schedule& s, uint64_t bytes, const CollArgs& a) {
  const BufferRef in = s.input();
  s.reduce(s.output(), &in, 1, bytes, {a.dtype, loomSum, a.accum, 1}, true);
}

std::vector<RingStep>& stepList(const AlgoContext& ctx) {
  ctx.ringSteps->clear();
  return *ctx.ringSteps;
}

void buildAllReduceRing(const AlgoContext& ctx, const CollArgs& a, Schedule& s) {
  const size_t esize = dtypeSize(a.dtype);
  const int n = ctx.nranks, r = ctx.rank;
  if (n == 1) return reduceAlone(s, a.count * esize, a);
  std::vector<RingStep>& steps = *ctx.ringSteps;
  allReduceSteps(steps, r, n, a.count, esize, s.input(), s.output(), averageDivisor(a.op, n));
  appendRing(s, leftOf(ctx), rightOf(ctx), steps, reductionOf(a));
}

void buildAllGatherRing(const AlgoContext& ctx, const CollArgs& a, Schedule& s) {
  const uint64_t block = a.count * dtypeSize(a.dtype);
  const int n = ctx.nranks, r = ctx.rank;
  s.copy(s.output(r * block), s.input(), block, true);
  std::vector<RingStep>& steps = stepList(ctx);
  for (int k = 0; k < n - 1; ++k) {
    RingStep st;
    // The first step sends this rank's own block from the input: no wait for the copy above.
    st.send = k == 0 ? s.input() : s.output(wrapIndex(r - k, n) * block);
    st.sendBytes = block;
    st.sendAfterPrevRecv = k > 0;
    st.recvDst = s.output(wrapIndex(r - k - 1, n) * block);
    st.recvBytes = block;
    st.toOutput = true;
    steps.push_back(st);
  }
  appendRing(s, leftOf(ctx), rightOf(ctx), steps, reductionOf(a));
}

void buildReduceScatterRing(const AlgoContext& ctx, const CollArgs& a, Schedule& s) {
  const uint64_t block = a.count * dtypeSize(a.dtype);
  const int n = ctx.nranks, r = ctx.rank;
  if (n == 1) return reduceAlone(s, block, a);
  // Partial sums travel through scratch (indexed by block) so the send buffer stays untouched.
  const uint16_t partial = s.addScratch("partial", block * n);
  std::vector<RingStep>& steps = stepList(ctx);
  for (int k = 0; k < n - 1; ++k) {
    const int out = wrapIndex(r - k - 1, n), in = wrapIndex(r - k - 2, n);
    const bool last = k == n - 2;
    RingStep st;
    st.send = (k == 0 ? s.input() : s.scratch(partial)).at(out * block);
    st.sendBytes = block;
    st.sendAfterPrevRecv = k > 0;
    st.recvDst = last ? s.output() : s.scratch(partial, in * block);
    st.recvBytes = block;
    st.reduce = true;
    st.reduceWith = s.input(in * block);
    st.divisor = last ? averageDivisor(a.op, n) : 1;
    st.toOutput = last;
    steps.push_back(st);
  }
  appendRing(s, leftOf(ctx), rightOf(ctx), steps, reductionOf(a));
}

// Distance of this rank from `root` going right around the ring.
int distanceFrom(int rank, int root, int n) { return wrapIndex(rank - root, n); }

void buildBroadcastRing(const AlgoContext& ctx, const CollArgs& a, Schedule& s) {
  const uint64_t bytes = a.count * dtypeSize(a.dtype);
  const int n = ctx.nranks;
  const int d = distanceFrom(ctx.rank, a.root, n);
  if (d == 0 && a.send != a.recv) s.copy(s.output(), s.input(), bytes, true);
  if (n == 1) return;
  std::vector<RingStep>& steps = stepList(ctx);
  if (d > 0) {  // receive from the left
    RingStep st;
    st.recvDst = s.output();
    st.recvBytes = bytes;
    st.toOutput = true;
    steps.push_back(st);
  }
  if (d < n - 1) {  // forward to the right, as it arrives (the root: from its input)
    RingStep st;
    st.send = d == 0 ? s.input() : s.output();
    st.sendBytes = bytes;
    st.sendAfterPrevRecv = d > 0;
    steps.push_back(st);
  }
  appendRing(s, leftOf(ctx), rightOf(ctx), steps, reductionOf(a));
}

void buildReduceRing(const AlgoContext& ctx, const CollArgs& a, Schedule& s) {
  const uint64_t bytes = a.count * dtypeSize(a.dtype);
  const int n = ctx.nranks;
  if (n == 1) return reduceAlone(s, bytes, a);
  // The chain starts right of the root and ends at it: distance 1 sends its input, each next
  // rank adds its own and passes the partial sum on, the root adds the last input.
  const int d = distanceFrom(ctx.rank, a.root, n);
  std::vector<RingStep>& steps = stepList(ctx);
  if (d == 1) {
    RingStep st;
    st.send = s.input();
    st.sendBytes = bytes;
    steps.push_back(st);
  } else {
    const BufferRef partial = d == 0 ? s.output() : s.scratch(s.addScratch("partial", bytes));
    RingStep in;
    in.recvDst = partial;
    in.recvBytes = bytes;
    in.reduce = true;
    in.reduceWith = s.input();
    in.divisor = d == 0 ? averageDivisor(a.op, n) : 1;
    in.toOutput = d == 0;
    steps.push_back(in);
    if (d != 0) {
      RingStep out;
      out.send = partial;
      out.sendBytes = bytes;
      out.sendAfterPrevRecv = true;
      steps.push_back(out);
    }
  }
  appendRing(s, leftOf(ctx), rightOf(ctx), steps, reductionOf(a));
}

Algorithm built(loomFunc_t func, ScheduleFn build) {
  Algorithm algo{func, "ring", nullptr, false};
  algo.build = build;
  return algo;
}

}  // namespace

void registerRingAlgorithms(std::vector<Algorithm>& out) {
  out.push_back(built(loomFuncAllReduce, buildAllReduceRing));
  out.push_back(built(loomFuncAllGather, buildAllGatherRing));
  out.push_back(built(loomFuncReduceScatter, buildReduceScatterRing));
  out.push_back(built(loomFuncBroadcast, buildBroadcastRing));
  out.push_back(built(loomFuncReduce, buildReduceRing));
}

}  // namespace loom
