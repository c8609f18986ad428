// A device rank's calls in stream order, for communicators that run host algorithms on device
// data (no native collectives) on a device that runs host tasks (DeviceCaps::hostTasks): the call
// enqueues its stream side and returns at once; the host side runs here, on one progress thread
// per communicator, in issue order, and the caller's stream waits for it at the call's gates.
//
// Roles:
//   caller (call time): begin() takes a free job slot (at most kMaxJobs calls in flight: a full
//     queue blocks the caller, as a full launch queue does) and orders the stream after the
//     previous call's stream work when the stream changed; the caller enqueues the copies, the
//     input events (takeEvent) and the gate tasks (gate()) and fills the job; submit() records
//     the end event and hands the job over. A chunked job is handed over before its stream work
//     is enqueued (submitEarly(), then enqueued() records the end event): its enqueue may block
//     on a full launch queue until the host part has released gates (EnqueueProgress).
//   progress thread: runs each job's host part (Hooks::run: waits for its input events, runs the
//     host algorithm, releases its gates). A failure aborts the communicator (Hooks::fail) and
//     opens the gate for good, so every stream runs to its end and no caller waits for ever; the
//     jobs after it are skipped.
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

#include "algorithms/chunked.hpp"
#include "algorithms/context.hpp"
#include "algorithms/stream_gate.hpp"
#include "base/error.hpp"

namespace loom {

class Comm;

struct StreamJob {
  enum class Kind { kChunked, kGated };
  Kind kind = Kind::kGated;
  Comm* host = nullptr;  // whose host algorithm runs the chunks (null: the queue's communicator)
  const Algorithm* algo = nullptr;   // kGated
  bool mapped = false;               // kGated: on the device's memory, with the device's context
  CollArgs args;                     // kChunked: the call; kGated: as the algorithm runs it
  char* staging = nullptr;           // kChunked: the call's host memory
  size_t chunkBytes = 0;             // kChunked
  std::vector<DeviceEvent*> inputs;  // one per chunk (kGated: one)
  EnqueueProgress progress;          // kChunked: handed over before its stream work is enqueued
  std::array<std::vector<size_t>, 4> counts;  // alltoallv's arrays, owned: the caller's may go
};

class StreamJobs {
 public:
  static constexpr size_t kMaxJobs = 16;
  struct Hooks {
    std::function<void(StreamJob&)> run;     // the host part; throws on failure
    std::function<void(const Error&)> fail;  // aborts the communicator (tells the peers)
    int64_t timeoutMs = 600000;
  };
  StreamJobs(Device& device, Hooks hooks);
  ~StreamJobs();
  StreamJobs(const StreamJobs&) = delete;
  StreamJobs& operator=(const StreamJobs&) = delete;

  // Call time, on the caller's thread (one at a time).
  StreamJob& begin(loomStream_t stream);
  DeviceEvent* takeEvent();
  StreamGate& gate() { return *gate_; }
  void submit(loomStream_t stream);
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
  // Destroy: runs or skips (aborted) what is queued, stops the thread, opens the gate and waits
  // (at most the timeout) for the last call's stream work. False: it is still running; the
  // events, the gate and the staging memory it uses must then outlive this (they are leaked).
  bool stop();

 private:
  void loop();
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
  bool failed_ = false, stopping_ = false, stopped_ = false;
  std::vector<std::unique_ptr<DeviceEvent>> events_;
  std::vector<DeviceEvent*> freeEvents_;
  std::thread thread_;  // last: starts once the rest is built
};

}  // namespace loom
