// "hierarchical" allgather and reduce-scatter: whole per-rank blocks, moved by a column ring
// across the nodes and through the node's arena inside one (node_phases.hpp; the picture in
// algorithms/hierarchical_view.hpp). Column l carries the blocks of local index l, then l + G,
// l + 2G, ... (rounds; a node without that index has an empty item in that round). The blocks are
// cut into pipeline chunks; the column ring of one chunk runs beside the arena phase of another
// (AlongsideRun, context.hpp):
//   allgather      = [uneven nodes: node share of every rank's own block] → column ring of the
//                    blocks, straight into the output → node share of what the column brought
//   reducescatter  = node reduce of every column's blocks → column reduce-scatter ring (this
//                    rank's own block straight into the output) → node share of the blocks of
//                    local index >= G to their owners
// The node phases stay on the arena: as channel operations (one schedule) they were 1.2-1.5x
// slower at 2 x 4 ranks, since the node's channels move every byte twice.
#include <algorithm>
#include <vector>

#include "algorithms/context.hpp"
#include "algorithms/families.hpp"
#include "algorithms/hierarchical_view.hpp"
#include "algorithms/node_phases.hpp"
#include "algorithms/partition.hpp"
#include "algorithms/ring_steps.hpp"
#include "base/dtype.hpp"
#include "base/error.hpp"

