// What the hierarchical algorithms share: this rank's place in the node/column picture
// (algorithms/context.hpp's Hierarchy), the pipeline chunks of a call, and the run function of
// the ones that are one schedule (broadcast and alltoall, whose node phases are operations over
// the node's pair channels). The inter-node phases are rings over a column's channels
// (algorithms/ring_steps.hpp). Allreduce, reduce, allgather and reduce-scatter run their node
// phases on the node's arena instead (node_phases.hpp) and overlap them with the column's
// schedule through AlongsideRun (context.hpp).
#pragma once

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
