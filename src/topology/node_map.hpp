// Which ranks share a node, computed from the host identities every rank reports at init (never
// from rank arithmetic: ranks of a node need not be contiguous and nodes need not be the same
// size). Nodes are numbered by their lowest rank, so node 0 holds rank 0; the lowest rank of a
// node is its leader.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "topology/rank_info.hpp"

namespace loom {

class NodeMap {
 public:
  NodeMap() = default;
  static NodeMap fromHostIds(const std::vector<std::string>& hostIds);
  static NodeMap compute(const std::vector<RankInfo>& ranks);

  int nranks() const { return static_cast<int>(nodeOf_.size()); }
  int nodeCount() const { return static_cast<int>(members_.size()); }
  int nodeOf(int rank) const { return nodeOf_[rank]; }
  // Position of the rank among its node's ranks (ascending rank order).
  int localIndex(int rank) const { return localIndex_[rank]; }
  int localSize(int rank) const { return nodeSize(nodeOf_[rank]); }
  int nodeSize(int node) const { return static_cast<int>(members_[node].size()); }
  int maxNodeSize() const;
  // Ranks of a node, ascending.
  const std::vector<int>& members(int node) const { return members_[node]; }
  int leader(int node) const { return members_[node].front(); }
  bool isLeader(int rank) const { return localIndex_[rank] == 0; }
  std::vector<int> leaders() const;
  // The ranks with this local index, one per node that has that many ranks, in node order: the
  // inter-node groups of the hierarchical algorithms.
  std::vector<int> ranksWithLocalIndex(int localIndex) const;
  bool sameNode(int a, int b) const { return nodeOf_[a] == nodeOf_[b]; }
  bool singleNode() const { return members_.size() <= 1; }

  // "2 nodes: node 0 (leader 0) ranks 0,2; node 1 (leader 1) ranks 1"
  std::string describe() const;

 private:
  std::vector<int> nodeOf_;
  std::vector<int> localIndex_;
  std::vector<std::vector<int>> members_;
};

// Launchers' idea of the node size (LOCAL_WORLD_SIZE, OMPI_COMM_WORLD_LOCAL_SIZE), if set.
std::optional<int> launcherLocalSize();
// Why the launcher's local size disagrees with the discovered one for `rank`, or "" if it agrees
// (or there is none). Meaningful for the world communicator only: a split child's nodes are
// subsets of the launcher's.
std::string localSizeMismatch(const NodeMap& nodes, int rank, std::optional<int> launcherSize);

}  // namespace loom