namespace loom {

namespace {

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

// The blocks column `local` carries (node_phases.hpp's pieces), rounds from `firstRound`, of the
// nodes `which` names; of each block only bytes [lo, hi) (a pipeline chunk; default: all of it).
struct ColumnBlocks {
  enum Nodes { kAll, kOwn, kOthers };
  const HierView& v;
  size_t block;
  Nodes which = kAll;
  int firstRound = 0;
  size_t lo = 0, hi = ~size_t{0};
  template <typename Visit>
  void operator()(int local, Visit&& visit) const {
    if (local >= v.columns()) return;
    const size_t end = std::min(hi, block);
    if (lo >= end) return;
    for (int t = firstRound, rounds = roundsOf(v); t < rounds; ++t)
      for (int m = 0; m < v.nodes(); ++m) {
        if (which != kAll && (which == kOwn) != (m == v.node())) continue;
        const int r = itemRank(v, m, local, t);
        if (r >= 0) visit(r * block + lo, end - lo);
      }
  }
};

size_t blockChunkBytes(const AlgoContext& ctx, const CollArgs& a) {
  return hierarchicalBlockChunkBytes(a.count, ctx.nranks, dtypeSize(a.dtype));
}

// The column ring of bytes [lo, hi) of the blocks, round by round. Allgather: from and into the
// output (every block it sends is there), step st sending node x-st's block. Reduce-scatter: over
// the node's partial sums (bound as the input: every rank's block at its offset), accumulating in
// place, step st sending node x-st-1's, after `ready` (the node reduce of the chunk); this rank's
// own block lands in the output. Returns the last receive (kNoOp: none).
template <bool kReduces>
uint32_t appendColumnBlocks(const AlgoContext& ctx, const CollArgs& a, Schedule& s, size_t lo,
                            size_t hi, const uint32_t& ready) {
  const HierView v{*ctx.hierarchy, ctx.rank};
  const uint64_t block = a.count * dtypeSize(a.dtype), bytes = hi - lo;
  const int l = v.local(), k = v.nodes(), x = v.node(), shift = kReduces ? 1 : 0;
  const BufferRef blocks = kReduces ? s.input() : s.output();
  std::vector<RingStep>& steps = *ctx.ringSteps;
  uint32_t last = kNoOp;
  for (int t = 0, rounds = roundsOf(v); t < rounds; ++t) {
    steps.clear();
    for (int st = 0; st < k - 1; ++st) {
      const int out = itemRank(v, wrapIndex(x - st - shift, k), l, t);
      const int in = itemRank(v, wrapIndex(x - st - shift - 1, k), l, t);
      RingStep step;
      step.send = blocks.at(out < 0 ? 0 : out * block + lo);
      step.sendBytes = out < 0 ? 0 : bytes;
      step.sendAfterPrevRecv = st > 0;
      step.recvDst = blocks.at(in < 0 ? 0 : in * block + lo);
      step.recvBytes = in < 0 ? 0 : bytes;
      step.toOutput = !kReduces;
      if (kReduces) {
        step.reduce = true;
        step.reduceWith = step.recvDst;
        if (st == k - 2) {
          step.divisor = averageDivisor(a.op, ctx.nranks);
          if (t == 0) step.recvDst = s.output(lo), step.toOutput = true;  // this rank's own block
        }
      }
      steps.push_back(step);
    }
    const std::span<const uint32_t> inputReady(&ready, ready == kNoOp ? 0 : 1);
    RingOps ring =
        appendRing(s, v.columnLeft(), v.columnRight(), steps,
                   {a.dtype, kReduces ? kernelOp(a.op) : loomSum, a.accum, 1}, inputReady);
    if (ring.lastRecv != RingOps::kNone) last = ring.lastRecv;
  }
  return last;
}

// Starts a schedule over the call's whole input and output (the column's parts are appended).
Schedule& columnSchedule(const AlgoContext& ctx, const CollArgs& a) {
  Schedule& s = *ctx.schedule;
  s.clear(ctx.nranks);
  const CallExtents extents = callExtents(a, ctx.rank, ctx.nranks);
  s.setExtents(extents.sendBytes, extents.recvBytes);
  return s;
}

// Allgather: [uneven nodes: node share of every rank's own block first] → per chunk of the
// blocks, the column ring into the output while the arena shares what the column brought of the
// chunk before (AlongsideRun).
void allGatherHierarchical(const AlgoContext& ctx, const CollArgs& a) {
  if (hierarchicalOnOneNode(ctx, a) || a.count == 0) return;
  const HierView v{*ctx.hierarchy, ctx.rank};
  LOOM_CHECK_INTERNAL(v.h.node != nullptr, "hierarchical allgather without its node group");
  const AlgoContext& node = *v.h.node;
  const size_t block = a.count * dtypeSize(a.dtype), total = block * ctx.nranks;
  char* recv = static_cast<char*>(a.recv);
  char* mine = recv + ctx.rank * block;
  if (a.send != mine) ctx.device->copy(mine, a.send, block);
  auto land = [&](int, size_t offset, size_t bytes, const char* data) {
    ctx.copyOut(recv + offset, data, bytes, total);
  };
  // Uneven nodes: column l also carries blocks of local index l + G, ... that only its node
  // mates have; the node's own blocks are shared first.
  const bool even = evenNodes(v);
  if (!even) {
    auto own = [&](int local, auto&& visit) { visit(v.mates()[local] * block, block); };
    nodeShare(node, recv, own, land);
  }
  const size_t chunk = blockChunkBytes(ctx, a), chunks = chunkCount(block, chunk);
  Schedule& s = columnSchedule(ctx, a);
  std::vector<uint32_t>& arrived = *ctx.opList;  // per chunk: its last receive
  arrived.clear();
  for (size_t c = 0; c < chunks; ++c)
    arrived.push_back(v.inColumn()
                          ? appendColumnBlocks<false>(ctx, a, s, c * chunk,
                                                      std::min(block, (c + 1) * chunk), kNoOp)
                          : kNoOp);
  s.finish();
  AlongsideRun column(ctx, node, s, recv, recv, besideOnThread(chunks));
  const ColumnBlocks::Nodes which = even ? ColumnBlocks::kAll : ColumnBlocks::kOthers;
  for (size_t c = 0; c < chunks; ++c) {
    column.waitFor(arrived[c]);
    nodeShare(node, recv, ColumnBlocks{v, block, which, 0, c * chunk, (c + 1) * chunk}, land);
  }
  column.finish();
}

// Reduce-scatter: per chunk of the blocks, the node reduce of every column's blocks (the arena)
// while the column reduce-scatter ring carries the chunk before (this rank's own block straight
// into the output) → [uneven nodes: node share of the blocks of local index >= G to their owners].
void reduceScatterHierarchical(const AlgoContext& ctx, const CollArgs& a) {
  if (hierarchicalOnOneNode(ctx, a) || a.count == 0) return;
  const HierView v{*ctx.hierarchy, ctx.rank};
  LOOM_CHECK_INTERNAL(v.h.node != nullptr, "hierarchical reduce-scatter without its node group");
  const AlgoContext& node = *v.h.node;
  const size_t esize = dtypeSize(a.dtype), block = a.count * esize;
  char* recv = static_cast<char*>(a.recv);
  // The node's partial sums of the column's blocks, at their input offsets, in the node group's
  // scratch (the column's schedule may grow the communicator's).
  char* partial = node.scratchBytes(block * ctx.nranks);
  const size_t chunk = blockChunkBytes(ctx, a), chunks = chunkCount(block, chunk);
  Schedule& s = columnSchedule(ctx, a);
  std::vector<uint32_t>& gates = *ctx.opList;
  gates.clear();
  for (size_t c = 0; c < chunks; ++c) {
    gates.push_back(s.gate());
    if (v.inColumn())
      appendColumnBlocks<true>(ctx, a, s, c * chunk, std::min(block, (c + 1) * chunk), gates[c]);
  }
  s.finish();
  {
    AlongsideRun column(ctx, node, s, partial, recv, besideOnThread(chunks));
    for (size_t c = 0; c < chunks; ++c) {
      nodeReduce(node, static_cast<const char*>(a.send), partial,
                 ColumnBlocks{v, block, ColumnBlocks::kAll, 0, c * chunk, (c + 1) * chunk},
                 NodeReduction{a.dtype, esize, kernelOp(a.op), a.accum});
      column.open(gates[c]);
    }
    column.finish();
  }
  // Blocks of local index >= G ended on their column's rank of this node: hand them over.
  const size_t mine = ctx.rank * block;
  nodeShare(node, partial, ColumnBlocks{v, block, ColumnBlocks::kOwn, 1},
            [&](int, size_t offset, size_t bytes, const char* data) {
              if (offset >= mine && offset < mine + block)
                ctx.copyOut(recv + (offset - mine), data, bytes, block);
            });
}

}  // namespace

void registerHierarchicalBlockAlgorithms(std::vector<Algorithm>& out) {
  out.push_back({loomFuncAllGather, "hierarchical", allGatherHierarchical, false});
  out.push_back({loomFuncReduceScatter, "hierarchical", reduceScatterHierarchical, false});
}

}  // namespace loom
