// Bounded waiting. Ranks may outnumber cores, so a wait spins briefly, then yields, then sleeps
// with a growing interval; every few iterations it runs the caller's health check, which throws
// when the deadline passed, the communicator was aborted or a peer died. Nothing here waits
// forever. This is the wait for what rings no doorbell (device events); a communicator's waits on
// shared memory and network channels go through its Waiter (base/waiter.hpp), which sleeps on a
// doorbell or blocks in poll instead of yielding.
#pragma once

#include <poll.h>
#include <sched.h>
#include <time.h>

#include <chrono>
#include <cstdint>
#include <vector>

namespace loom {

using Clock = std::chrono::steady_clock;
using Deadline = Clock::time_point;

inline void cpuRelax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

// Runs check(); if it throws (peer gone, abort, deadline) but ready() has become true meanwhile,
// the wait succeeded after all: a peer that published its data and then exited is not a failure.
// Returns true in that case, and the wait must end: ready() may do the work itself (move the last
// bytes) and so be true only at that one call.
template <typename Ready, typename Check>
bool checkUnlessReady(Ready& ready, Check& check) {
  try {
    check();
  } catch (...) {
    if (!ready()) throw;
    return true;
  }
  return false;
}

// What a wait on channels blocks on: the descriptors whose readiness would let it make progress
// (Channel::pollFd), and whether it also waits on sources that poll cannot see: shared memory
// (which rings the waiter's doorbell instead) or something that wakes nothing. A wait whose every
// source is a descriptor is "complete" and may block in poll; one that also waits on other sources
// may block in poll only briefly.
class PollSet {
 public:
  void clear() {
    fds_.clear();
    complete_ = true;
    networked_ = false;
    unwakeable_ = false;
  }
  // The wait involves a network channel, even if nothing of it can be polled now (a send held
  // back by a shared-memory receive): it sleeps rather than yields, leaving the CPU to the
  // kernel's TCP processing that the wait depends on.
  void markNetworked() { networked_ = true; }
  void add(int fd, short events) {
    if (fd < 0) return addUnwakeable();
    for (pollfd& p : fds_)
      if (p.fd == fd) {
        p.events |= events;
        return;
      }
    fds_.push_back({fd, events, 0});
    networked_ = true;
  }
  // A source that rings the waiter's doorbell (shared memory).
  void addShared() { complete_ = false; }
  // A source that nothing signals: only timed waits follow it.
  void addUnwakeable() {
    complete_ = false;
    unwakeable_ = true;
  }
  bool empty() const { return fds_.empty() && !networked_; }
  bool complete() const { return complete_ && !fds_.empty(); }
  bool unwakeable() const { return unwakeable_; }
  // Returns when a descriptor is ready (errors and hang-ups included) or after timeoutNs.
  void block(long timeoutNs) {
    timespec ts{timeoutNs / 1000000000, timeoutNs % 1000000000};
    ppoll(fds_.data(), fds_.size(), &ts, nullptr);
  }

 private:
  std::vector<pollfd> fds_;  // kept by the owner across waits: no allocation once grown
  bool complete_ = true;
  bool networked_ = false;
  bool unwakeable_ = false;
};

// Waits until ready() returns true; check() runs periodically and throws to give up.
// Phases by elapsed time, not iteration counts: spin ~20 us (the common case: a peer a few
// microseconds behind), then yield until 2 ms (returns at once on an otherwise idle core, and
// lets a descheduled peer run when ranks outnumber cores), then sleep with a growing interval.
// Sleeping only after 2 ms matters in VMs: a vCPU woken from sleep can take ~40 us, which makes
// the peers overrun a short spin and sleep too, a slow state that would otherwise persist.
template <typename Ready, typename Check>
void waitUntil(Ready&& ready, Check&& check) {
  constexpr auto kSpinFor = std::chrono::microseconds(20);
  constexpr auto kYieldFor = std::chrono::milliseconds(2);
  constexpr long kMaxSleepNs = 200 * 1000;
  if (ready()) return;
  enum class Phase { kSpin, kYield, kSleep } phase = Phase::kSpin;
  const Clock::time_point start = Clock::now();
  long sleepNs = 2000;
  for (uint32_t i = 1;; ++i) {
    if (ready()) return;
    switch (phase) {
      case Phase::kSpin:
        cpuRelax();
        if ((i & 63) == 0) {
          if (checkUnlessReady(ready, check)) return;
          if (Clock::now() - start >= kSpinFor) phase = Phase::kYield;
        }
        break;
      case Phase::kYield:
        sched_yield();
        if ((i & 7) == 0) {
          if (checkUnlessReady(ready, check)) return;
          if (Clock::now() - start >= kYieldFor) phase = Phase::kSleep;
        }
        break;
      case Phase::kSleep: {
        timespec ts{0, sleepNs};
        nanosleep(&ts, nullptr);
        if (sleepNs < kMaxSleepNs) sleepNs += sleepNs / 2;
        if (checkUnlessReady(ready, check)) return;
        break;
      }
    }
  }
}

}  // namespace loom
