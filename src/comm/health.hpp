// A communicator's health: whether it failed and why (the first failure; loomCommGetAsyncError),
// the deadline of the operation in progress (one clock: every wait of the communicator's calls
// checks it), and whether the peers a wait needs are alive (a pidfd per peer of this host and PID
// namespace, closed with the communicator; the node's arena abort word for peers that failed).
//
// Peers on other nodes: their death or failure shows on the network channels the wait uses (EOF,
// reset: a failing rank shuts its connections down). Not the control plane: a peer that got all
// it needed and destroyed its communicator closes that too, and is no failure.
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "base/error.hpp"
#include "base/wait.hpp"
#include "topology/node_map.hpp"
#include "topology/rank_info.hpp"
#include "transport/shm/shm_arena.hpp"

namespace loom {

class Health {
 public:
  // abortFlag: where the aborted state lives if not here (the C handle's, so that a destroy can
  // stop a non-blocking initialization still inside the constructor).
  Health(int rank, int64_t timeoutMs, std::atomic<bool>* abortFlag);
  ~Health();
  Health(const Health&) = delete;
  Health& operator=(const Health&) = delete;

  // Once the ranks and this node's arena are known (the peers it can watch).
  void watch(const std::vector<RankInfo>& ranks, const NodeMap& nodes, const ShmArena& arena);

  std::atomic<bool>* abortFlag() { return aborted_; }
  bool aborted() const { return aborted_->load(); }
  loomResult_t error() const { return error_.load(); }
  const std::atomic<loomResult_t>& errorWord() const { return error_; }  // for FlightScope
  std::string message() const;
  // Records `error` if it is the communicator's first failure and marks it aborted. Returns true
  // for the first; `reason` is what the peers are told (the first failure's message: a later one
  // may be its echo, a wait that an abort on another thread ended says only "aborted").
  bool record(const Error& error, std::string& reason);

  // Throws if the communicator was aborted (the first failure's code).
  void throwIfAborted() const;
  // The node's arena says a peer failed (its abort word).
  bool peerAborted() const { return arena_ != nullptr && arena_->aborted(); }
  [[noreturn]] void throwPeerAbort() const;
  // The first dead peer or the arena's failure, if any (for a native engine's watchdog).
  std::optional<Error> peerFailure();

  int64_t timeoutMs() const { return timeoutMs_; }
  // A call starts: its deadline and peer timers from now.
  void startClock();
  // When the last startClock() ran, in steadyNowNs() (the flight recorder's start of the call:
  // one read of the clock less a call), from the deadline it set.
  int64_t clockStartedNs() const {
    return steadyNs(deadline_ - std::chrono::milliseconds(timeoutMs_));
  }
  // Throws when a wait must give up: the communicator was aborted, the deadline passed (naming
  // `peer`, the rank waited for, and call number `call`), or `peer` (-1: none) is gone.
  void check(int peer, uint64_t call);
  // check() without the deadline and the peer timers (the point-to-point engine keeps its own
  // ticket deadlines from this clock's timeout).
  void checkAlive(int peer);
  // What a timeout says of the peer waited for (the communicator's flight recorder knows the call
  // and what the peer did last); without one, its rank, pid and host.
  void describeTimeoutsWith(std::function<std::string(int peer)> describe) {
    describeTimeout_ = std::move(describe);
  }
  int pidfd(int peer) const { return peer >= 0 && peer < int(pidfds_.size()) ? pidfds_[peer] : -1; }

 private:
  void checkPeer(int peer);

  int rank_;
  int64_t timeoutMs_;
  std::atomic<bool> ownAborted_{false};
  std::atomic<bool>* aborted_;
  std::atomic<loomResult_t> error_{loomSuccess};
  mutable std::mutex mutex_;
  std::string message_;
  Deadline deadline_;
  // [0]: no peer in particular, [r+1]: rank r; in steadyNs. Atomic: a call's waits may check
  // from two threads (a hierarchical column on a thread of its own, exec/threaded_run.hpp).
  std::vector<std::atomic<int64_t>> nextPeerCheckNs_;
  const std::vector<RankInfo>* ranks_ = nullptr;
  const NodeMap* nodes_ = nullptr;
  const ShmArena* arena_ = nullptr;
  std::vector<int> pidfds_;  // by rank; -1 where none
  std::function<std::string(int peer)> describeTimeout_;
};

}  // namespace loom
