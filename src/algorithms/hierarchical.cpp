// "hierarchical": collectives of ranks on several nodes as intra-node phases around an
// inter-node phase over the channels of a column, the ranks with one local index, one per node
// (algorithms/hierarchical_view.hpp). Only this rank's column crosses the network, so each byte
// crosses it once per node, not once per rank.
//
// Slices: allreduce, reduce and broadcast cut the buffer (reduce: each pipeline chunk) into G
// slices, G = the smallest node's size; local index l < G owns slice l on every node, so every
// column has one rank per node even on uneven nodes (3 + 2: the third rank of the larger node only
// joins the node phases).
//   allreduce  = node reduce of slice l → column ring allreduce of slice l → node share; the node
//                phases on the node's arena (node_phases.hpp), chunks pipelined: the column
//                carries chunk t while the arena reduces chunk t+1 and shares chunk t-1
//   reduce     = node reduce of slice l → column chain reduce to the root's node → the owners
//                hand their slices to the root; the node phases on the node's arena as
//                allreduce's, chunks pipelined (the column carries chunk t while the arena reduces
//                chunk t+1 and hands over chunk t-1)
//   broadcast  = the root sends its buffer, slice by slice, to its node mates → column ring
//                broadcast of slice l from the root's node → node share on the other nodes; one
//                schedule that streams at every hop
// Allgather and reduce-scatter: hierarchical_blocks.cpp; alltoall: hierarchical_alltoall.cpp.
// One node: the communicator's own arena algorithm (the selector normally resolves that first).
#include <algorithm>
#include <utility>
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

bool hierarchicalOnOneNode(const AlgoContext& ctx, const CollArgs& a) {
  if (ctx.hierarchy != nullptr) return false;
  LOOM_CHECK_ARG(ctx.arena != nullptr, "hierarchical ", funcName(a.func),
                 " needs either one node or the node groups of a CPU communicator");
  const Algorithm* direct = findAlgorithm(a.func, "direct");
  LOOM_CHECK_INTERNAL(direct != nullptr, "no direct ", funcName(a.func));
  runAlgorithm(*direct, ctx, a);
  return true;
}

