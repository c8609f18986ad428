// Bounded waiting. Ranks may outnumber cores, so a wait spins briefly, then yields, then sleeps
// with a growing interval; every few iterations it runs the caller's health check, which throws
// when the deadline passed, the communicator was aborted or a peer died. A wait on network
// channels blocks in poll on their sockets instead of yielding and sleeping. Nothing here waits
// forever.
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

// The descriptors whose readiness would let a wait make progress (Channel::pollFd). A wait whose
// every source is a descriptor is "complete" and may block in poll; one that also waits on shared
// memory may block only briefly, since nothing wakes it when the shared-memory peer moves.
class PollSet {
 public:
  void clear() {
    fds_.clear();
    complete_ = true;
    networked_ = false;
  }
  // The wait involves a network channel, even if nothing of it can be polled now (a send held
  // back by a shared-memory receive): it sleeps rather than yields, leaving the CPU to the
  // kernel's TCP processing that the wait depends on.
  void markNetworked() { networked_ = true; }
  // fd < 0: a source without a descriptor (shared memory).
  void add(int fd, short events) {
    if (fd < 0) {
      complete_ = false;
      return;
    }
    for (pollfd& p : fds_)
      if (p.fd == fd) {
        p.events |= events;
        return;
      }
    fds_.push_back({fd, events, 0});
    networked_ = true;
  }
  bool empty() const { return fds_.empty() && !networked_; }
  bool complete() const { return complete_ && !fds_.empty(); }
  // Returns when a descriptor is ready (errors and hang-ups included) or after timeoutNs.
  void block(long timeoutNs) {
    timespec ts{timeoutNs / 1000000000, timeoutNs % 1000000000};
    ppoll(fds_.data(), fds_.size(), &ts, nullptr);
  }

 private:
  std::vector<pollfd> fds_;  // kept by the owner across waits: no allocation once grown
  bool complete_ = true;
  bool networked_ = false;
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

// waitUntil for waits that may involve network channels: gather(PollSet&) names the descriptors
// to wait on, asked again after every wake-up since the socket that matters moves as a transfer
// progresses. With descriptors, the spin phase is followed by poll instead of yield and sleep:
// yielding ranks on a small machine take the CPU that the kernel's TCP processing needs, and a
// sleep adds its whole interval to every message. A complete set blocks up to kPollSliceNs
// between health checks (an abort or a deadline is seen within that); an incomplete one (shared
// memory too) blocks no longer than a sleep would. No descriptors: the plain waitUntil.
template <typename Ready, typename Check, typename Gather>
void waitUntil(Ready&& ready, Check&& check, Gather&& gather, PollSet& set) {
  constexpr auto kSpinFor = std::chrono::microseconds(20);
  constexpr long kPollSliceNs = 2 * 1000 * 1000;
  constexpr long kMaxPartialNs = 200 * 1000;
  if (ready()) return;
  set.clear();
  gather(set);
  if (set.empty()) return waitUntil(ready, check);  // shared memory only
  const Clock::time_point start = Clock::now();
  for (uint32_t i = 1;; ++i) {
    if (ready()) return;
    cpuRelax();
    if ((i & 63) == 0) {
      if (checkUnlessReady(ready, check)) return;
      if (Clock::now() - start >= kSpinFor) break;
    }
  }
  long partialNs = 20 * 1000;
  for (;;) {
    if (ready()) return;
    if (set.complete()) {
      set.block(kPollSliceNs);
    } else {
      set.block(partialNs);
      if (partialNs < kMaxPartialNs) partialNs += partialNs / 2;
    }
    if (checkUnlessReady(ready, check)) return;
    if (ready()) return;
    set.clear();
    gather(set);
    if (set.empty()) return waitUntil(ready, check);
  }
}

}  // namespace loom
