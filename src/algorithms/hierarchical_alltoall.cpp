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

// One rank's schedule, phase by phase.
class AllToAllBuilder {
 public:
  AllToAllBuilder(const AlgoContext& ctx, const CollArgs& a, Schedule& s)
      : h_(*ctx.hierarchy),
        v_{h_, ctx.rank},
        lay_{h_, a.count * dtypeSize(a.dtype)},
        B_(lay_.block),
        s_(s),
        me_(ctx.rank),
        x_(h_.nodeIndex),
        l_(v_.local()),
        mates_(h_.members[x_]),
        inColumn_(v_.inColumn()),
        remoteSources_(ctx.nranks - mates_.size()),
        arrivals_(*ctx.opList) {
    allocateTransit();
  }

  void build() {
    s_.copy(s_.output(me_ * B_), s_.input(me_ * B_), B_, true);
    nodeExchange();
    if (inColumn_) columnExchange();
    handOn();
  }

 private:
  // Scratch: what this column rank sends each other node (rows: sources of this node; its own
  // row stays unused, it goes from the send buffer), then what it hands on to each node mate of
  // its column (rows: sources on other nodes, in node order). Block b of it arrives by the
  // receive arrivals_[b], which the block's next send streams behind.
  void allocateTransit() {
    if (inColumn_)
      for (int y = 0; y < lay_.nodes(); ++y)
        if (y != x_) packBytes_ += mates_.size() * lay_.destinationCount(y, l_) * B_;
    const size_t handOn = inColumn_ ? lay_.destinationCount(x_, l_) - 1 : 0;
    const uint64_t scratchBytes = packBytes_ + handOn * remoteSources_ * B_;
    pack_ = s_.scratch(s_.addScratch("transit", scratchBytes));
    arrivals_.assign(B_ > 0 ? scratchBytes / B_ : 0, kNoOp);
  }
  // Offset of the row of source index i for node y.
  uint64_t packRow(int y, size_t i) const {
    uint64_t offset = 0;
    for (int m = 0; m < y; ++m)
      if (m != x_) offset += mates_.size() * lay_.destinationCount(m, l_) * B_;
    return offset + i * lay_.destinationCount(y, l_) * B_;
  }
  // The hand-on row of node mate d (local index l + k*G, k >= 1): blocks from every remote
  // source, in node order.
  uint64_t forwardRow(int d) const {
    size_t k = static_cast<size_t>(h_.localIndex[d] / h_.columns) - 1;
    return packBytes_ + k * remoteSources_ * B_;
  }
  size_t remoteSourceIndex(int src) const {
    size_t i = 0;
    for (int m = 0; m < lay_.nodes(); ++m) {
      if (m == x_) continue;
      if (m == h_.nodeOf[src])
        return i + (std::lower_bound(h_.members[m].begin(), h_.members[m].end(), src) -
                    h_.members[m].begin());
      i += h_.members[m].size();
    }
    return i;
  }
  void toTransit(int peer, uint64_t offset) {
    arrivals_[offset / B_] = s_.recv(peer, pack_.at(offset), B_);
  }
  void fromTransit(int peer, uint64_t offset) {
    s_.streamAfter(s_.send(peer, pack_.at(offset), B_), arrivals_[offset / B_]);
  }

  // 1. Node exchange.
  void nodeExchange() {
    for (int t = 0; t < v_.mateCount(); ++t) {
      if (t == l_) continue;
      s_.send(mates_[t], s_.input(mates_[t] * B_), B_);
      if (t < h_.columns)
        for (int y = 0; y < lay_.nodes(); ++y)
          if (y != x_)
            lay_.destinations(y, t, [&](int d) { s_.send(mates_[t], s_.input(d * B_), B_); });
      s_.recv(mates_[t], s_.output(mates_[t] * B_), B_, true);
      if (!inColumn_) continue;
      for (int y = 0; y < lay_.nodes(); ++y) {
        if (y == x_) continue;
        const uint64_t row = packRow(y, t);
        for (size_t k = 0, n = lay_.destinationCount(y, l_); k < n; ++k)
          toTransit(mates_[t], row + k * B_);
      }
    }
  }

  // 2. Column exchange with each other node's rank of this local index.
  void columnExchange() {
    for (int y = 0; y < lay_.nodes(); ++y) {
      if (y == x_) continue;
      const int peer = v_.columnRank(y, l_);
      for (size_t i = 0; i < mates_.size(); ++i) {
        size_t k = 0;
        lay_.destinations(y, l_, [&](int d) {
          if (mates_[i] == me_)
            s_.send(peer, s_.input(d * B_), B_);
          else
            fromTransit(peer, packRow(y, i) + k * B_);
          ++k;
        });
      }
      for (int src : h_.members[y])
        lay_.destinations(x_, l_, [&](int d) {
          if (d == me_)
            s_.recv(peer, s_.output(src * B_), B_, true);
          else
            toTransit(peer, forwardRow(d) + remoteSourceIndex(src) * B_);
        });
    }
  }

  // 3. Hand-on to the node mates without a column of their own.
  void handOn() {
    if (inColumn_) {
      lay_.destinations(x_, l_, [&](int d) {
        if (d == me_) return;
        for (size_t i = 0; i < remoteSources_; ++i) fromTransit(d, forwardRow(d) + i * B_);
      });
      return;
    }
    const int column = mates_[lay_.column(me_)];
    for (int m = 0; m < lay_.nodes(); ++m)
      if (m != x_)
        for (int src : h_.members[m]) s_.recv(column, s_.output(src * B_), B_, true);
  }

  const Hierarchy& h_;
  const HierView v_;
  const Layout lay_;
  const uint64_t B_;
  Schedule& s_;
  const int me_, x_, l_;
  const std::vector<int>& mates_;
  const bool inColumn_;
  const size_t remoteSources_;
  std::vector<uint32_t>& arrivals_;
  uint64_t packBytes_ = 0;
  BufferRef pack_;
};

void buildAllToAllHierarchical(const AlgoContext& ctx, const CollArgs& a, Schedule& s) {
  AllToAllBuilder(ctx, a, s).build();
}

}  // namespace

void registerHierarchicalAllToAllAlgorithms(std::vector<Algorithm>& out) {
  out.push_back(hierarchicalAlgorithm<buildAllToAllHierarchical>(loomFuncAllToAll));
}

}  // namespace loom
