// "hierarchical": collectives of ranks on several nodes as intra-node phases over the node's arena
// (hierarchical_phases.hpp) around an inter-node phase over the channels of a column, the ranks
// with one local index, one per node (ring algorithms and the ring engine). Only this rank's
// column crosses the network, so each byte crosses it once per node, not once per rank.
//
// Slices: allreduce, reduce and broadcast cut the buffer into G slices, G = the smallest node's
// size; local index l < G owns slice l on every node, so every column has one rank per node even
// on uneven nodes (3 + 2: the third rank of the larger node only joins the intra-node phases).
//   allreduce     = node reduce of slice l → column allreduce (ring) of slice l → node share
//   reduce        = node reduce of slice l → column reduce (ring) to the root's node → node
//                   share to the root
//   broadcast     = node broadcast (direct) on the root's node → column broadcast (ring) of
//                   slice l → node share on the other nodes
// Blocks: allgather and reduce-scatter move whole per-rank blocks. Column l carries the blocks of
// local index l, then l + G, l + 2G, ... (rounds; a node without that index sends nothing):
//   allgather      = [uneven nodes: node share of own blocks] → column ring of the blocks,
//                    straight into the output → node share of what the column brought
//   reducescatter  = node reduce of the column's blocks → column reduce-scatter ring (own block
//                    straight into the output) → node share of blocks of local index >= G
// Phases run one after another (no overlap of the intra- and inter-node phases yet). alltoall:
// hierarchical_alltoall.cpp (grouped by node over the node's and the column's channels).
// One node: the communicator's own arena algorithm (the selector normally resolves that first).
#include <algorithm>
#include <vector>

#include "algorithms/context.hpp"
#include "algorithms/families.hpp"
#include "algorithms/hierarchical_phases.hpp"
#include "algorithms/partition.hpp"
#include "algorithms/ring_engine.hpp"
#include "base/dtype.hpp"
#include "base/error.hpp"

