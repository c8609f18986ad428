#include "comm/stream_jobs.hpp"

#include <chrono>

#include "base/log.hpp"
#include "base/wait.hpp"

namespace loom {

StreamJobs::StreamJobs(Device& device, Hooks hooks, ProgressQueue& queue)
    : device_(device),
      hooks_(std::move(hooks)),
      gate_(std::make_unique<StreamGate>()),
      lastEnd_(device.createEvent()),
      slots_(kMaxJobs),
      queue_(queue) {}

StreamJobs::~StreamJobs() {
  if (!stopped_) stop();
}

StreamJob& StreamJobs::begin(loomStream_t stream) {
  std::unique_lock<std::mutex> lock(mutex_);
  changed_.wait(lock, [&] { return queued_ < kMaxJobs; });
  StreamJob& job = slots_[(head_ + queued_) % kMaxJobs];
  // Its last use is done: its events go back to the pool only now, since a job handed over early
  // may have failed on the progress thread while its caller was still recording them.
  freeEvents_.insert(freeEvents_.end(), job.events.begin(), job.events.end());
  job.events.clear();
  lock.unlock();
  // A call on another stream than the previous one: its copies into the staging memory and its
  // gate tasks come after the previous call's (the gate counts its tasks in order).
  if (haveLast_ && stream != lastStream_) device_.waitEvent(stream, *lastEnd_);
  for (auto& counts : job.counts) counts.clear();
  job.group = nullptr;
  return job;
}

DeviceEvent* StreamJobs::takeEvent() {
  std::lock_guard<std::mutex> lock(mutex_);
  if (freeEvents_.empty()) {
    // More input events in flight than ever before: one more, kept for the next calls.
    events_.push_back(device_.createEvent());
    return events_.back().get();
  }
  DeviceEvent* event = freeEvents_.back();
  freeEvents_.pop_back();
  return event;
}

void StreamJobs::submitEarly() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    ++queued_;
  }
  changed_.notify_all();
  queue_.submit([this](bool skip) { runNext(skip); });
}

void StreamJobs::enqueued(loomStream_t stream) {
  device_.recordEvent(*lastEnd_, stream);
  lastStream_ = stream;
  haveLast_ = true;
}

void StreamJobs::abandon(StreamJob& job, loomStream_t stream) {
  job.order.abandoned.store(true, std::memory_order_release);
  try {
    enqueued(stream);
  } catch (const std::exception&) {
    lostTrack_ = true;
  }
}

void StreamJobs::drain() {
  std::unique_lock<std::mutex> lock(mutex_);
  changed_.wait(lock, [&] { return queued_ == 0; });
}

bool StreamJobs::idle() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (queued_ > 0) return false;
  }
  return !haveLast_ || device_.eventDone(*lastEnd_);
}

bool StreamJobs::streamsDone(int64_t timeoutMs) {
  if (!haveLast_) return true;
  const auto deadline = Clock::now() + std::chrono::milliseconds(timeoutMs);
  while (!device_.eventDone(*lastEnd_)) {
    if (Clock::now() >= deadline) return false;
    std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
  return true;
}

void StreamJobs::quiesce() {
  drain();
  if (!streamsDone(hooks_.timeoutMs))
    LOOM_THROW(loomTimeout, "timed out after ", hooks_.timeoutMs / 1000.0,
               " s waiting for the stream of the previous call to reach its end");
}

bool StreamJobs::stop() {
  drain();  // the queue runs (or, after a failure, skips) every job submitted
  stopped_ = true;
  gate_->open();
  bool done = false;
  try {
    done = !lostTrack_ && streamsDone(hooks_.timeoutMs);
  } catch (const std::exception&) {  // the device failed: its streams will not run on
  }
  if (!done) {
    LOOM_WARN(kSubsysColl, -1,
              "destroying a communicator whose device stream has not reached the end of its last "
              "call; its staging memory, events and gate are left allocated");
    // Still referenced by work queued on the stream: leaked on purpose.
    (void)gate_.release();
    (void)lastEnd_.release();
    for (auto& event : events_) (void)event.release();
  }
  return done;
}

void StreamJobs::runNext(bool skip) {
  StreamJob* job = nullptr;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    job = &slots_[head_];
  }
  if (!skip) {
    try {
      hooks_.run(*job);
    } catch (const Error& e) {
      failed(e);
      throw;
    } catch (const std::exception& e) {
      failed(Error(loomInternalError, e.what()));
      throw;
    }
  }
  advance();
}

void StreamJobs::failed(const Error& error) {
  // Recorded first: the gate lets the streams run to their end, and a caller that synced its
  // stream must then find the failure (the soak saw a success with a wrong result in that gap).
  if (hooks_.fail && error.code() != loomInvalidArgument) {
    try {
      hooks_.fail(error);
    } catch (...) {  // reporting failed too: the queue still records the error
    }
  }
  gate_->open();  // every stream runs to its end; the queue aborts the communicator
  advance();
}

void StreamJobs::advance() {
  // Notified under the lock: the communicator's destructor waits in drain() for the last job and
  // then destroys the condition variable, which must not happen while this thread is still on
  // its way to notify it (TSan saw that in emu_hetero_composed_ECEE).
  std::lock_guard<std::mutex> lock(mutex_);
  head_ = (head_ + 1) % kMaxJobs;
  --queued_;
  changed_.notify_all();
}

}  // namespace loom
