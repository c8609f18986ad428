#include "flight_report.hpp"

#include <dirent.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <stdexcept>
#include <vector>

#include "json_reader.hpp"
#include "status_client.hpp"

namespace loom::tool {

namespace {

struct Call {
  uint64_t seq = 0;
  std::string kind, op, dtype, redop, state, algorithm;
  int64_t count = 0, bytes = 0, root = -1, peer = -1, tag = 0, waitingFor = -1;
  int64_t startedNs = 0, endedNs = 0;
  int result = 0;
  bool collective() const { return kind == "collective"; }
  bool open() const { return state == "queued" || state == "started"; }
  // What must agree across ranks for the call to meet.
  std::string signature() const {
    std::string s = op + "(count=" + std::to_string(count) + ", " + dtype;
    if (!redop.empty()) s += ", " + redop;
    if (root >= 0) s += ", root=" + std::to_string(root);
    return s + ")";
  }
};

struct RankRecord {
  int rank = 0;
  std::string host, reason;
  int64_t pid = 0, dumpedNs = 0, realtimeOffsetNs = 0;
  uint64_t lastEntered = 0, lastFinished = 0;
  std::vector<Call> calls;
  const Call* collective(uint64_t seq) const {
    for (auto it = calls.rbegin(); it != calls.rend(); ++it)
      if (it->collective() && it->seq == seq) return &*it;
    return nullptr;
  }
};

struct Communicator {
  std::string job, name;
  int nranks = 0;
  std::map<int, RankRecord> ranks;
};

std::string readFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

Call readCall(const Json& j) {
  Call c;
  c.seq = static_cast<uint64_t>(j["seq"].integer());
  c.kind = j["kind"].str();
  c.op = j["op"].str();
  c.dtype = j["dtype"].str();
  c.redop = j["redop"].str();
  c.state = j["state"].str();
  c.algorithm = j["algorithm"].str();
  c.count = j["count"].integer();
  c.bytes = j["bytes"].integer();
  c.root = j.has("root") ? j["root"].integer() : -1;
  c.peer = j.has("peer") ? j["peer"].integer() : -1;
  c.tag = j["tag"].integer();
  c.waitingFor = j.has("waiting_for") ? j["waiting_for"].integer() : -1;
  c.startedNs = j["started_ns"].integer();
  c.endedNs = j["ended_ns"].integer();
  c.result = static_cast<int>(j["result"].integer());
  return c;
}

std::map<std::string, Communicator> readRecords(const std::string& dir) {
  DIR* d = ::opendir(dir.c_str());
  if (d == nullptr) throw std::runtime_error("cannot read the directory " + dir);
  std::map<std::string, Communicator> comms;
  while (dirent* entry = ::readdir(d)) {
    const std::string name = entry->d_name;
    if (name.rfind("loom-flight-", 0) != 0 || name.size() < 5 ||
        name.compare(name.size() - 5, 5, ".json") != 0)
      continue;
    Json doc;
    try {
      doc = Json::parse(readFile(dir + "/" + name));
    } catch (const std::exception& e) {
      std::fprintf(stderr, "loom-info: skipping %s: %s\n", name.c_str(), e.what());
      continue;
    }
    Communicator& comm = comms[doc["job"].str()];
    comm.job = doc["job"].str();
    comm.name = doc["comm"].str();
    comm.nranks = static_cast<int>(doc["nranks"].integer());
    RankRecord r;
    r.rank = static_cast<int>(doc["rank"].integer());
    r.host = doc["host"].str();
    r.pid = doc["pid"].integer();
    r.reason = doc["reason"].str();
    r.dumpedNs = doc["dumped_ns"].integer();
    r.realtimeOffsetNs = doc["realtime_offset_ns"].integer();
    r.lastEntered = static_cast<uint64_t>(doc["last_entered"].integer());
    r.lastFinished = static_cast<uint64_t>(doc["last_finished"].integer());
    for (const Json& c : doc["calls"].items()) r.calls.push_back(readCall(c));
    comm.ranks[r.rank] = std::move(r);
  }
  ::closedir(d);
  if (comms.empty()) throw std::runtime_error("no flight record (loom-flight-*.json) in " + dir);
  return comms;
}

std::string rankList(const std::vector<int>& ranks) {
  std::string out;
  for (size_t i = 0; i < ranks.size(); ++i) {
    // Runs of consecutive ranks as a range: "0-5, 7".
    size_t j = i;
    while (j + 1 < ranks.size() && ranks[j + 1] == ranks[j] + 1) ++j;
    // Appended piece by piece: GCC 12 warns falsely (-Wrestrict) on "literal" + std::string.
    out.append(out.empty() ? "" : ", ").append(std::to_string(ranks[i]));
    if (j > i + 1) out.append("-").append(std::to_string(ranks[j]));
    if (j == i + 1) out.append(", ").append(std::to_string(ranks[j]));
    i = j;
  }
  return out;
}

std::string plural(const std::vector<int>& ranks) {
  std::string text = ranks.size() == 1 ? "rank " : "ranks ";
  return text.append(rankList(ranks));
}

// Follows "waits for" from rank `from` until a rank that waits for nobody known, or a cycle.
int culpritFrom(int from, const std::map<int, int>& waitsFor) {
  std::set<int> seen;
  int at = from;
  while (waitsFor.count(at) > 0 && seen.insert(at).second) at = waitsFor.at(at);
  return at;
}

// "Communicator ...: records of ranks ...; the last call every recorded rank finished is #N."
// Returns N (0: none).
uint64_t describeRecorded(std::ostringstream& out, const Communicator& comm) {
  std::vector<int> present, missing;
  for (int r = 0; r < comm.nranks; ++r) (comm.ranks.count(r) ? present : missing).push_back(r);
  out << "Communicator " << (comm.name.empty() ? "" : "'" + comm.name + "' ") << "(id " << comm.job
      << ", " << comm.nranks << " ranks): records of " << plural(present);
  if (!missing.empty())
    out << "; " << plural(missing) << " left none (dead, stopped, on a host that wrote elsewhere, "
        << "or never failed)";
  out << ". ";
  uint64_t allFinished = UINT64_MAX;
  for (const auto& [rank, r] : comm.ranks) allFinished = std::min(allFinished, r.lastFinished);
  if (allFinished == 0 || allFinished == UINT64_MAX) {
    out << "No collective was finished by every recorded rank. ";
    return 0;
  }
  const Call* c = comm.ranks.begin()->second.collective(allFinished);
  out << "The last call every recorded rank finished is #" << allFinished;
  if (c != nullptr) out << " (" << c->signature() << ")";
  out << ". ";
  return allFinished;
}

// What the recorded ranks did in call `next`: who entered it with which call, who never did,
// whom each waits for.
struct NextCall {
  std::map<std::string, std::vector<int>> bySignature;
  std::vector<int> notEntered;
  std::map<int, int> waitsFor;
  int64_t longest = 0;  // the longest wait in it
};

NextCall readNextCall(const Communicator& comm, uint64_t next) {
  NextCall call;
  for (const auto& [rank, r] : comm.ranks) {
    const Call* c = r.collective(next);
    if (c == nullptr) {
      if (r.lastEntered < next) call.notEntered.push_back(rank);
      continue;
    }
    call.bySignature[c->signature()].push_back(rank);
    if (c->state != "done" && c->waitingFor >= 0 && c->waitingFor != rank)
      call.waitsFor[rank] = static_cast<int>(c->waitingFor);
    if (c->state != "done")
      call.longest = std::max(call.longest, (c->endedNs ? c->endedNs : r.dumpedNs) - c->startedNs);
  }
  return call;
}

void describeEntered(std::ostringstream& out, const Communicator& comm, const NextCall& call,
                     uint64_t next) {
  if (!call.bySignature.empty()) {
    out << "Call #" << next << ": ";
    // Groups in the order of their first rank.
    std::vector<std::pair<std::vector<int>, std::string>> groups;
    for (const auto& [signature, ranks] : call.bySignature) groups.emplace_back(ranks, signature);
    std::sort(groups.begin(), groups.end());
    bool first = true;
    for (const auto& [ranks, signature] : groups) {
      out << (first ? "" : "; ") << plural(ranks) << " entered " << signature;
      first = false;
    }
    if (call.bySignature.size() > 1) out << " (they differ: these calls can never meet)";
    if (call.longest > 0) out << ", and waited in it up to " << secondsText(call.longest);
    out << ". ";
  }
  if (!call.notEntered.empty()) {
    out << plural(call.notEntered) << " never entered call #" << next;
    const RankRecord& r = comm.ranks.at(call.notEntered.front());
    if (call.notEntered.size() == 1 && r.lastEntered > 0)
      out << " (its last call is #" << r.lastEntered << ")";
    out << ". ";
  }
}

void describeWaits(std::ostringstream& out, const Communicator& comm, const NextCall& call,
                   uint64_t next) {
  if (call.waitsFor.empty()) return;
  out << "Waiting: ";
  bool first = true;
  for (const auto& [rank, peer] : call.waitsFor) {
    out << (first ? "" : ", ") << "rank " << rank << " for rank " << peer;
    first = false;
  }
  out << ". ";
  std::set<int> culprits;
  for (const auto& [rank, peer] : call.waitsFor) culprits.insert(culpritFrom(rank, call.waitsFor));
  std::vector<int> named(culprits.begin(), culprits.end());
  out << "The wait ends at " << plural(named);
  for (int c : named) {
    if (comm.ranks.count(c) == 0) {
      out << " (no record: it died or is stopped; see its process)";
    } else if (std::find(call.notEntered.begin(), call.notEntered.end(), c) !=
               call.notEntered.end()) {
      out << " (it never entered #" << next << ")";
    }
  }
  out << ". ";
}

// Sends and receives left open, and the first failure (by wall-clock time of the dumps).
void describeOpenAndFirst(std::ostringstream& out, const Communicator& comm) {
  for (const auto& [rank, r] : comm.ranks) {
    for (const Call& c : r.calls) {
      if (c.collective() || c.state == "done") continue;
      out << "Rank " << rank << "'s " << c.kind << (c.kind == "send" ? " to " : " from ")
          << (c.peer == -2 ? std::string("any rank") : "rank " + std::to_string(c.peer)) << " (tag "
          << c.tag << ", " << c.bytes << " bytes) is " << c.state << ". ";
    }
  }
  const RankRecord* firstFailed = nullptr;
  for (const auto& [rank, r] : comm.ranks)
    if (firstFailed == nullptr ||
        r.dumpedNs + r.realtimeOffsetNs < firstFailed->dumpedNs + firstFailed->realtimeOffsetNs)
      firstFailed = &r;
  if (firstFailed != nullptr && !firstFailed->reason.empty())
    out << "First record: rank " << firstFailed->rank << " (" << firstFailed->host << ", pid "
        << firstFailed->pid << "): " << firstFailed->reason;
}

// -v: every rank's last 8 calls.
void describeLastCalls(std::ostringstream& out, const Communicator& comm) {
  for (const auto& [rank, r] : comm.ranks) {
    out << "  rank " << rank << " (" << r.host << ", pid " << r.pid << "), last entered #"
        << r.lastEntered << ", last finished #" << r.lastFinished << ":\n";
    const size_t from = r.calls.size() > 8 ? r.calls.size() - 8 : 0;
    for (size_t i = from; i < r.calls.size(); ++i) {
      const Call& c = r.calls[i];
      out << "    ";
      if (c.collective())
        out << "#" << c.seq << " " << c.signature();
      else
        out << c.kind << " peer " << c.peer;
      out << " " << c.state;
      if (!c.algorithm.empty()) out << " via " << c.algorithm;
      if (c.waitingFor >= 0 && c.state != "done") out << ", waiting for rank " << c.waitingFor;
      out << "\n";
    }
  }
}

void describeCommunicator(std::ostringstream& out, const Communicator& comm, bool verbose) {
  const uint64_t next = describeRecorded(out, comm) + 1;
  const NextCall call = readNextCall(comm, next);
  describeEntered(out, comm, call, next);
  describeWaits(out, comm, call, next);
  describeOpenAndFirst(out, comm);
  out << "\n";
  if (verbose) describeLastCalls(out, comm);
}

}  // namespace

std::string flightReport(const std::string& dir, bool verbose) {
  std::ostringstream out;
  for (const auto& [job, comm] : readRecords(dir)) describeCommunicator(out, comm, verbose);
  return out.str();
}

}  // namespace loom::tool
