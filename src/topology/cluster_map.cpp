#include "topology/cluster_map.hpp"

#include <sstream>

#include "base/error.hpp"

namespace loom {

namespace {

int parseRank(const std::string& text, const std::string& spec, int nranks) {
  size_t used = 0;
  int value = -1;
  try {
    value = std::stoi(text, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  LOOM_CHECK_ARG(used == text.size() && !text.empty() && value >= 0 && value < nranks,
                 "LOOM_CLUSTER_SPLIT='", spec, "': '", text, "' is not a rank of ", nranks);
  return value;
}

std::vector<std::string> splitOn(const std::string& s, char sep) {
  std::vector<std::string> parts;
  std::string part;
  std::istringstream in(s);
  while (std::getline(in, part, sep)) parts.push_back(part);
  if (!s.empty() && s.back() == sep) parts.emplace_back();
  return parts;
}

}  // namespace

std::vector<int> parseClusterSplit(const std::string& spec, int nranks) {
  std::vector<int> group(nranks, 0);
  if (spec.empty()) return group;
  if (spec.find(';') == std::string::npos) {
    // Block sizes in rank order.
    int next = 0, index = 0;
    for (const std::string& part : splitOn(spec, ',')) {
      int size = parseRank(part, spec, nranks + 1);
      LOOM_CHECK_ARG(size > 0 && next + size <= nranks, "LOOM_CLUSTER_SPLIT='", spec,
                     "': block sizes must be positive and add up to the communicator's ", nranks,
                     " ranks");
      for (int r = next; r < next + size; ++r) group[r] = index;
      next += size;
      ++index;
    }
    LOOM_CHECK_ARG(next == nranks, "LOOM_CLUSTER_SPLIT='", spec, "': block sizes add up to ", next,
                   ", not to the communicator's ", nranks, " ranks");
    return group;
  }
  group.assign(nranks, -1);
  int index = 0;
  for (const std::string& set : splitOn(spec, ';')) {
    LOOM_CHECK_ARG(!set.empty(), "LOOM_CLUSTER_SPLIT='", spec, "': an empty rank set");
    for (const std::string& item : splitOn(set, ',')) {
      size_t dash = item.find('-');
      int first = parseRank(item.substr(0, dash), spec, nranks);
      int last = dash == std::string::npos ? first : parseRank(item.substr(dash + 1), spec, nranks);
      LOOM_CHECK_ARG(first <= last, "LOOM_CLUSTER_SPLIT='", spec, "': range '", item, "' is empty");
      for (int r = first; r <= last; ++r) {
        LOOM_CHECK_ARG(group[r] < 0, "LOOM_CLUSTER_SPLIT='", spec, "': rank ", r,
                       " is in two sets");
        group[r] = index;
      }
    }
    ++index;
  }
  for (int r = 0; r < nranks; ++r)
    LOOM_CHECK_ARG(group[r] >= 0, "LOOM_CLUSTER_SPLIT='", spec, "': rank ", r,
                   " is in no set (every rank of the ", nranks, " must be in one)");
  return group;
}

ClusterMap ClusterMap::compute(const std::vector<RankInfo>& ranks, const std::string& splitSpec) {
  const int n = static_cast<int>(ranks.size());
  std::vector<int> group = parseClusterSplit(splitSpec, n);
  ClusterMap map;
  map.clusterOf_.assign(n, -1);
  map.localIndex_.assign(n, -1);
  std::vector<std::pair<int, std::string>> keys;  // (split group, kind) of each cluster
  for (int r = 0; r < n; ++r) {
    std::pair<int, std::string> key{group[r], ranks[r].deviceKind};
    int cluster = 0;
    while (cluster < static_cast<int>(keys.size()) && keys[cluster] != key) ++cluster;
    if (cluster == static_cast<int>(keys.size())) {
      keys.push_back(key);
      map.members_.emplace_back();
      map.kinds_.push_back(key.second);
    }
    map.clusterOf_[r] = cluster;
    map.localIndex_[r] = static_cast<int>(map.members_[cluster].size());
    map.members_[cluster].push_back(r);
  }
  return map;
}

std::string ClusterMap::describe() const {
  std::ostringstream out;
  out << members_.size() << (members_.size() == 1 ? " cluster:" : " clusters:");
  for (size_t c = 0; c < members_.size(); ++c) {
    out << (c == 0 ? " " : "; ") << "cluster " << c << " (" << kinds_[c] << ") ranks ";
    for (size_t i = 0; i < members_[c].size(); ++i) out << (i ? "," : "") << members_[c][i];
  }
  return out.str();
}

}  // namespace loom
