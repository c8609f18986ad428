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
// wherever it is this rank's own; only blocks in transit stop in the hierarchical scratch. The
// network carries the same bytes as "pairwise", in (nodes - 1) messages per column rank rather
// than (ranks - node size) per rank.
#include <algorithm>
#include <vector>

#include "algorithms/context.hpp"
#include "algorithms/families.hpp"
#include "base/dtype.hpp"
#include "base/error.hpp"
#include "base/wait.hpp"

namespace loom {

namespace {

// Transfers of one peer and direction, run in order: a sequence of blocks over one channel. Both
// ends list the same block sizes in the same order (a channel pads each transfer to 8 bytes).
class Exchange {
 public:
  explicit Exchange(const AlgoContext& ctx) : ctx_(ctx) {
    streams_.clear();
    blocks_.clear();
  }
  void begin(int peer, bool isSend) {
    streams_.push_back({peer, isSend, blocks_.size(), blocks_.size()});
  }
  void block(const char* data, size_t bytes) {
    blocks_.push_back({const_cast<char*>(data), bytes});
    streams_.back().end = blocks_.size();
  }
  // Progresses every stream together until all are done (a stream's blocks one after another).
  void run() {
    auto pass = [&]() -> bool {
      bool moved = false;
      for (Stream& s : streams_) {
        Channel& ch = ctx_.channel(s.peer);
        while (s.next < s.end) {
          Block& b = blocks_[s.next];
          size_t n = s.isSend ? ch.trySend(b.data + s.position, b.bytes - s.position)
                              : ch.tryReceive(b.data + s.position, b.bytes - s.position);
          s.position += n;
          moved |= n > 0;
          if (s.position < b.bytes) break;
          ++s.next, s.position = 0;
        }
      }
      return moved;
    };
    auto done = [&] {
      return std::all_of(streams_.begin(), streams_.end(),
                         [](const Stream& s) { return s.next == s.end; });
    };
    auto check = [&] {
      for (const Stream& s : streams_)
        if (s.next < s.end) ctx_.check(s.peer);
    };
    // Blocks in poll on the network streams once spinning stops paying (base/wait.hpp).
    auto gather = [&](PollSet& set) {
      for (const Stream& s : streams_)
        if (s.next < s.end) ctx_.channel(s.peer).addPollFds(set, s.isSend);
    };
    while (!done()) {
      if (!pass()) waitUntil(pass, check, gather, *ctx_.pollSet, ctx_.peers);
    }
  }

