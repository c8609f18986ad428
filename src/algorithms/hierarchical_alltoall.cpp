// "hierarchical" alltoall: ranks on several nodes exchange what crosses the network as one
// message per node pair and column, instead of one per rank pair. Column l (the ranks of local
// index l < G, G = the smallest node's size; see hierarchical.cpp) carries the blocks for the
// destinations of local index l, l + G, l + 2G, ... of every other node ("the column's
// destinations on that node"):
//   1. node exchange: each rank sends each node mate its own block, and each column rank the
//      blocks for that column's destinations on the other nodes (over the node's channels);
//   2. column exchange: column rank l of node X sends column rank l of node Y the blocks of all of
//      X's ranks for l's destinations on Y, source by source (over the column's channels);
//   3. uneven nodes only: column rank l hands the blocks for its node mates of local index
//      l + G, ... on to them (over the node's channels).
// Every block is one channel transfer, read from the send buffer or written into the output
// wherever it is this rank's own; only blocks in transit stop in scratch. The network carries the
// same bytes as "pairwise", in (nodes - 1) messages per column rank rather than (ranks - node
// size) per rank. One schedule: a block in transit goes on as it arrives (its send streams behind
// its receive), so the phases overlap.
#include <algorithm>
#include <vector>

#include "algorithms/context.hpp"
#include "algorithms/families.hpp"
#include "algorithms/hierarchical_view.hpp"
#include "base/dtype.hpp"
#include "base/error.hpp"

namespace loom {

namespace {

// Who sends what where; every rank evaluates it alike for every node.
struct Layout {
  const Hierarchy& h;
  size_t block;
  int column(int rank) const { return h.localIndex[rank] % h.columns; }
  // The ranks of node m whose blocks column l carries there, ascending.
  template <typename Visit>
  void destinations(int m, int l, Visit&& visit) const {
    for (size_t j = l; j < h.members[m].size(); j += h.columns) visit(h.members[m][j]);
  }
  size_t destinationCount(int m, int l) const {
    size_t n = h.members[m].size();
    return n > static_cast<size_t>(l) ? (n - l + h.columns - 1) / h.columns : 0;
  }
  int nodes() const { return static_cast<int>(h.members.size()); }
};

// One rank's schedule: the layout of its transit scratch, then the three phases in order.
struct AllToAllPlan {
  AllToAllPlan(const AlgoContext& ctx, const CollArgs& a, Schedule& s);
  void nodeExchange();
  void columnExchange();
  void handOn();

  // Offset in the scratch of the row of source index i for node y.
  uint64_t packRow(int y, size_t i) const {
    uint64_t offset = 0;
    for (int m = 0; m < y; ++m)
      if (m != x) offset += mates.size() * lay.destinationCount(m, l) * B;
    return offset + i * lay.destinationCount(y, l) * B;
  }
  // The hand-on row of node mate d (local index l + k*G, k >= 1): blocks from every remote
  // source, in node order.
  uint64_t forwardRow(int d) const {
    size_t k = static_cast<size_t>(h.localIndex[d] / h.columns) - 1;
    return packBytes + k * remoteSources * B;
  }
  size_t remoteSourceIndex(int src) const {
    size_t i = 0;
    for (int m = 0; m < lay.nodes(); ++m) {
      if (m == x) continue;
      if (m == h.nodeOf[src])
        return i + (std::lower_bound(h.members[m].begin(), h.members[m].end(), src) -
                    h.members[m].begin());
      i += h.members[m].size();
    }
    return i;
  }
  void toTransit(int peer, uint64_t offset) {
    arrivals[offset / B] = s.recv(peer, pack.at(offset), B);
  }
  void fromTransit(int peer, uint64_t offset) {
    s.streamAfter(s.send(peer, pack.at(offset), B), arrivals[offset / B]);
  }

