#include "topology/node_map.hpp"

#include <algorithm>
#include <sstream>

#include "base/env.hpp"
#include "base/error.hpp"

namespace loom {

NodeMap NodeMap::fromHostIds(const std::vector<std::string>& hostIds) {
  NodeMap map;
  const int n = static_cast<int>(hostIds.size());
  map.nodeOf_.assign(n, -1);
  map.localIndex_.assign(n, -1);
  std::vector<std::string> nodeIds;
  for (int r = 0; r < n; ++r) {
    // Few nodes per communicator in practice; a linear search keeps the order of first appearance.
    auto it = std::find(nodeIds.begin(), nodeIds.end(), hostIds[r]);
    int node = static_cast<int>(it - nodeIds.begin());
    if (it == nodeIds.end()) {
      nodeIds.push_back(hostIds[r]);
      map.members_.emplace_back();
    }
    map.nodeOf_[r] = node;
    map.localIndex_[r] = static_cast<int>(map.members_[node].size());
    map.members_[node].push_back(r);
  }
  return map;
}

NodeMap NodeMap::compute(const std::vector<RankInfo>& ranks) {
  std::vector<std::string> ids;
  ids.reserve(ranks.size());
  for (const RankInfo& r : ranks) ids.push_back(r.hostId);
  return fromHostIds(ids);
}

int NodeMap::maxNodeSize() const {
  size_t most = 0;
  for (const auto& m : members_) most = std::max(most, m.size());
  return static_cast<int>(most);
}

std::vector<int> NodeMap::leaders() const {
  std::vector<int> out;
  for (const auto& m : members_) out.push_back(m.front());
  return out;
}

std::vector<int> NodeMap::ranksWithLocalIndex(int localIndex) const {
  std::vector<int> out;
  for (const auto& m : members_)
    if (localIndex >= 0 && localIndex < static_cast<int>(m.size())) out.push_back(m[localIndex]);
  return out;
}

std::string NodeMap::describe() const {
  std::ostringstream out;
  out << members_.size() << (members_.size() == 1 ? " node:" : " nodes:");
  for (size_t node = 0; node < members_.size(); ++node) {
    out << (node == 0 ? " " : "; ") << "node " << node << " (leader " << members_[node].front()
        << ") ranks ";
    for (size_t i = 0; i < members_[node].size(); ++i)
      out << (i == 0 ? "" : ",") << members_[node][i];
  }
  return out.str();
}

std::optional<int> launcherLocalSize() {
  for (const char* name :
       {"LOCAL_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_SIZE", "SLURM_NTASKS_PER_NODE"}) {
    // A launcher's variable that does not parse is no reason to fail init: it is only a hint.
    auto value = env::get(name);
    if (!value) continue;
    try {
      int64_t size = env::getInt(name, 0);
      if (size > 0) return static_cast<int>(size);
    } catch (const Error&) {
    }
  }
  return std::nullopt;
}

std::string localSizeMismatch(const NodeMap& nodes, int rank, std::optional<int> launcherSize) {
  if (!launcherSize || *launcherSize == nodes.localSize(rank)) return "";
  std::ostringstream out;
  out << "the launcher says this node runs " << *launcherSize
      << " ranks (LOCAL_WORLD_SIZE / OMPI_COMM_WORLD_LOCAL_SIZE) but " << nodes.localSize(rank)
      << " ranks report this host's identity; Loom follows the host identities ("
      << nodes.describe() << ")";
  return out.str();
}

}  // namespace loom
