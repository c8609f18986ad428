// A gate in a device stream: how a device rank's call returns at once and still completes in
// stream order. At call time the call enqueues, on the caller's stream, gate tasks
// (Device::enqueueHostTask) in front of the copies that bring the host part's results back; each
// gate task blocks the stream until the host part (a progress thread) released it.
//
// Roles:
//   stream (the device's worker / CUDA's callback thread): the k-th gate task to run waits until
//     release() was called more than k times, or the gate is open: a spin of a few microseconds,
//     then a sleep on a condition variable.
//   progress thread: release() once per gate task a call enqueued, in the same order, when the
//     data the copies behind it read is ready; open() on failure, so no stream waits for ever.
// A communicator's gate tasks run one after another (its calls are ordered on their streams), so
// counting them is enough: no per-task state, nothing allocated per call.
//
// Only the output side is host tasks; the host part learns that an input is complete from events
// it polls: on CUDA every host function of the process runs on one callback thread, so a signal
// queued there behind another communicator's gate could wait for a peer that waits for this rank.
// The cost: on CUDA a gate holds that callback thread while its host part runs, which delays the
// process's other host functions (a stream wait on a pinned flag, cuStreamWaitValue32, would not).
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>

#include "base/wait.hpp"
#include "device/device.hpp"

namespace loom {

class StreamGate final : public HostTask {
 public:
  void run() noexcept override {
    const uint64_t mine = passed_.fetch_add(1, std::memory_order_relaxed);
    auto ready = [&] {
      return open_.load(std::memory_order_acquire) ||
             released_.load(std::memory_order_acquire) > mine;
    };
    // The release usually comes within microseconds (the host part of the chunk before is
    // running): a short spin saves the stream a sleep and a wake-up per gate (CUDA's callback
    // thread, the emulated stream's worker), which cost tens of microseconds each.
    const Deadline spinEnd = Clock::now() + kSpin;
    for (int i = 0; !ready(); ++i) {
      if ((i & 63) == 63 && Clock::now() > spinEnd) {
        std::unique_lock<std::mutex> lock(mutex_);
        changed_.wait(lock, ready);
        return;
      }
      cpuRelax();
    }
  }
  void release() {
    released_.fetch_add(1, std::memory_order_acq_rel);
    notify();
  }
  // For good: every gate task, queued or to come, passes at once.
  void open() {
    open_.store(true, std::memory_order_release);
    notify();
  }

 private:
  static constexpr std::chrono::microseconds kSpin{20};
  void notify() {
    // Under the mutex, so a waiter between its last check and its sleep cannot miss it.
    { std::lock_guard<std::mutex> lock(mutex_); }
    changed_.notify_all();
  }
  std::mutex mutex_;
  std::condition_variable changed_;
  std::atomic<uint64_t> passed_{0};    // gate tasks that started
  std::atomic<uint64_t> released_{0};  // release() calls
  std::atomic<bool> open_{false};
};

}  // namespace loom
