// A device rank's calls in stream order, for communicators that run host algorithms on device
// data (no native collectives) on a device that runs host tasks (DeviceCaps::hostTasks): the call
// enqueues its stream side and returns at once; the host side runs here, on one progress thread
// per communicator, in issue order, and the caller's stream waits for it at the call's gates.
//
// Roles:
//   caller (call time): begin() takes a free job slot (at most kMaxJobs calls in flight: a full
//     queue blocks the caller, as a full launch queue does) and orders the stream after the
//     previous call's stream work when the stream changed; the caller fills the job (its
//     schedule, events from takeEvent()), hands it over (submitEarly()), enqueues its device
//     lane with gate() (exec/executor.hpp) and records the end event (enqueued()). Handed over
//     before its stream work is enqueued: the enqueue may block on a full launch queue until the
//     host part has released gates (StreamOrder).
//   progress queue (exec/progress_queue.hpp): each job is a task that runs its host part
//     (Hooks::run: waits for its input events, runs the host algorithm, releases its gates). A
//     failure opens the gate for good, so every stream runs to its end and no caller waits for
//     ever, and is the queue's failure (which aborts the communicator); the jobs after it are
//     skipped, still releasing their slots.
// Nothing is allocated per call once warm: job slots, their event lists and the events are reused.
#pragma once

#include <array>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "algorithms/staged.hpp"
#include "base/error.hpp"
#include "exec/executor.hpp"
#include "exec/progress_queue.hpp"
#include "exec/stream_gate.hpp"

namespace loom {

class Group;

// One stream-ordered call: its device shape (algorithms/staged.hpp, chunked.hpp) as a schedule
// with its buffers bound, the device lane's progress as enqueued, its host calls, and what it
// owns of the caller's arguments.
struct StreamJob {
  Group* group = nullptr;  // the ranks whose host algorithms run the host calls
  uint64_t flight = 0;     // its entry in the communicator's flight recorder
  CollArgs args;           // the call (its number and signature are taken when its host part runs)
  Schedule schedule;
  std::vector<char*> bound;
  StreamOrder order;
  AlgorithmCalls calls;
  std::vector<DeviceEvent*> events;           // taken from the pool, returned at the slot's reuse
  std::array<std::vector<size_t>, 4> counts;  // alltoallv's arrays, owned: the caller's may go
};

class StreamJobs {
 public:
  static constexpr size_t kMaxJobs = 16;
  struct Hooks {
    std::function<void(StreamJob&)> run;  // the host part; throws on failure
    // Records a failure of the host part before the gate opens (the communicator's fail): a
    // caller that syncs its stream and then asks for the async error sees the failure, never a
    // success with undefined output. Not for loomInvalidArgument (the queue does not abort for it).
    std::function<void(const Error&)> fail;
    int64_t timeoutMs = 600000;
  };
  StreamJobs(Device& device, Hooks hooks, ProgressQueue& queue);
  ~StreamJobs();
  StreamJobs(const StreamJobs&) = delete;
  StreamJobs& operator=(const StreamJobs&) = delete;

  // Call time, on the caller's thread (one at a time).
  StreamJob& begin(loomStream_t stream);
  DeviceEvent* takeEvent();
  StreamGate& gate() { return *gate_; }
  // A job whose inputs, staging and arguments are filled, handed over before its stream work is
  // enqueued; enqueued() follows once it is (records the end event).
  void submitEarly();
  void enqueued(loomStream_t stream);
  // The call failed while enqueuing (after begin()): what it enqueued may still write into the
  // staging memory, so the end event goes behind it all the same; the job is not run (one handed
  // over early stops at the first input not recorded, and fails the communicator).
  void abandon(StreamJob& job, loomStream_t stream);
  // Waits until the host part of every submitted call ran (the progress thread is idle).
  void drain();
  // True, without waiting, when no call is queued and the last one's stream work is done.
  bool idle();
  // drain(), then until the last call's stream work is done (its copies left the staging memory);
  // throws loomTimeout past the communicator's timeout.
  void quiesce();
  // Opens the gate for good (the communicator failed): streams run to their end.
  void openGate() { gate_->open(); }
  // Destroy: waits until the queue ran or skipped (aborted) what is queued, opens the gate and
  // waits (at most the timeout) for the last call's stream work. False: it is still running; the
  // events, the gate and the staging memory it uses must then outlive this (they are leaked).
  bool stop();

 private:
  void runNext(bool skip);          // the queue's task of the oldest job
  void failed(const Error& error);  // its host part threw: record, open the gate, move on
  void advance();
  bool streamsDone(int64_t timeoutMs);

  Device& device_;
  Hooks hooks_;
  std::unique_ptr<StreamGate> gate_;
  std::unique_ptr<DeviceEvent> lastEnd_;  // recorded after each call's stream work
  loomStream_t lastStream_ = nullptr;
  bool haveLast_ = false;
  bool lostTrack_ = false;  // abandon() could not mark the stream: stop() leaks, never frees
  std::mutex mutex_;
  std::condition_variable changed_;
  std::vector<StreamJob> slots_;
  size_t head_ = 0, queued_ = 0;  // the next job to run; jobs submitted and not yet done
  bool stopped_ = false;
  std::vector<std::unique_ptr<DeviceEvent>> events_;
  std::vector<DeviceEvent*> freeEvents_;
  ProgressQueue& queue_;
};

}  // namespace loom
