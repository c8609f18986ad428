// What every rank tells the others at init: who it is and where (host identity, process, device).
// Carries device kind, vendor and index from the start so that GPU ranks and heterogeneous
// communicators can group ranks without changing the exchange.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "device/device.hpp"

namespace loom {

struct RankInfo {
  int rank = 0;
  int pid = 0;
  std::string hostname;
  std::string hostId;         // hostname + boot id + network namespace: equal only on the same node
  uint64_t pidNamespace = 0;  // pids of ranks in different PID namespaces cannot be compared
  std::string deviceKind = "cpu";  // the backend's kind: "cpu", "cuda", a plug-in's
  std::string vendor;
  std::string deviceName;
  int deviceIndex = -1;
  std::string busId;  // PCI bus id of a GPU ("0000:19:00.0"); empty for the host CPU
  // LOOM_CLUSTER_SPLIT as this rank read it: every rank must have read the same
  // (topology/cluster_map.hpp), and this way none waits in an exchange the others skip.
  std::string clusterSplit;

  static RankInfo local(int rank, const Device& device, const std::string& clusterSplit = "");
  std::string serialize() const;
  static RankInfo deserialize(const std::string& bytes);  // throws loomInternalError if malformed
};

// Per rank, the number of its process: ranks with equal numbers run in one process (same host
// identity, PID namespace and pid), numbered in order of their lowest rank.
std::vector<int> processNumbers(const std::vector<RankInfo>& ranks);

// True when every rank reports the same host identity.
bool allOnOneHost(const std::vector<RankInfo>& ranks);
// True when every rank runs in this machine's network namespace, whatever LOOM_NODE_ID says: the
// ranks can reach each other over loopback.
bool allOnOneMachine(const std::vector<RankInfo>& ranks);

}  // namespace loom