 private:
  struct Stream {
    int peer;
    bool isSend;
    size_t next, end;  // blocks_[next, end) remain
    size_t position = 0;
  };
  struct Block {
    char* data;
    size_t bytes;
  };
  const AlgoContext& ctx_;
  // Reused per thread: no allocation per call once the largest call has been seen.
  static thread_local std::vector<Stream> streams_;
  static thread_local std::vector<Block> blocks_;
};

thread_local std::vector<Exchange::Stream> Exchange::streams_;
thread_local std::vector<Exchange::Block> Exchange::blocks_;

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

void allToAllHierarchical(const AlgoContext& ctx, const CollArgs& a) {
  if (a.count == 0) return;
  if (ctx.hierarchy == nullptr) {
    LOOM_CHECK_ARG(ctx.arena != nullptr,
                   "hierarchical alltoall needs either one node or the node groups of a CPU "
                   "communicator");
    static const Algorithm& direct = *findAlgorithm(loomFuncAllToAll, "direct");
    direct.run(ctx, a);
    return;
  }
  const Hierarchy& h = *ctx.hierarchy;
  const Layout lay{h, a.count * dtypeSize(a.dtype)};
  const size_t B = lay.block;
  const char* send = static_cast<const char*>(a.send);
  char* recv = static_cast<char*>(a.recv);
  const int me = ctx.rank, x = h.nodeIndex, l = h.node.rank;
  const std::vector<int>& mates = h.members[x];
  const bool inColumn = h.column.nranks > 0;

  // Scratch: what this column rank sends each other node (rows: sources of this node; its own
  // row stays unused, it goes from the send buffer), then what it hands on to each node mate of
  // its column (rows: sources on other nodes, in node order).
  size_t remoteSources = ctx.nranks - mates.size();
  size_t packBytes = 0;
  if (inColumn)
    for (int y = 0; y < lay.nodes(); ++y)
      if (y != x) packBytes += mates.size() * lay.destinationCount(y, l) * B;
  size_t handOn = inColumn ? lay.destinationCount(x, l) - 1 : 0;
  char* pack = h.scratchBytes(packBytes + handOn * remoteSources * B);
  char* forward = pack + packBytes;
  // Where the row of source index i for node y starts in the pack.
  auto packRow = [&](int y, size_t i) {
    size_t offset = 0;
    for (int m = 0; m < y; ++m)
      if (m != x) offset += mates.size() * lay.destinationCount(m, l) * B;
    return pack + offset + i * lay.destinationCount(y, l) * B;
  };
  // The hand-on row of node mate d (local index l + k*G, k >= 1): blocks from every remote
  // source, in node order.
  auto forwardRow = [&](int d) {
    size_t k = static_cast<size_t>(h.localIndex[d] / h.columns) - 1;
    return forward + k * remoteSources * B;
  };
  auto remoteSourceIndex = [&](int s) {
    size_t i = 0;
    for (int m = 0; m < lay.nodes(); ++m) {
      if (m == x) continue;
      if (m == h.nodeOf[s])
        return i + (std::lower_bound(h.members[m].begin(), h.members[m].end(), s) -
                    h.members[m].begin());
      i += h.members[m].size();
    }
    return i;
  };

  ctx.device->copy(recv + me * B, send + me * B, B);

  // 1. Node exchange.
  {
    Exchange ex(h.node);
    for (int t = 0; t < h.node.nranks; ++t) {
      if (t == l) continue;
      ex.begin(t, true);
      ex.block(send + mates[t] * B, B);
      if (t < h.columns)
        for (int y = 0; y < lay.nodes(); ++y)
          if (y != x) lay.destinations(y, t, [&](int d) { ex.block(send + d * B, B); });
      ex.begin(t, false);
      ex.block(recv + mates[t] * B, B);
      if (inColumn)
        for (int y = 0; y < lay.nodes(); ++y) {
          if (y == x) continue;
          char* row = packRow(y, t);
          for (size_t k = 0, n = lay.destinationCount(y, l); k < n; ++k) ex.block(row + k * B, B);
        }
    }
    ex.run();
  }

  // 2. Column exchange (the column is numbered by node).
  if (inColumn) {
    Exchange ex(h.column);
    for (int y = 0; y < lay.nodes(); ++y) {
      if (y == x) continue;
      ex.begin(y, true);
      for (size_t i = 0; i < mates.size(); ++i) {
        size_t k = 0;
        lay.destinations(y, l, [&](int d) {
          ex.block(mates[i] == me ? send + d * B : packRow(y, i) + k * B, B);
          ++k;
        });
      }
      ex.begin(y, false);
      for (int s : h.members[y])
        lay.destinations(x, l, [&](int d) {
          ex.block(d == me ? recv + s * B : forwardRow(d) + remoteSourceIndex(s) * B, B);
        });
    }
    ex.run();
  }

  // 3. Hand-on to the node mates without a column of their own.
  if (handOn == 0 && l < h.columns) return;
  Exchange ex(h.node);
  if (l < h.columns) {
    lay.destinations(x, l, [&](int d) {
      if (d == me) return;
      ex.begin(h.localIndex[d], true);
      for (size_t i = 0; i < remoteSources; ++i) ex.block(forwardRow(d) + i * B, B);
    });
  } else {
    ex.begin(lay.column(me), false);
    for (int m = 0; m < lay.nodes(); ++m)
      if (m != x)
        for (int s : h.members[m]) ex.block(recv + s * B, B);
  }
  ex.run();
}

}  // namespace

void registerHierarchicalAllToAllAlgorithms(std::vector<Algorithm>& out) {
  out.push_back({loomFuncAllToAll, "hierarchical", allToAllHierarchical, false});
}

}  // namespace loom
