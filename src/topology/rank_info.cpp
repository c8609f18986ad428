#include "topology/rank_info.hpp"

#include <sys/stat.h>
#include <unistd.h>

#include <fstream>
#include <sstream>

#include "base/env.hpp"
#include "base/error.hpp"

namespace loom {

namespace {

constexpr char kNodeIdMark[] = "/node=";

std::string machineOf(const std::string& hostId) {
  return hostId.substr(0, hostId.find(kNodeIdMark));
}

std::string readFirstLine(const char* path) {
  std::ifstream in(path);
  std::string line;
  std::getline(in, line);
  return line;
}

// Two network namespaces on one machine are two nodes to Loom (that is how tests simulate hosts),
// so the namespace inode is part of the identity. LOOM_NODE_ID splits one namespace further, for
// tests of the multi-node paths where namespaces cannot be created.
std::string hostIdentity(const std::string& hostname) {
  struct stat st {};
  unsigned long netns = stat("/proc/self/ns/net", &st) == 0 ? st.st_ino : 0;
  std::string id = hostname + "/" + readFirstLine("/proc/sys/kernel/random/boot_id") + "/" +
                   std::to_string(netns);
  std::string fakeNode = env::nodeId();
  return fakeNode.empty() ? id : id + kNodeIdMark + fakeNode;
}

void putString(std::ostringstream& out, const std::string& s) { out << s.size() << ':' << s; }

std::string getString(std::istringstream& in) {
  size_t n = 0;
  char colon = 0;
  if (!(in >> n) || !in.get(colon) || colon != ':' || n > 4096)
    LOOM_THROW(loomInternalError, "malformed rank info");
  std::string s(n, '\0');
  if (!in.read(s.data(), static_cast<std::streamsize>(n)))
    LOOM_THROW(loomInternalError, "truncated rank info");
  return s;
}

}  // namespace

RankInfo RankInfo::local(int rank, const Device& device, const std::string& clusterSplit) {
  RankInfo info;
  info.rank = rank;
  info.pid = getpid();
  char host[256] = {0};
  gethostname(host, sizeof(host) - 1);
  info.hostname = host;
  info.hostId = hostIdentity(info.hostname);
  struct stat st {};
  info.pidNamespace = stat("/proc/self/ns/pid", &st) == 0 ? st.st_ino : 0;
  const DeviceIdentity& id = device.identity();
  info.deviceKind = id.kind;
  info.vendor = id.vendor;
  info.deviceName = id.model;
  info.deviceIndex = id.index;
  info.busId = id.busId;
  info.clusterSplit = clusterSplit;
  return info;
}

std::string RankInfo::serialize() const {
  std::ostringstream out;
  out << "loomrank4 " << rank << ' ' << pid << ' ' << pidNamespace << ' ' << deviceIndex << ' ';
  putString(out, deviceKind);
  putString(out, hostname);
  putString(out, hostId);
  putString(out, vendor);
  putString(out, deviceName);
  putString(out, busId);
  putString(out, clusterSplit);
  return out.str();
}

RankInfo RankInfo::deserialize(const std::string& bytes) {
  std::istringstream in(bytes);
  std::string tag;
  RankInfo info;
  char space = 0;
  if (!(in >> tag) || tag != "loomrank4" ||
      !(in >> info.rank >> info.pid >> info.pidNamespace >> info.deviceIndex) || !in.get(space))
    LOOM_THROW(loomInternalError, "malformed rank info (different Loom versions across ranks?)");
  info.deviceKind = getString(in);
  info.hostname = getString(in);
  info.hostId = getString(in);
  info.vendor = getString(in);
  info.deviceName = getString(in);
  info.busId = getString(in);
  info.clusterSplit = getString(in);
  return info;
}

std::vector<int> processNumbers(const std::vector<RankInfo>& ranks) {
  std::vector<int> number(ranks.size(), -1);
  int next = 0;
  for (size_t r = 0; r < ranks.size(); ++r) {
    if (number[r] >= 0) continue;
    number[r] = next;
    for (size_t q = r + 1; q < ranks.size(); ++q)
      if (ranks[q].pid == ranks[r].pid && ranks[q].pidNamespace == ranks[r].pidNamespace &&
          ranks[q].hostId == ranks[r].hostId)
        number[q] = next;
    ++next;
  }
  return number;
}

bool allOnOneHost(const std::vector<RankInfo>& ranks) {
  for (const RankInfo& r : ranks)
    if (r.hostId != ranks.front().hostId) return false;
  return true;
}

}  // namespace loom

namespace loom {

bool allOnOneMachine(const std::vector<RankInfo>& ranks) {
  for (const RankInfo& r : ranks)
    if (machineOf(r.hostId) != machineOf(ranks.front().hostId)) return false;
  return true;
}

}  // namespace loom