namespace loom {

namespace {

int wrap(int index, int n) { return ((index % n) + n) % n; }

// A phase's algorithm; callers keep it in a function-local static, so calls compare no strings.
const Algorithm& flat(loomFunc_t func, const char* name) {
  const Algorithm* algo = findAlgorithm(func, name);
  if (algo == nullptr)
    LOOM_THROW(loomInternalError, "no algorithm ", name, " for ", funcName(func));
  return *algo;
}

// True when ranks share one arena: the pure intra-node path applies.
bool singleNode(const AlgoContext& ctx, const CollArgs& a) {
  if (ctx.hierarchy != nullptr) return false;
  LOOM_CHECK_ARG(ctx.arena != nullptr, "hierarchical ", funcName(a.func),
                 " needs either one node or the node groups of a CPU communicator");
  flat(a.func, "direct").run(ctx, a);
  return true;
}

NodeReduction nodeReduction(const CollArgs& a) {
  return {a.dtype, dtypeSize(a.dtype), kernelOp(a.op), a.accum};
}

// Average's division, once, on a fully reduced range.
void finishAverage(const AlgoContext& ctx, const CollArgs& a, char* data, size_t count) {
  if (a.op != loomAvg || count == 0) return;
  const void* srcs[1] = {data};
  ctx.device->reduce(data, srcs, 1, count, a.dtype, loomSum, a.accum, ctx.nranks);
}

// Slice l of the buffer for local index l < G; the rest own nothing.
struct Slices {
  size_t count, esize;
  int columns;
  template <typename Visit>
  void operator()(int local, Visit&& visit) const {
    if (local >= columns) return;
    Range s = sliceOf(count, columns, local);
    if (s.count > 0) visit(s.offset * esize, s.count * esize);
  }
  Range of(int local) const { return sliceOf(count, columns, local); }
};

// The blocks a column carries: local index l, l + G, ... of the nodes `which` names (firstRound 1
// skips local index l itself).
struct ColumnBlocks {
  enum Nodes { kAll, kOwn, kOthers };
  const Hierarchy& h;
  size_t block;
  Nodes which = kAll;
  int firstRound = 0;
  int rounds() const {
    size_t largest = 0;
    for (const auto& m : h.members) largest = std::max(largest, m.size());
    return static_cast<int>((largest + h.columns - 1) / h.columns);
  }
  template <typename Visit>
  void operator()(int local, Visit&& visit) const {
    if (local >= h.columns) return;
    for (int t = firstRound, n = rounds(); t < n; ++t) {
      size_t j = static_cast<size_t>(local + t * h.columns);
      for (int m = 0; m < static_cast<int>(h.members.size()); ++m)
        if (j < h.members[m].size() && (which == kAll || (which == kOwn) == (m == h.nodeIndex)))
          visit(h.members[m][j] * block, block);
    }
  }  // This column's block of node `node` in `round` within a buffer of per-rank blocks at base;
  // null with bytes 0 where that node has no rank of that local index.
  char* at(char* base, int node, int round, size_t& bytes) const {
    size_t j = static_cast<size_t>(h.node.rank + round * h.columns);
    bytes = j < h.members[node].size() ? block : 0;
    return bytes > 0 ? base + h.members[node][j] * block : nullptr;
  }
};

bool evenNodes(const Hierarchy& h) {
  return std::all_of(h.members.begin(), h.members.end(), [&](const std::vector<int>& m) {
    return static_cast<int>(m.size()) == h.columns;
  });
}

void allReduceHierarchical(const AlgoContext& ctx, const CollArgs& a) {
  if (singleNode(ctx, a) || a.count == 0) return;
  const Hierarchy& h = *ctx.hierarchy;
  size_t esize = dtypeSize(a.dtype);
  char* recv = static_cast<char*>(a.recv);
  Slices slices{a.count, esize, h.columns};
  nodeReduce(h.node, static_cast<const char*>(a.send), recv, slices, nodeReduction(a));
  if (h.column.nranks > 0) {
    Range s = slices.of(h.node.rank);
    CollArgs sub = a;
    sub.send = sub.recv = recv + s.offset * esize;
    sub.count = s.count;
    sub.op = kernelOp(a.op);
    static const Algorithm& ring = flat(loomFuncAllReduce, "ring");
    ring.run(h.column, sub);
    finishAverage(ctx, a, recv + s.offset * esize, s.count);
  }
  nodeShare(h.node, recv, slices, [&](int, size_t offset, size_t bytes, const char* data) {
    ctx.copyOut(recv + offset, data, bytes, a.count * esize);
  });
}

void reduceHierarchical(const AlgoContext& ctx, const CollArgs& a) {
  if (singleNode(ctx, a) || a.count == 0) return;
  const Hierarchy& h = *ctx.hierarchy;
  size_t esize = dtypeSize(a.dtype);
  int rootNode = h.nodeOf[a.root];
  bool isRoot = ctx.rank == a.root;
  // Partial sums live in the hierarchical scratch: recvbuff means nothing off the root.
  char* partial = h.scratchBytes(a.count * esize);
  char* recv = static_cast<char*>(a.recv);
  Slices slices{a.count, esize, h.columns};
  nodeReduce(h.node, static_cast<const char*>(a.send), partial, slices, nodeReduction(a));
  if (h.column.nranks > 0) {
    Range s = slices.of(h.node.rank);
    CollArgs sub = a;
    sub.send = sub.recv = partial + s.offset * esize;
    sub.count = s.count;
    sub.op = kernelOp(a.op);
    sub.root = rootNode;
    static const Algorithm& ring = flat(loomFuncReduce, "ring");
    ring.run(h.column, sub);
    if (h.nodeIndex == rootNode) {
      finishAverage(ctx, a, partial + s.offset * esize, s.count);
      if (isRoot)
        ctx.device->copy(recv + s.offset * esize, partial + s.offset * esize, s.count * esize);
    }
  }
  if (h.nodeIndex != rootNode) return;
  nodeShare(h.node, partial, slices, [&](int, size_t offset, size_t bytes, const char* data) {
    if (isRoot) ctx.copyOut(recv + offset, data, bytes, a.count * esize);
  });
}

void broadcastHierarchical(const AlgoContext& ctx, const CollArgs& a) {
  if (singleNode(ctx, a) || a.count == 0) return;
  const Hierarchy& h = *ctx.hierarchy;
  size_t esize = dtypeSize(a.dtype);
  int rootNode = h.nodeOf[a.root];
  char* recv = static_cast<char*>(a.recv);
  if (h.nodeIndex == rootNode) {
    CollArgs sub = a;
    sub.root = h.localIndex[a.root];
    static const Algorithm& direct = flat(loomFuncBroadcast, "direct");
    direct.run(h.node, sub);
  }
  Slices slices{a.count, esize, h.columns};
  if (h.column.nranks > 0) {
    Range s = slices.of(h.node.rank);
    CollArgs sub = a;
    sub.send = sub.recv = recv + s.offset * esize;
    sub.count = s.count;
    sub.root = rootNode;
    static const Algorithm& ring = flat(loomFuncBroadcast, "ring");
    ring.run(h.column, sub);
  }
  if (h.nodeIndex == rootNode) return;
  nodeShare(h.node, recv, slices, [&](int, size_t offset, size_t bytes, const char* data) {
    ctx.copyOut(recv + offset, data, bytes, a.count * esize);
  });
}

void allGatherHierarchical(const AlgoContext& ctx, const CollArgs& a) {
  if (singleNode(ctx, a) || a.count == 0) return;
  const Hierarchy& h = *ctx.hierarchy;
  size_t block = a.count * dtypeSize(a.dtype), total = block * ctx.nranks;
  char* recv = static_cast<char*>(a.recv);
  char* mine = recv + ctx.rank * block;
  if (a.send != mine) ctx.device->copy(mine, a.send, block);
  auto land = [&](int, size_t offset, size_t bytes, const char* data) {
    ctx.copyOut(recv + offset, data, bytes, total);
  };
  // Uneven nodes: column l also carries blocks of local index l + G, ... that only its node
  // mates have; share the node's own blocks first.
  bool even = evenNodes(h);
  if (!even) {
    const std::vector<int>& members = h.members[h.nodeIndex];
    auto own = [&](int local, auto&& visit) { visit(members[local] * block, block); };
    nodeShare(h.node, recv, own, land);
  }
  ColumnBlocks blocks{h, block};
  if (h.column.nranks > 0) {
    const int k = h.column.nranks, me = h.column.rank;
    auto item = [&](int node, int round, size_t& bytes) {
      return blocks.at(recv, node, round, bytes);
    };
    std::vector<RingStep>& steps = *ctx.ringSteps;
    steps.clear();
    for (int t = 0, rounds = blocks.rounds(); t < rounds; ++t) {
      for (int s = 0; s < k - 1; ++s) {
        RingStep step;
        step.send = item(wrap(me - s, k), t, step.sendBytes);
        step.sendAfterPrevRecv = s > 0;
        step.recvDst = item(wrap(me - s - 1, k), t, step.recvBytes);
        steps.push_back(step);
      }
    }
    runRing(h.column, steps, {a.dtype, loomSum, a.accum});
  }
  ColumnBlocks brought{h, block, even ? ColumnBlocks::kAll : ColumnBlocks::kOthers};
  nodeShare(h.node, recv, brought, land);
}

void reduceScatterHierarchical(const AlgoContext& ctx, const CollArgs& a) {
  if (singleNode(ctx, a) || a.count == 0) return;
  const Hierarchy& h = *ctx.hierarchy;
  size_t esize = dtypeSize(a.dtype), block = a.count * esize;
  char* recv = static_cast<char*>(a.recv);
  // The node's partial sums of the column's blocks, at their input offsets; the ring then
  // accumulates in place (each position is received at most once, never the one sent first).
  char* partial = h.scratchBytes(block * ctx.nranks);
  ColumnBlocks blocks{h, block};
  nodeReduce(h.node, static_cast<const char*>(a.send), partial, blocks, nodeReduction(a));
  if (h.column.nranks > 0) {
    const int k = h.column.nranks, me = h.column.rank;
    auto item = [&](int node, int round, size_t& bytes) {
      return blocks.at(partial, node, round, bytes);
    };
    std::vector<RingStep>& steps = *ctx.ringSteps;
    steps.clear();
    for (int t = 0, rounds = blocks.rounds(); t < rounds; ++t) {
      for (int s = 0; s < k - 1; ++s) {
        bool last = s == k - 2;
        RingStep step;
        step.send = item(wrap(me - s - 1, k), t, step.sendBytes);
        step.sendAfterPrevRecv = s > 0;
        step.recvDst = item(wrap(me - s - 2, k), t, step.recvBytes);
        step.reduceWith = step.recvDst;
        if (last) {
          step.divisor = averageDivisor(a.op, ctx.nranks);
          if (t == 0) step.recvDst = recv;  // this rank's own block: straight into the output
        }
        steps.push_back(step);
      }
    }
    runRing(h.column, steps, {a.dtype, kernelOp(a.op), a.accum});
  }
  // Blocks of local index >= G ended on their column's rank of this node: hand them over.
  ColumnBlocks finals{h, block, ColumnBlocks::kOwn, 1};
  size_t mine = ctx.rank * block;
  nodeShare(h.node, partial, finals, [&](int, size_t offset, size_t bytes, const char* data) {
    if (offset >= mine && offset < mine + block)
      ctx.device->copy(recv + (offset - mine), data, bytes);
  });
}

}  // namespace

void registerHierarchicalAlgorithms(std::vector<Algorithm>& out) {
  out.push_back({loomFuncAllReduce, "hierarchical", allReduceHierarchical, false});
  out.push_back({loomFuncAllGather, "hierarchical", allGatherHierarchical, false});
  out.push_back({loomFuncReduceScatter, "hierarchical", reduceScatterHierarchical, false});
  out.push_back({loomFuncBroadcast, "hierarchical", broadcastHierarchical, false});
  out.push_back({loomFuncReduce, "hierarchical", reduceHierarchical, false});
}

}  // namespace loom