  const Hierarchy& h;
  const HierView v;
  const Layout lay;
  const uint64_t B;
  const int me, x, l;
  const std::vector<int>& mates;
  const bool inColumn;
  Schedule& s;
  std::vector<uint32_t>& arrivals;
  size_t remoteSources = 0;
  uint64_t packBytes = 0;
  BufferRef pack;
};

AllToAllPlan::AllToAllPlan(const AlgoContext& ctx, const CollArgs& a, Schedule& s)
    : h(*ctx.hierarchy),
      v{h, ctx.rank},
      lay{h, a.count * dtypeSize(a.dtype)},
      B(lay.block),
      me(ctx.rank),
      x(h.nodeIndex),
      l(v.local()),
      mates(h.members[x]),
      inColumn(v.inColumn()),
      s(s),
      arrivals(*ctx.opList) {
  // Scratch: what this column rank sends each other node (rows: sources of this node; its own
  // row stays unused, it goes from the send buffer), then what it hands on to each node mate of
  // its column (rows: sources on other nodes, in node order). Block b of it arrives by the
  // receive arrivals[b], which the block's next send streams behind.
  remoteSources = ctx.nranks - mates.size();
  if (inColumn)
    for (int y = 0; y < lay.nodes(); ++y)
      if (y != x) packBytes += mates.size() * lay.destinationCount(y, l) * B;
  const size_t handOn = inColumn ? lay.destinationCount(x, l) - 1 : 0;
  const uint64_t scratchBytes = packBytes + handOn * remoteSources * B;
  pack = s.scratch(s.addScratch("transit", scratchBytes));
  arrivals.assign(B > 0 ? scratchBytes / B : 0, kNoOp);
}

// 1. Node exchange.
void AllToAllPlan::nodeExchange() {
  for (int t = 0; t < v.mateCount(); ++t) {
    if (t == l) continue;
    s.send(mates[t], s.input(mates[t] * B), B);
    if (t < h.columns)
      for (int y = 0; y < lay.nodes(); ++y)
        if (y != x) lay.destinations(y, t, [&](int d) { s.send(mates[t], s.input(d * B), B); });
    s.recv(mates[t], s.output(mates[t] * B), B, true);
    if (inColumn)
      for (int y = 0; y < lay.nodes(); ++y) {
        if (y == x) continue;
        const uint64_t row = packRow(y, t);
        for (size_t k = 0, n = lay.destinationCount(y, l); k < n; ++k)
          toTransit(mates[t], row + k * B);
      }
  }
}

// 2. Column exchange with each other node's rank of this local index.
void AllToAllPlan::columnExchange() {
  if (!inColumn) return;
  for (int y = 0; y < lay.nodes(); ++y) {
    if (y == x) continue;
    const int peer = v.columnRank(y, l);
    for (size_t i = 0; i < mates.size(); ++i) {
      size_t k = 0;
      lay.destinations(y, l, [&](int d) {
        if (mates[i] == me)
          s.send(peer, s.input(d * B), B);
        else
          fromTransit(peer, packRow(y, i) + k * B);
        ++k;
      });
    }
    for (int src : h.members[y])
      lay.destinations(x, l, [&](int d) {
        if (d == me)
          s.recv(peer, s.output(src * B), B, true);
        else
          toTransit(peer, forwardRow(d) + remoteSourceIndex(src) * B);
      });
  }
}

// 3. Hand-on to the node mates without a column of their own.
void AllToAllPlan::handOn() {
  if (inColumn) {
    lay.destinations(x, l, [&](int d) {
      if (d == me) return;
      for (size_t i = 0; i < remoteSources; ++i) fromTransit(d, forwardRow(d) + i * B);
    });
  } else {
    const int column = mates[lay.column(me)];
    for (int m = 0; m < lay.nodes(); ++m)
      if (m != x)
        for (int src : h.members[m]) s.recv(column, s.output(src * B), B, true);
  }
}

void buildAllToAllHierarchical(const AlgoContext& ctx, const CollArgs& a, Schedule& s) {
  AllToAllPlan plan(ctx, a, s);
  s.copy(s.output(plan.me * plan.B), s.input(plan.me * plan.B), plan.B, true);
  plan.nodeExchange();
  plan.columnExchange();
  plan.handOn();
}

}  // namespace

void registerHierarchicalAllToAllAlgorithms(std::vector<Algorithm>& out) {
  out.push_back(hierarchicalAlgorithm<buildAllToAllHierarchical>(loomFuncAllToAll));
}

}  // namespace loom
