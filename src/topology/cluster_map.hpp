// Which ranks form a cluster: ranks whose devices are of one kind (cpu, cuda, a plug-in's), in
// any placement (global ranks need not be contiguous, clusters need not be the same size or on
// one host). A cluster is what one backend's own collectives can serve; a communicator with more
// than one cluster is heterogeneous and joins its clusters through host memory (comm/).
//
// LOOM_CLUSTER_SPLIT splits further on purpose, so the heterogeneous path can be tested on one
// kind of hardware:
//   "2,3"        block sizes in rank order (they must add up to the communicator's size); a
//                cluster is a block's ranks of one kind.
//   "0,2;1,3-4"  rank sets separated by ';' (every rank in exactly one; "a-b" is a range); a
//                cluster is a set's ranks of one kind.
// Clusters are numbered by their lowest rank, so cluster 0 holds rank 0.
#pragma once

#include <string>
#include <vector>

#include "topology/rank_info.hpp"

namespace loom {

class ClusterMap {
 public:
  ClusterMap() = default;
  // Throws loomInvalidArgument for a split spec that does not describe `ranks`.
  static ClusterMap compute(const std::vector<RankInfo>& ranks, const std::string& splitSpec);

  int nranks() const { return static_cast<int>(clusterOf_.size()); }
  int count() const { return static_cast<int>(members_.size()); }
  bool heterogeneous() const { return members_.size() > 1; }
  int clusterOf(int rank) const { return clusterOf_[rank]; }
  int localIndex(int rank) const { return localIndex_[rank]; }
  const std::vector<int>& members(int cluster) const { return members_[cluster]; }
  int size(int cluster) const { return static_cast<int>(members_[cluster].size()); }
  int leader(int cluster) const { return members_[cluster].front(); }
  const std::string& kind(int cluster) const { return kinds_[cluster]; }

  // "2 clusters: cluster 0 (cuda) ranks 0; cluster 1 (cpu) ranks 1,2,3"
  std::string describe() const;

 private:
  std::vector<int> clusterOf_, localIndex_;
  std::vector<std::vector<int>> members_;
  std::vector<std::string> kinds_;
};

// The split groups of `spec` for `nranks` ranks: group index per rank (all 0 for an empty spec).
// Throws loomInvalidArgument naming what is wrong.
std::vector<int> parseClusterSplit(const std::string& spec, int nranks);

}  // namespace loom
