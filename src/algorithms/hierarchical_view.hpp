// What the hierarchical algorithms share: this rank's place in the node/column picture
// (algorithms/context.hpp's Hierarchy), the pipeline chunks of a call, and the run function of
// the ones that are one schedule (broadcast and alltoall, whose node phases are operations over
// the node's pair channels). The inter-node phases are rings over a column's channels
// (algorithms/ring_steps.hpp). Allreduce, reduce, allgather and reduce-scatter run their node
// phases on the node's arena instead (node_phases.hpp) and overlap them with the column's
// schedule through AlongsideRun (context.hpp).
#pragma once

#include <algorithm>
#include <optional>
#include <vector>

#include "algorithms/context.hpp"
#include "algorithms/partition.hpp"

namespace loom {

struct HierView {
  const Hierarchy& h;
  int me;  // global rank
  int node() const { return h.nodeIndex; }
  int local() const { return h.localIndex[me]; }
  int columns() const { return h.columns; }
  int nodes() const { return static_cast<int>(h.members.size()); }
  const std::vector<int>& mates() const { return h.members[h.nodeIndex]; }
  int mateCount() const { return static_cast<int>(mates().size()); }
  bool inColumn() const { return local() < columns(); }
  // The column ring of this rank's local index, over the nodes in order.
  int columnRank(int node, int local) const { return h.members[node][local]; }
  int columnLeft() const { return columnRank((node() + nodes() - 1) % nodes(), local()); }
  int columnRight() const { return columnRank((node() + 1) % nodes(), local()); }
};

// Pipeline chunks of a hierarchical call of `count` elements: large calls are cut so that the
// node phases of one chunk run while the network carries another; each chunk is cut again into
// one slice per column.
inline size_t hierarchicalChunkElements(size_t count, size_t esize) {
  constexpr size_t kMinChunk = size_t{1} << 20, kMaxChunk = size_t{16} << 20;
  size_t bytes = count * esize / 8;
  bytes = bytes < kMinChunk ? kMinChunk : bytes > kMaxChunk ? kMaxChunk : bytes;
  return bytes / esize > 0 ? bytes / esize : 1;
}

// Pipeline chunks of the per-rank blocks of a hierarchical allgather or reduce-scatter (`count`
// elements a block): the node phase of one chunk of every block runs while the column carries
// another. Sized on the whole call, as the allreduce's are, and never under 256 KiB (or the
// block): a column hop of less moves at the network's latency, not its bandwidth, and buys less
// overlap than it costs (2x4 namespace nodes, allgather of 2-4 MiB in 128 KiB chunks: 1.15-1.3x
// the time of 256 KiB ones).
inline size_t hierarchicalBlockChunkBytes(size_t count, int nranks, size_t esize) {
  constexpr size_t kMinChunk = size_t{256} << 10;
  const size_t whole =
      hierarchicalChunkElements(count * static_cast<size_t>(nranks), esize) * esize;
  const size_t chunk = std::max(whole / static_cast<size_t>(nranks), kMinChunk);
  return std::max(chunk / esize, size_t{1}) * esize;
}

// Whether a hierarchical call's column moves on a thread of its own: only with a chunk to overlap
// (empty: as the context's LOOM_BESIDE_WAIT decides); one chunk runs its phases one after another
// in the calling thread.
inline std::optional<bool> besideOnThread(size_t chunks) {
  return chunks > 1 ? std::nullopt : std::optional<bool>(false);
}

// True when the ranks share one arena: runs the arena's algorithm instead (hierarchical.cpp).
bool hierarchicalOnOneNode(const AlgoContext& ctx, const CollArgs& a);

// The run function of a hierarchical algorithm: the arena's algorithm on one node, nothing for
// an empty call, else the schedule `Build` makes.
template <ScheduleFn Build>
void runHierarchical(const AlgoContext& ctx, const CollArgs& a) {
  if (hierarchicalOnOneNode(ctx, a) || a.count == 0) return;
  runSchedule(ctx, a, Build);
}

template <ScheduleFn Build>
Algorithm hierarchicalAlgorithm(loomFunc_t func) {
  Algorithm algo{func, "hierarchical", runHierarchical<Build>, false};
  algo.build = Build;
  return algo;
}

}  // namespace loom
