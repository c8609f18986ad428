// The point-to-point progress engine of a host communicator: every send and receive, blocking or
// not, is a ticket here, and all posted tickets progress together whatever the order they were
// posted in (an irecv before its isend on both ranks, rings, many peers and tags).
//
// Roles:
//  - One thread at a time drives (holds the token): it takes new tickets in posting order, runs
//    progress passes (algorithms/p2p), waits between them with the usual spin/poll/sleep and
//    health checks, finishes tickets and calls their callbacks.
//  - A blocking caller (loomSend/loomRecv, a group) posts its tickets and drives itself when no one
//    else does, so blocking point-to-point costs no thread hand-off and allocates nothing.
//  - Non-blocking requests (loomIsend/loomIrecv), and groups whose collectives run while their
//    sends and receives are in flight, hand the driving to the communicator's progress queue
//    (exec/progress_queue.hpp), whose thread drives whenever tickets are outstanding and no
//    caller does.
// A failure (timeout, dead peer, size mismatch, abort) finishes every outstanding ticket with the
// error and aborts the communicator.
#pragma once

#include <atomic>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "algorithms/p2p.hpp"
#include "base/error.hpp"
#include "base/wait.hpp"
#include "comm/flight_recorder.hpp"
#include "exec/executor.hpp"
#include "exec/progress_queue.hpp"

namespace loom {

struct P2PTicket {
  P2POp op;
  Deadline deadline;
  uint64_t flight = 0;  // its entry in the communicator's flight recorder
  // result and message are written before finished is set, and read after.
  std::atomic<bool> finished{false};
  loomResult_t result = loomSuccess;
  std::string message;
  // Requests only: called once, on the driving thread, when the ticket finished (under mutex, so
  // that a callback set late runs exactly once, on the setter's thread).
  std::mutex mutex;
  std::function<void(loomResult_t)> callback;
  void reset() {
    op = P2POp();
    finished.store(false, std::memory_order_relaxed);
    result = loomSuccess;
    message.clear();
  }
};

// Runs callback when the ticket finishes (at once, on this thread, if it already has). Safe
// after the engine is gone: the ticket is all it touches.
void setTicketCallback(P2PTicket& ticket, std::function<void(loomResult_t)> callback);

struct P2PEngineHooks {
  int64_t timeoutMs = 600000;
  // Throws if the communicator was aborted or `peer` is gone (safe from any thread).
  std::function<void(int peer)> checkPeer;
  // Aborts the communicator with `error` (tells the peers).
  std::function<void(const Error& error)> fail;
  FlightRecorder* flight = nullptr;  // every ticket is recorded there (null: nowhere)
};

class P2PEngine final : private Progress, private ProgressQueue::Background {
 public:
  P2PEngine(P2PEngineHooks hooks, ProgressQueue& queue);
  ~P2PEngine();
  P2PEngine(const P2PEngine&) = delete;
  P2PEngine& operator=(const P2PEngine&) = delete;

  // Non-blocking: the ticket progresses on the progress queue's thread when no caller drives.
  std::shared_ptr<P2PTicket> post(const P2POp& op);
  // Posts a ticket owned by the caller (kept alive until it finished) without waiting for it.
  void postOwned(P2PTicket& ticket);
  // Waits until every ticket of `tickets` finished, driving when no one else does; throws the
  // first failure among them.
  void finish(const std::vector<P2PTicket*>& tickets);
  // From now on the progress queue's thread drives outstanding tickets when no caller does (a
  // group that runs collectives while its sends are in flight).
  void startThread();

 private:
  void enqueueLocked(P2PTicket* ticket);
  void record(P2PTicket& ticket, FlightState state);
  template <typename Until>
  void drive(Until until);
  // Progress, for the executor's loop: new tickets taken, every ticket moved, finished ones done.
  bool pass() override;
  void check() override { healthCheck(); }
  void gather(PollSet& set) override { gatherPointToPoint(ops_, set); }
  // The driver's own: posted tickets moved to active_ (without the lock when there are none).
  void takePosted();
  bool idle() const { return active_.empty() && posted_.load() == taken_; }
  void healthCheck();
  void finishDone();
  void failAll(const Error& error);
  // Finishes every outstanding ticket with code (caller holds mutex_); returns their callbacks.
  void finishAllLocked(loomResult_t code, const std::string& message);
  void runCallbacks();
  // ProgressQueue::Background: driven by the queue's thread.
  bool wantsDriving() override;
  void driveWhile(const std::function<bool()>& stop) override;

  P2PEngineHooks hooks_;
  std::mutex mutex_;
  std::condition_variable changed_;
  std::vector<P2PTicket*> incoming_;                  // posted, not yet seen by a driver
  std::vector<std::shared_ptr<P2PTicket>> requests_;  // keeps requests alive until finished
  std::atomic<uint64_t> posted_{0};
  std::atomic<uint64_t> recorded_{0};  // tickets recorded: their number in the flight record
  bool driving_ = false;
  bool queueDrives_ = false;  // the queue's thread drives when no caller does
  std::atomic<bool> stopping_{false};
  ProgressQueue& queue_;
  // The driver's own (touched only while holding the token):
  uint64_t taken_ = 0;  // posted tickets moved to active_
  std::vector<P2PTicket*> active_;
  std::vector<P2POp*> ops_;
  std::vector<P2PTicket*> done_;
  // Callbacks of finished tickets, run outside the mutex (by whoever finished them).
  std::vector<std::pair<std::function<void(loomResult_t)>, loomResult_t>> callbacks_;
  P2PPassState passState_;
  PollSet pollSet_;
  Clock::time_point nextPeerCheck_{};
};

}  // namespace loom
