// A gate in a device stream: how a device rank's call returns at once and still completes in
// stream order. At call time the call enqueues, on the caller's stream, gate tasks
// (Device::enqueueHostTask) in front of the copies that bring the host part's results back; each
// gate task blocks the stream until the host part (a progress thread) released it.
//
// Roles:
//   stream (the device's worker / CUDA's callback thread): the k-th gate task to run waits until
//     release() was called more than k times, or the gate is open.
//   progress thread: release() once per gate task a call enqueued, in the same order, when the
//     data the copies behind it read is ready; open() on failure, so no stream waits for ever.
// A communicator's gate tasks run one after another (its calls are ordered on their streams), so
// counting them is enough: no per-task state, nothing allocated per call.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <mutex>

#include "device/device.hpp"

namespace loom {

class StreamGate final : public HostTask {
 public:
  void run() noexcept override {
    std::unique_lock<std::mutex> lock(mutex_);
    const uint64_t mine = passed_++;
    changed_.wait(lock, [&] { return open_ || released_ > mine; });
  }
  void release() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      ++released_;
    }
    changed_.notify_all();
  }
  // For good: every gate task, queued or to come, passes at once.
  void open() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      open_ = true;
    }
    changed_.notify_all();
  }

 private:
  std::mutex mutex_;
  std::condition_variable changed_;
  uint64_t passed_ = 0;    // gate tasks that started
  uint64_t released_ = 0;  // release() calls
  bool open_ = false;
};

}  // namespace loom
