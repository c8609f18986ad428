// The progress queue of a communicator (its groups have none of their own; a non-blocking
// communicator's is its C handle's, which also runs its initialization): one thread that runs, in
// order, the work that must go on after a call returned — the calls of a non-blocking
// communicator, the host halves of a device rank's stream-ordered calls
// (comm/stream_jobs.hpp) — and, whenever no such task is queued, drives the point-to-point
// tickets nobody else drives (comm/p2p_engine.hpp: non-blocking sends and receives, a group's
// sends and receives while its collectives run).
//
// One failure policy: the first task that throws is the tree's error (error()); unless it was a
// bad argument, the failure hook aborts the communicator, which tells the peers. Every later task
// still runs, told to skip, so that it can release what it holds (a stream job's slot) without
// doing its work.
//
// The thread starts with the first task or wake-up; destroying the queue runs (or skips) what is
// queued, then joins it. Nothing is allocated per task once the queue has held as many at once.
#pragma once

#include <atomic>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "base/error.hpp"

namespace loom {

class ProgressQueue {
 public:
  // Work the thread drives when no task is queued.
  class Background {
   public:
    // Something is outstanding that needs this thread (nobody else drives it).
    virtual bool wantsDriving() = 0;
    // Drives until nothing is outstanding or stop() returns true (a task was queued, the queue
    // is stopping).
    virtual void driveWhile(const std::function<bool()>& stop) = 0;

   protected:
    ~Background() = default;
  };
  // A task: skip is true once an earlier task failed.
  using Task = std::function<void(bool skip)>;

  // fail: called (on the queue's thread) with the first failure that is not a bad argument.
  explicit ProgressQueue(std::function<void(const Error&)> fail = nullptr);
  ~ProgressQueue();
  ProgressQueue(const ProgressQueue&) = delete;
  ProgressQueue& operator=(const ProgressQueue&) = delete;

  // Sets the failure hook once the communicator it aborts exists.
  void setFailHook(std::function<void(const Error&)> fail);
  void submit(Task task);
  bool busy() const;  // a task is queued or running
  void drain();       // waits until no task is queued or running
  // loomSuccess, or the first task failure (with its message).
  loomResult_t error(std::string* message) const;

  void attach(Background& work);
  // Waits until the thread no longer drives `work`; it is never driven again.
  void detach(Background& work);
  // A background source may want driving now (call without holding the source's own locks).
  void wake();

 private:
  void startLocked();
  void loop();
  bool backgroundWantsLocked() const;
  void runTask(std::unique_lock<std::mutex>& lock);
  void driveBackground(std::unique_lock<std::mutex>& lock);

  std::function<void(const Error&)> fail_;
  mutable std::mutex mutex_;
  std::condition_variable changed_;
  // Tasks in a ring: [head_, head_ + count_) modulo the capacity.
  std::vector<Task> tasks_;
  size_t head_ = 0, count_ = 0;
  // count_ > 0 or stopping_, readable without the lock (a background drive polls it).
  std::atomic<bool> interrupt_{false};
  bool running_ = false;  // a task is running
  bool stopping_ = false;
  uint64_t wakeups_ = 0;
  loomResult_t error_ = loomSuccess;
  std::string errorMessage_;
  std::vector<Background*> background_;
  Background* driving_ = nullptr;
  std::thread thread_;
};

}  // namespace loom
