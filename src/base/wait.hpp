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
          checkUnlessReady(ready, check);
          if (Clock::now() - start >= kSpinFor) phase = Phase::kYield;
        }
        break;
      case Phase::kYield:
        sched_yield();
        if ((i & 7) == 0) {
          checkUnlessReady(ready, check);
          if (Clock::now() - start >= kYieldFor) phase = Phase::kSleep;
        }
        break;
      case Phase::kSleep: {
        timespec ts{0, sleepNs};
        nanosleep(&ts, nullptr);
        if (sleepNs < kMaxSleepNs) sleepNs += sleepNs / 2;
        checkUnlessReady(ready, check);
        break;
      }
    }
  }
}

}  // namespace loom
