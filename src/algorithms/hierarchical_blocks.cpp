// "hierarchical" allgather and reduce-scatter: whole per-rank blocks, moved by a column ring
// across the nodes and by the node's shared-memory channels inside one (the picture in
// algorithms/hierarchical_view.hpp). Column l carries the blocks of local index l, then l + G,
// l + 2G, ... (rounds; a node without that index has an empty item in that round).
//   allgather      = [uneven nodes: every rank sends its block to its node mates] → column ring
//                    of the blocks, straight into the output → each block the column brought
//                    sent on to the node mates as it arrives (streaming behind the ring)
//   reducescatter  = node reduce of the column's blocks, in the order the ring needs them →
//                    column reduce-scatter ring (this rank's own block straight into the output)
//                    → blocks of local index >= G handed to their owners
// Every block's node phase overlaps the column ring's next step.
#include <algorithm>
#include <vector>

#include "algorithms/context.hpp"
#include "algorithms/families.hpp"
#include "algorithms/hierarchical_view.hpp"
#include "algorithms/ring_steps.hpp"
#include "base/dtype.hpp"

namespace loom {

namespace {

int wrap(int index, int n) { return ((index % n) + n) % n; }

int roundsOf(const HierView& v) {
  size_t largest = 0;
  for (const auto& m : v.h.members) largest = std::max(largest, m.size());
  return static_cast<int>((largest + v.columns() - 1) / v.columns());
}

// The global rank whose block column `local` carries for `node` in `round`; -1 if none.
int itemRank(const HierView& v, int node, int local, int round) {
  const size_t j = static_cast<size_t>(local + round * v.columns());
  return j < v.h.members[node].size() ? v.h.members[node][j] : -1;
}

bool evenNodes(const HierView& v) {
  for (const auto& m : v.h.members)
    if (static_cast<int>(m.size()) != v.columns()) return false;
  return true;
}

void buildAllGatherHierarchical(const AlgoContext& ctx, const CollArgs& a, Schedule& s) {
  const HierView v{*ctx.hierarchy, ctx.rank};
  const uint64_t block = a.count * dtypeSize(a.dtype);
  const int n = v.mateCount(), l = v.local(), G = v.columns(), k = v.nodes();
  const int me = ctx.rank, x = v.node(), rounds = roundsOf(v);
  const bool even = evenNodes(v);
  s.copy(s.output(me * block), s.input(), block, true);
  // Uneven nodes: a column also carries blocks of its node mates of local index >= G; every rank
  // sends its own block to its mates first. Even nodes: the column shares its own block below.
  std::vector<uint32_t>& fromMate = *ctx.opList;
  fromMate.assign(n, kNoOp);
  if (!even) {
    for (int i = 0; i < n; ++i) {
      if (i == l) continue;
      s.send(v.mates()[i], s.input(), block);
      fromMate[i] = s.recv(v.mates()[i], s.output(v.mates()[i] * block), block, true);
    }
  }
  if (v.inColumn()) {
    if (even)
      for (int i = 0; i < n; ++i)
        if (i != l) s.send(v.mates()[i], s.input(), block);
    std::vector<RingStep>& steps = *ctx.ringSteps;
    for (int t = 0; t < rounds; ++t) {
      steps.clear();
      for (int st = 0; st < k - 1; ++st) {
        const int out = itemRank(v, wrap(x - st, k), l, t);
        const int in = itemRank(v, wrap(x - st - 1, k), l, t);
        RingStep step;
        step.send = st == 0 && out == me ? s.input() : s.output(out < 0 ? 0 : out * block);
        step.sendBytes = out < 0 ? 0 : block;
        step.sendAfterPrevRecv = st > 0;
        if (st == 0 && out >= 0 && out != me) step.sendReady = fromMate[v.h.localIndex[out]];
        step.recvDst = s.output(in < 0 ? 0 : in * block);
        step.recvBytes = in < 0 ? 0 : block;
        step.toOutput = true;
        steps.push_back(step);
      }
      const uint32_t first = static_cast<uint32_t>(s.ops().size());
      appendRing(s, v.columnLeft(), v.columnRight(), steps, {a.dtype, loomSum, a.accum, 1});
      // Each block the column brought goes on to the node mates as it arrives.
      for (uint32_t op = first; op < s.ops().size(); ++op) {
        const ScheduleOp& recv = s.ops()[op];
        if (recv.kind != OpKind::kRecv || recv.bytes == 0) continue;
        const BufferRef what = recv.dst;
        for (int i = 0; i < n; ++i)
          if (i != l) s.streamAfter(s.send(v.mates()[i], what, block), op);
      }
    }
  }
  // What the other columns bring (own blocks first on even nodes, then ring arrival order).
  for (int j = 0; j < G; ++j) {
    if (j == l) continue;
    const int owner = v.mates()[j];
    if (even) s.recv(owner, s.output(owner * block), block, true);
    for (int t = 0; t < rounds; ++t)
      for (int st = 0; st < k - 1; ++st) {
        const int in = itemRank(v, wrap(x - st - 1, k), j, t);
        if (in >= 0) s.recv(owner, s.output(in * block), block, true);
      }
  }
}

void buildReduceScatterHierarchical(const AlgoContext& ctx, const CollArgs& a, Schedule& s) {
  const HierView v{*ctx.hierarchy, ctx.rank};
  const size_t esize = dtypeSize(a.dtype);
  const uint64_t block = a.count * esize;
  const int n = v.mateCount(), l = v.local(), G = v.columns(), k = v.nodes();
  const int x = v.node(), rounds = roundsOf(v);
  const Reduction sum{a.dtype, kernelOp(a.op), a.accum, 1};
  // The node's partial sums of the column's blocks, at their input offsets; the ring then
  // accumulates in place. Pieces of two blocks in flight alternate.
  const BufferRef partial = s.scratch(s.addScratch("partial", block * ctx.nranks));
  const BufferRef pieces = s.scratch(s.addScratch("pieces", 2 * n * block));
  // Node reduce of every column's blocks in the order its ring needs them: round by round, the
  // node left of this one first, this node's own last.
  std::vector<uint32_t>& reduced = *ctx.opList;
  reduced.assign(ctx.nranks, kNoOp);
  uint32_t free[2] = {kNoOp, kNoOp};
  int item = 0;
  for (int t = 0; t < rounds; ++t)
    for (int back = 1; back <= k; ++back) {
      const int node = wrap(x - back, k);
      // Every owner's block of this (round, node) step; each owner reduces its own.
      auto range = [&](int j) {
        const int r = itemRank(v, node, j, t);
        return std::make_pair(r < 0 ? uint64_t{0} : r * block, r < 0 ? uint64_t{0} : block);
      };
      const uint32_t op =
          appendNodeReduce(s, v, ctx, range, s.input(), partial, pieces.at((item % 2) * n * block),
                           block, free[item % 2], sum, false);
      free[item % 2] = op;
      ++item;
      const int mine = itemRank(v, node, l, t);
      if (op != kNoOp && mine >= 0) reduced[mine] = op;
    }
  if (v.inColumn()) {
    std::vector<RingStep>& steps = *ctx.ringSteps;
    for (int t = 0; t < rounds; ++t) {
      steps.clear();
      for (int st = 0; st < k - 1; ++st) {
        const int out = itemRank(v, wrap(x - st - 1, k), l, t);
        const int in = itemRank(v, wrap(x - st - 2, k), l, t);
        const bool last = st == k - 2;
        RingStep step;
        step.send = partial.at(out < 0 ? 0 : out * block);
        step.sendBytes = out < 0 ? 0 : block;
        step.sendAfterPrevRecv = st > 0;
        if (st == 0 && out >= 0) step.sendReady = reduced[out];
        step.recvDst = partial.at(in < 0 ? 0 : in * block);
        step.recvBytes = in < 0 ? 0 : block;
        step.reduce = true;
        step.reduceWith = step.recvDst;
        if (in >= 0) step.reduceReady = reduced[in];
        if (last) {
          step.divisor = averageDivisor(a.op, ctx.nranks);
          if (t == 0) step.recvDst = s.output(), step.toOutput = true;  // this rank's own block
        }
        steps.push_back(step);
      }
      RingOps ring = appendRing(s, v.columnLeft(), v.columnRight(), steps, sum);
      // Blocks of local index >= G ended here: hand them to their owners.
      const int owner = itemRank(v, x, l, t);
      if (t > 0 && owner >= 0)
        s.after(s.send(owner, partial.at(owner * block), block), ring.lastRecv);
    }
    if (k == 1)
      s.after(s.copy(s.output(), partial.at(ctx.rank * block), block, true), reduced[ctx.rank]);
  } else {
    s.recv(v.mates()[l % G], s.output(), block, true);
  }
}

}  // namespace

void registerHierarchicalBlockAlgorithms(std::vector<Algorithm>& out) {
  out.push_back(hierarchicalAlgorithm<buildAllGatherHierarchical>(loomFuncAllGather));
  out.push_back(hierarchicalAlgorithm<buildReduceScatterHierarchical>(loomFuncReduceScatter));
}

}  // namespace loom
