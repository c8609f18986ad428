// Bounded waiting. Ranks may outnumber cores, so a wait spins briefly, then yields, then sleeps
// with a growing interval; every few iterations it runs the caller's health check, which throws
// when the deadline passed, the communicator was aborted or a peer died. Nothing here waits
// forever.
#pragma once

#include <sched.h>
#include <time.h>

#include <chrono>
#include <cstdint>

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
template <typename Ready, typename Check>
void checkUnlessReady(Ready& ready, Check& check) {
  try {
    check();
  } catch (...) {
    if (!ready()) throw;
  }
}

// Waits until ready() returns true. check() is called periodically (and must throw to give up).
template <typename Ready, typename Check>
void waitUntil(Ready&& ready, Check&& check) {
  constexpr uint32_t kSpins = 512;
  constexpr uint32_t kYields = 64;
  constexpr long kMaxSleepNs = 200 * 1000;
  long sleepNs = 2000;
  for (uint32_t i = 0;; ++i) {
    if (ready()) return;
    if (i < kSpins) {
      cpuRelax();
      if ((i & 127) == 127) checkUnlessReady(ready, check);
    } else if (i < kSpins + kYields) {
      sched_yield();
      if ((i & 7) == 7) checkUnlessReady(ready, check);
    } else {
      timespec ts{0, sleepNs};
      nanosleep(&ts, nullptr);
      if (sleepNs < kMaxSleepNs) sleepNs += sleepNs / 2;
      checkUnlessReady(ready, check);
    }
  }
}

}  // namespace loom
