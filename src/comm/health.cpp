#include "comm/health.hpp"

#include <poll.h>
#include <signal.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>

#include "base/call_signature.hpp"

namespace loom {

namespace {

constexpr auto kPeerCheckInterval = std::chrono::milliseconds(5);

int openPidfd(int pid) {
#ifdef SYS_pidfd_open
  return static_cast<int>(syscall(SYS_pidfd_open, pid, 0));
#else
  (void)pid;
  return -1;
#endif
}

}  // namespace

Health::Health(int rank, int64_t timeoutMs, std::atomic<bool>* abortFlag)
    : rank_(rank),
      timeoutMs_(timeoutMs),
      aborted_(abortFlag != nullptr ? abortFlag : &ownAborted_),
      deadline_(Clock::now() + std::chrono::milliseconds(timeoutMs)) {}

Health::~Health() {
  for (int fd : pidfds_)
    if (fd >= 0) close(fd);
}

void Health::watch(const std::vector<RankInfo>& ranks, const NodeMap& nodes,
                   const ShmArena& arena) {
  ranks_ = &ranks;
  nodes_ = &nodes;
  arena_ = &arena;
  const int nranks = static_cast<int>(ranks.size());
  nextPeerCheckNs_ = std::vector<std::atomic<int64_t>>(nranks + 1);
  pidfds_.assign(nranks, -1);
  for (int peer : nodes.members(nodes.nodeOf(rank_))) {
    const bool samePidNamespace = ranks[peer].pidNamespace == ranks[rank_].pidNamespace;
    if (peer != rank_ && samePidNamespace) pidfds_[peer] = openPidfd(ranks[peer].pid);
  }
}

std::string Health::message() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return message_;
}

bool Health::record(const Error& error, std::string& reason) {
  bool first = false;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (error_.load() == loomSuccess) {
      message_ = error.what();
      error_.store(error.code());
      first = true;
    }
    reason = message_;
  }
  aborted_->store(true);
  return first;
}

void Health::throwIfAborted() const {
  if (!aborted_->load()) return;
  const loomResult_t code = error_.load();
  LOOM_THROW(code == loomSuccess ? loomInvalidUsage : code, "communicator is aborted: ", message());
}

void Health::throwPeerAbort() const {
  ArenaAbort info = arena_->abortInfo();
  // The arena holds one node's ranks: its slots are local indices.
  const std::vector<int>& members = nodes_->members(nodes_->nodeOf(rank_));
  const int who =
      info.rank >= 0 && info.rank < static_cast<int>(members.size()) ? members[info.rank] : -1;
  // A mismatch is every rank's misuse, and its message already names the ranks.
  if (info.code == loomInvalidUsage && info.reason.rfind(kMismatchMessage, 0) == 0)
    LOOM_THROW(loomInvalidUsage, info.reason, " (found by rank ", who, ")");
  LOOM_THROW(loomRemoteError, "rank ", who, " failed (", loomGetErrorString(info.code),
             "): ", info.reason);
}

std::optional<Error> Health::peerFailure() {
  try {
    if (peerAborted()) throwPeerAbort();
    for (int peer = 0; peer < static_cast<int>(pidfds_.size()); ++peer) checkPeer(peer);
  } catch (const Error& e) {
    return e;
  }
  return std::nullopt;
}

void Health::startClock() {
  const Clock::time_point now = Clock::now();
  deadline_ = now + std::chrono::milliseconds(timeoutMs_);
  const int64_t next = steadyNs(now + kPeerCheckInterval);
  for (std::atomic<int64_t>& peer : nextPeerCheckNs_) peer.store(next, std::memory_order_relaxed);
}

void Health::check(int peer, uint64_t call) {
  if (aborted_->load(std::memory_order_relaxed))
    LOOM_THROW(loomRemoteError, "communicator aborted: ", message());
  if (peerAborted()) throwPeerAbort();
  const Clock::time_point now = Clock::now();
  const int nranks = static_cast<int>(pidfds_.size());
  // One timer per peer: a wait that alternates between peers (the ring's two neighbours, a
  // group's sends and receives) still checks each of them.
  const size_t timer = peer >= 0 && peer < nranks ? peer + 1 : 0;
  if (timer < nextPeerCheckNs_.size()) {
    std::atomic<int64_t>& next = nextPeerCheckNs_[timer];
    if (steadyNs(now) >= next.load(std::memory_order_relaxed)) {
      next.store(steadyNs(now + kPeerCheckInterval), std::memory_order_relaxed);
      checkPeer(peer);
    }
  }
  if (now < deadline_) return;
  if (describeTimeout_) LOOM_THROW(loomTimeout, describeTimeout_(peer));
  // The peer the wait was for: a rank that never called this collective, or is stuck.
  std::string whom = "peers";
  if (peer >= 0 && peer < nranks)
    whom = "rank " + std::to_string(peer) + " (pid " + std::to_string((*ranks_)[peer].pid) +
           " on " + (*ranks_)[peer].hostname + ")";
  LOOM_THROW(loomTimeout, "timed out after ", timeoutMs_ / 1000.0, " s in collective #", call,
             " waiting for ", whom,
             ", which has not reached this collective or is stuck (LOOM_TIMEOUT / config "
             "timeoutMs)");
}

void Health::checkAlive(int peer) {
  if (aborted_->load(std::memory_order_relaxed))
    LOOM_THROW(loomRemoteError, "communicator aborted: ", message());
  if (peerAborted()) throwPeerAbort();
  checkPeer(peer);
}

void Health::checkPeer(int peer) {
  if (ranks_ == nullptr || peer < 0 || peer >= static_cast<int>(pidfds_.size())) return;
  if (peer == rank_ || !nodes_->sameNode(peer, rank_)) return;
  // A peer in another PID namespace (containers sharing only network and IPC) has a pid that
  // means nothing here: its death shows as the abort word or the deadline instead.
  const std::vector<RankInfo>& ranks = *ranks_;
  if (ranks[peer].pidNamespace != ranks[rank_].pidNamespace) return;
  const int fd = pidfds_[peer];
  bool gone = false;
  if (fd >= 0) {
    pollfd p{fd, POLLIN, 0};
    gone = poll(&p, 1, 0) > 0;
  } else {
    gone = kill(ranks[peer].pid, 0) != 0 && errno == ESRCH;
  }
  if (gone)
    LOOM_THROW(loomRemoteError, "rank ", peer, " (pid ", ranks[peer].pid, " on ",
               ranks[peer].hostname, ") exited while this rank waited for it");
}

}  // namespace loom