namespace {

Reduction sumOf(const CollArgs& a) { return {a.dtype, kernelOp(a.op), a.accum, 1}; }

std::span<const uint32_t> justOne(const uint32_t& op) {
  return std::span<const uint32_t>(&op, op == kNoOp ? 0 : 1);
}

// The column ring allreduce of one slice, in place in `region` (ring.cpp's steps).
RingOps appendColumnAllReduce(Schedule& s, const HierView& v, const AlgoContext& ctx,
                              BufferRef region, uint64_t count, size_t esize, const CollArgs& a,
                              const uint32_t& ready) {
  // The sum over every rank of every node is complete at the reduce-scatter's end: average
  // divides once, by all.
  std::vector<RingStep>& steps = *ctx.ringSteps;
  allReduceSteps(steps, v.node(), v.nodes(), count, esize, region, region,
                 averageDivisor(a.op, ctx.nranks));
  return appendRing(s, v.columnLeft(), v.columnRight(), steps, sumOf(a), justOne(ready));
}

// The column chain reduce of one slice towards `rootNode`, in place in `region` (ring.cpp's
// reduce): the node right of the root's starts, each next one adds its own, the root's ends.
RingOps appendColumnReduce(Schedule& s, const HierView& v, const AlgoContext& ctx, BufferRef region,
                           uint64_t bytes, int rootNode, const CollArgs& a, const uint32_t& ready) {
  const int d = wrapIndex(v.node() - rootNode, v.nodes());
  std::vector<RingStep>& steps = *ctx.ringSteps;
  steps.clear();
  RingStep first;
  if (d == 1) {
    first.send = region;
    first.sendBytes = bytes;
    steps.push_back(first);
  } else {
    first.recvDst = region;
    first.recvBytes = bytes;
    first.reduce = true;
    first.reduceWith = region;
    first.divisor = d == 0 ? averageDivisor(a.op, ctx.nranks) : 1;
    steps.push_back(first);
    if (d != 0) {
      RingStep out;
      out.send = region;
      out.sendBytes = bytes;
      out.sendAfterPrevRecv = true;
      steps.push_back(out);
    }
  }
  return appendRing(s, v.columnLeft(), v.columnRight(), steps, sumOf(a), justOne(ready));
}

// Slice l of a pipeline chunk for local index l < G; the rest own nothing (node_phases.hpp's
// pieces).
struct NodeSlices {
  size_t chunkOffset, chunkCount, esize;
  int columns;
  template <typename Visit>
  void operator()(int local, Visit&& visit) const {
    if (local >= columns) return;
    Range r = sliceOf(chunkCount, columns, local);
    if (r.count > 0) visit((chunkOffset + r.offset) * esize, r.count * esize);
  }
};

// The column's part of a call in pipeline chunks: per chunk a gate (opened once the node reduce
// of the chunk is done) and behind it `append(offset, count, gate)` for this rank's slice of the
// chunk (in elements), which returns the operation after which the slice is final on this rank
// (kNoOp: none). `marks` gets, per chunk, its gate and that operation (the gate where none, or
// where this rank has no slice).
template <typename Append>
void buildColumnChunks(const AlgoContext& ctx, const CollArgs& a, size_t chunk, Schedule& s,
                       std::vector<uint32_t>& marks, Append&& append) {
  const HierView v{*ctx.hierarchy, ctx.rank};
  marks.clear();
  for (size_t t = 0, chunks = chunkCount(a.count, chunk); t < chunks; ++t) {
    const Range c = chunkOf(a.count, chunk, t);
    const uint32_t gate = s.gate();
    uint32_t final = kNoOp;
    const Range mine = sliceOf(c.count, v.columns(), v.local());
    if (v.inColumn() && mine.count > 0) final = append(c.offset + mine.offset, mine.count, gate);
    marks.push_back(gate);
    marks.push_back(final != kNoOp ? final : gate);
  }
}

// Allreduce as a pipeline of chunks: the node reduce of chunk t on the node's arena (every slice
// on its owner) while the column ring carries chunk t-1, then the node share of chunk t-1 (the
// arena) while the ring carries chunk t. The ring moves on a thread of its own or in the arena's
// waits and steps (AlongsideRun); node bytes never enter a channel, since the node's pair channels
// move each byte twice and pipelining over them was 1.5-1.8x slower at 2 x 4 ranks.
void allReduceHierarchical(const AlgoContext& ctx, const CollArgs& a) {
  if (hierarchicalOnOneNode(ctx, a) || a.count == 0) return;
  const HierView v{*ctx.hierarchy, ctx.rank};
  LOOM_CHECK_INTERNAL(v.h.node != nullptr, "hierarchical allreduce without its node group");
  const AlgoContext& node = *v.h.node;
  const size_t esize = dtypeSize(a.dtype);
  char* recv = static_cast<char*>(a.recv);
  const size_t chunk = hierarchicalChunkElements(a.count, esize);
  const size_t chunks = chunkCount(a.count, chunk);
  Schedule& s = *ctx.schedule;
  s.clear(ctx.nranks);
  s.setExtents(a.count * esize, a.count * esize);
  std::vector<uint32_t>& marks = *ctx.opList;
  // The column ring allreduce of each slice, in place in the output.
  buildColumnChunks(
      ctx, a, chunk, s, marks, [&](size_t offset, size_t count, const uint32_t& gate) {
        RingOps ring =
            appendColumnAllReduce(s, v, ctx, s.output(offset * esize), count, esize, a, gate);
        return ring.lastRecv != RingOps::kNone ? ring.lastRecv : kNoOp;
      });
  s.finish();
  auto slices = [&](size_t t) {
    const Range c = chunkOf(a.count, chunk, t);
    return NodeSlices{c.offset, c.count, esize, v.columns()};
  };
  auto land = [&](int, size_t offset, size_t bytes, const char* data) {
    ctx.copyOut(recv + offset, data, bytes, a.count * esize);
  };
  AlongsideRun column(ctx, node, s, recv, recv, besideOnThread(chunks));
  for (size_t t = 0; t <= chunks; ++t) {
    if (t < chunks) {
      nodeReduce(node, static_cast<const char*>(a.send), recv, slices(t),
                 NodeReduction{a.dtype, esize, kernelOp(a.op), a.accum});
      column.open(marks[2 * t]);
    }
    if (t == 0) continue;
    column.waitFor(marks[2 * (t - 1) + 1]);
    nodeShare(node, recv, slices(t - 1), land);
  }
  column.finish();
}

// Reduce as a pipeline of chunks, as allreduce: the node reduce of chunk t on the node's arena
// (into this rank's partial sums, every slice on its owner) while the column chain carries chunk
// t-1 towards the root's node, whose owners then hand the root their final slices of chunk t-1
// through the arena (a node share only the root lands). Node bytes never enter a channel: as one
// schedule over the node's pair channels it took 77-90 ms for 64 MiB on 2 x 2 fake nodes of the
// 2-core VM, this 48-53 ms (the ring 70-80 ms).
void reduceHierarchical(const AlgoContext& ctx, const CollArgs& a) {
  if (hierarchicalOnOneNode(ctx, a) || a.count == 0) return;
  const HierView v{*ctx.hierarchy, ctx.rank};
  LOOM_CHECK_INTERNAL(v.h.node != nullptr, "hierarchical reduce without its node group");
  const AlgoContext& node = *v.h.node;
  const size_t esize = dtypeSize(a.dtype), bytes = a.count * esize;
  const size_t chunk = hierarchicalChunkElements(a.count, esize);
  const size_t chunks = chunkCount(a.count, chunk);
  const bool isRoot = ctx.rank == a.root, onRootNode = v.node() == v.h.nodeOf[a.root];
  Schedule& s = *ctx.schedule;
  s.clear(ctx.nranks);
  s.setExtents(bytes, isRoot ? bytes : 0);  // the output exists on the root only
  const BufferRef partial = s.scratch(s.addScratch("partial", bytes));
  std::vector<uint32_t>& marks = *ctx.opList;
  // The column chain of each slice towards the root's node, in place in the partial sums; final
  // on the root's node only (where the owners hand it over).
  const int rootNode = v.h.nodeOf[a.root];
  buildColumnChunks(ctx, a, chunk, s, marks,
                    [&](size_t offset, size_t count, const uint32_t& gate) {
                      RingOps ring = appendColumnReduce(s, v, ctx, partial.at(offset * esize),
                                                        count * esize, rootNode, a, gate);
                      return onRootNode && ring.lastRecv != RingOps::kNone ? ring.lastRecv : kNoOp;
                    });
  s.finish();
  AlongsideRun column(ctx, node, s, a.send, a.recv, besideOnThread(chunks));
  char* sums = (*ctx.bindings)[partial.buffer];  // bound by the run
  char* recv = static_cast<char*>(a.recv);
  auto slices = [&](size_t t) {
    const Range c = chunkOf(a.count, chunk, t);
    return NodeSlices{c.offset, c.count, esize, v.columns()};
  };
  auto land = [&](int, size_t offset, size_t n, const char* data) {
    if (isRoot) ctx.copyOut(recv + offset, data, n, bytes);
  };
  for (size_t t = 0; t <= chunks; ++t) {
    if (t < chunks) {
      nodeReduce(node, static_cast<const char*>(a.send), sums, slices(t),
                 NodeReduction{a.dtype, esize, kernelOp(a.op), a.accum});
      column.open(marks[2 * t]);
    }
    if (t == 0 || !onRootNode) continue;
    column.waitFor(marks[2 * (t - 1) + 1]);
    if (isRoot)  // its own slice, if it owns one, is final in its partial sums
      slices(t - 1)(v.local(), [&](size_t offset, size_t n) {
        ctx.copyOut(recv + offset, sums + offset, n, bytes);
      });
    nodeShare(node, sums, slices(t - 1), land);
  }
  column.finish();
}

void buildBroadcastHierarchical(const AlgoContext& ctx, const CollArgs& a, Schedule& s) {
  const HierView v{*ctx.hierarchy, ctx.rank};
  const size_t esize = dtypeSize(a.dtype);
  const int n = v.mateCount(), l = v.local(), G = v.columns();
  const int rootNode = v.h.nodeOf[a.root];
  auto slice = [&](int j) {
    Range r = sliceOf(a.count, G, j);
    return std::make_pair(r.offset * esize, r.count * esize);
  };
  // This rank's slice l, when it has arrived here: what the column forwards and shares.
  uint32_t arrived = kNoOp;
  BufferRef from = s.output(slice(l).first);
  if (v.node() == rootNode) {
    if (ctx.rank == a.root) {
      if (a.send != a.recv) s.copy(s.output(), s.input(), a.count * esize, true);
      for (int i = 0; i < n; ++i)
        if (i != l)
          for (int j = 0; j < G; ++j)
            s.send(v.mates()[i], s.input(slice(j).first), slice(j).second);
      from = s.input(slice(l).first);
    } else {
      for (int j = 0; j < G; ++j) {
        const uint32_t recv = s.recv(a.root, s.output(slice(j).first), slice(j).second, true);
        if (j == l) arrived = recv;
      }
    }
  }
  if (!v.inColumn()) {
    if (v.node() != rootNode)
      for (int j = 0; j < G; ++j)
        s.recv(v.mates()[j], s.output(slice(j).first), slice(j).second, true);
    return;
  }
  const auto [offset, bytes] = slice(l);
  const int k = v.nodes(), d = wrapIndex(v.node() - rootNode, k);
  if (d > 0) arrived = s.recv(v.columnLeft(), s.output(offset), bytes, true);
  if (d < k - 1) {
    const uint32_t forward = s.send(v.columnRight(), from, bytes);
    if (arrived != kNoOp) s.streamAfter(forward, arrived);
  }
  if (v.node() == rootNode) return;
  for (int i = 0; i < n; ++i) {
    if (i == l) continue;
    s.streamAfter(s.send(v.mates()[i], s.output(offset), bytes), arrived);
  }
  for (int j = 0; j < G; ++j)
    if (j != l) s.recv(v.mates()[j], s.output(slice(j).first), slice(j).second, true);
}

}  // namespace

void registerHierarchicalAlgorithms(std::vector<Algorithm>& out) {
  out.push_back({loomFuncAllReduce, "hierarchical", allReduceHierarchical, false});
  out.push_back(hierarchicalAlgorithm<buildBroadcastHierarchical>(loomFuncBroadcast));
  out.push_back({loomFuncReduce, "hierarchical", reduceHierarchical, false});
}

}  // namespace loom
