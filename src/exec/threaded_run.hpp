// An executor's stepwise run (Executor::begin) driven on a thread of its own, while the thread
// that began it does other work: a hierarchical call's column beside its node phases on the
// arena (algorithms/context.hpp's AlongsideRun). Moved inline, in the arena's waits and between
// its steps, the column's sends, receives and reductions take the same core as the arena's
// copies, so a call costs the sum of both; on a thread they take another core where the host has
// one to spare.
//
// The caller opens the run's gates (open) and waits for its operations (waitFor, finish); the
// thread applies the gates, drives the run with the one progress loop (driveUntil) and publishes
// what the caller waits for. The thread is a ProgressQueue's: one per communicator context, made
// at the first threaded run and kept; nothing is allocated per run once the gate list has grown.
// A failure of the run (a dead peer, the deadline) reaches the caller at its next waitFor,
// finish or throwIfFailed; a failure of the caller abandons the run (abandon, or the destructor)
// before the executor is touched again.
#pragma once

#include <atomic>
#include <cstdint>
#include <exception>
#include <vector>

#include "base/wait.hpp"
#include "bootstrap/socket.hpp"
#include "exec/executor.hpp"
#include "exec/progress_queue.hpp"

namespace loom {

class ThreadedRun final : private Progress {
 public:
  ThreadedRun();
  ~ThreadedRun();  // abandons a run in progress
  ThreadedRun(const ThreadedRun&) = delete;
  ThreadedRun& operator=(const ThreadedRun&) = delete;

  // Hands `executor`'s begun run to the thread; at most `gates` open() calls follow. `set` is the
  // thread's to wait with until the run ends.
  void start(Executor& executor, size_t gates, PollSet& set);
  // The caller's side, from the thread that called start():
  void open(uint32_t gate);
  // Until operation `op` is done (or the run failed: throws its error).
  void waitFor(uint32_t op, const CoreSharing& peers);
  // Until the whole run is done.
  void finish(const CoreSharing& peers);
  // Stops the run where it is and returns once the thread has left it (no-op if none runs).
  void abandon() noexcept;
  // Throws the run's error if it failed.
  void throwIfFailed() const;

 private:
  enum State : int { kIdle, kRunning, kFinished, kFailed };
  static constexpr uint32_t kNone = ~uint32_t{0};

  void run() noexcept;  // on the queue's thread
  // Progress, for driveUntil on the thread: the run's own, plus the caller's gates and waits.
  bool pass() override;
  void check() override;
  void gather(PollSet& set) override;
  bool openGates();  // applies the caller's open() calls; true if any
  void publish();    // the awaited operation is done: tells the caller

  EventFd wake_;  // signalled by the caller's open() and waitFor(), and by abandon()
  Executor* executor_ = nullptr;
  PollSet* pollSet_ = nullptr;
  std::vector<uint32_t> gates_;  // opened by the caller, in order (sized by start())
  size_t opened_ = 0;            // the caller's count of open() calls
  size_t applied_ = 0;           // the thread's count of gates opened in the executor
  std::atomic<size_t> gatesOpened_{0};
  std::atomic<uint32_t> awaited_{kNone};  // the operation the caller waits for
  std::atomic<uint32_t> reached_{kNone};  // ... once the thread saw it done
  std::atomic<bool> abandon_{false};
  std::atomic<int> state_{kIdle};
  std::exception_ptr failure_;  // written before state_ becomes kFailed
  ProgressQueue queue_;         // last: its thread is joined before the rest goes
};

}  // namespace loom
