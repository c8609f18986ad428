// Bounded waiting. Ranks may outnumber cores and share them with other processes, so a wait spins
// briefly, yields only to a peer rank that shares its core, and sleeps with a growing interval
// once it has waited long; every few iterations it runs the caller's health check, which throws
// when the deadline passed, the communicator was aborted or a peer died. A wait on network
// channels blocks in poll on their sockets instead of yielding and sleeping. Nothing here waits
// forever.
#pragma once

#include <poll.h>
#include <sched.h>
#include <time.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <vector>

namespace loom {

using Clock = std::chrono::steady_clock;
using Deadline = Clock::time_point;

// A steady clock reading in nanoseconds: timestamps that travel as integers (send times,
// deadlines).
inline int64_t steadyNs(Clock::time_point t) {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(t.time_since_epoch()).count();
}
inline uint64_t steadyNowNs() { return static_cast<uint64_t>(steadyNs(Clock::now())); }

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
  bool hasDescriptors() const { return !fds_.empty(); }
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

// The cores this process may run on (its affinity mask, as taskset or a container set it).
int usableCores();

// One line per rank in the shared memory of the ranks on a host (the communicator's arena),
// written only by that rank's waiting threads: the core it last waited on, whether it sleeps, its
// last look at how many threads the host runs, and when a yield of it last lost the core to a
// stranger.
struct alignas(64) WaitPresence {
  std::atomic<int32_t> cpu{-1};
  std::atomic<int32_t> sleeping{0};                  // 1 while asleep in a wait: not runnable
  std::atomic<int32_t> runnable{0};                  // the host's runnable threads at the last look
  std::atomic<int64_t> runnableAtNs{INT64_MIN / 2};  // steady clock
  std::atomic<int64_t> strangerAtNs{INT64_MIN / 2};  // a yield last lost the core for a slice
};

// What a waiter knows of the ranks it shares a host with. A yield is only worth it when a peer
// rank is runnable on the waiter's own core: the yield hands that peer the core, with no wake-up.
// Otherwise the core's other tasks are strangers (data loaders, compilers, another job), and a
// yield gives one of them a whole time slice (EEVDF moves the yielder's deadline a slice back),
// milliseconds for a wait of microseconds; spinning there costs nobody more than their fair share,
// which the scheduler enforces anyway. Lines are read relaxed: a stale one costs one wrong choice,
// never correctness.
class CoreSharing {
 public:
  CoreSharing() = default;  // no peers on this host: waits never yield to one
  // cores: how many cores the ranks may run on (usableCores()).
  CoreSharing(WaitPresence* lines, int nranks, int self, int cores)
      : lines_(lines), nranks_(nranks), self_(self), cores_(cores) {}
  explicit operator bool() const { return lines_ != nullptr && nranks_ > 1; }
  // The calling thread's core, published (a store only when it moved since the last wait).
  int publishCpu() const;
  void markSleeping(bool sleeping) const {
    lines_[self_].sleeping.store(sleeping ? 1 : 0, std::memory_order_relaxed);
  }
  bool peerRunnableOn(int cpu) const;
  // More threads runnable on the host than there are cores (or more ranks than cores): a peer on
  // this core cannot move to an idle one, so a waiter yields to it at once. Otherwise two ranks on
  // one core is a passing placement that the scheduler's balancing undoes, unless they keep handing
  // the core to each other (a pair that yields at once looks cache-hot and stays, at 5x the
  // latency); then a waiter spins first, as it would without a peer there. Reads the kernel's
  // count of runnable threads (/proc/loadavg) at most once a millisecond per rank.
  bool crowded(Clock::time_point now = Clock::now()) const;
  // The host's ranks and the strangers runnable beside them (runnable threads that are not awake
  // ranks) exceed the cores by a quarter (at least 2): the rank a wait is for may be waiting for a
  // core, perhaps this one, so a wait that outlasts its first spin sleeps rather than spin on.
  // Not at one or two threads over (a launcher or a kernel worker waking beside 16 ranks on 16
  // cores: sleeping there put quiet calls into a slow state, 1 KiB 4.3 -> 51 us), nor from the
  // plain count of runnable threads, which falls as the ranks go to sleep.
  bool oversubscribed(Clock::time_point now = Clock::now()) const;
  // Every rank of this host, awake or not, a second thread beside each of them (a hierarchical
  // column on a thread of its own, exec/threaded_run.hpp) and the strangers runnable beside them
  // fit the cores: no such thread takes a core that a rank or another thread (the kernel's
  // network processing too) is waiting for.
  bool roomForThreadPerRank(Clock::time_point now = Clock::now()) const;
  // A yield of this rank gave its core to a stranger: it came back only after a time slice.
  // Remembered for 50 ms: the stranger is likely still there at the next waits, and each yield to
  // it would cost another slice.
  void noteStranger(Clock::time_point now = Clock::now()) const;
  bool strangerSeenLately(Clock::time_point now = Clock::now()) const;

 private:
  int runnableThreads(Clock::time_point now) const;  // the host's, looked at once a ms at most
  // The runnable threads that are not this host's awake ranks (-1: unknown).
  int strangers(Clock::time_point now) const;

  WaitPresence* lines_ = nullptr;
  int nranks_ = 0;
  int self_ = 0;
  int cores_ = 1;
};

enum class WaitAction { kSpin, kYield, kSleep };

// How long every wait spins before anything else: a peer is usually a few microseconds behind.
inline constexpr auto kWaitSpinFor = std::chrono::microseconds(20);

// What a waiter knows when it chooses its next action (CoreSharing's view of its host).
struct WaitSituation {
  bool knowsPeers = false;      // CoreSharing present: the fields below are known
  bool peerHere = false;        // a peer rank is runnable on this core
  bool crowded = false;         // CoreSharing::crowded (looked at only with a peer here)
  bool oversubscribed = false;  // CoreSharing::oversubscribed (with a peer here, or past the
                                // first spin)
  bool preempted = false;       // this wait lost its core while spinning
  bool strangerHere = false;    // a yield of this rank lately gave the core to a stranger
};

// A wait's phases by elapsed time, not iteration counts: spin ~20 us (the common case: a peer a
// few microseconds behind), then until 2 ms spin, yield or sleep as below, then sleep with a
// growing interval. On a host with idle cores, sleeping only after 2 ms matters in VMs: a vCPU
// woken from sleep can take ~40 us, which makes the peers overrun a short spin and sleep too, a
// slow state that would otherwise persist. With CoreSharing (knowsPeers):
// - a peer runnable on this core (peerHere) gets it by a yield, whatever the time, since that peer
//   is what the wait needs: at once when the host is crowded (CoreSharing::crowded), after the
//   first spin otherwise. Unless a stranger shares the core too (strangerHere) on an
//   oversubscribed host: then the waiter sleeps instead. A yield moves the yielder's deadline a
//   slice back (EEVDF), so the scheduler runs the stranger, for a whole slice, before the peer or
//   the yielder, at every yield; a sleep leaves the core to whoever is earliest and keeps the
//   sleeper's place (4 ranks beside 2 busy processes on 2 cores, allreduce 4 MiB: 31 ms a call
//   yielding, 2.5 ms sleeping). Where cores are not oversubscribed, the stranger is a passing
//   guest that the balancer moves, and sleeping for it cost more than the slice (8 ranks beside 8
//   busy processes on 16 cores, 1 KiB: 17 us against 3.5 us; 2 ranks beside 1 on 2 cores, 4 MiB:
//   0.6-0.8 ms against 0.45 ms);
// - with no peer here, the middle phase spins, unless the wait has already lost its core while
//   spinning (preempted: a stranger shares the core and takes its turns anyway) or the host is
//   oversubscribed (whoever the wait is for may be waiting for a core, perhaps this one). Then the
//   waiter sleeps, keeping the scheduler's credit for the moment its data arrives rather than
//   spending it on spinning (16 cores, 8 ranks beside 24 busy processes: about 2/3 of the time of
//   spinning on at 512 KiB-4 MiB; 2 cores, 4 ranks beside 2 busy processes, 4 MiB: 2.5 ms against
//   26 ms). Its core is busy, so the wake-up is prompt even in a VM.
// Without CoreSharing (no shared memory: a device event, a thread) the middle phase yields.
inline WaitAction nextWaitAction(Clock::duration elapsed, const WaitSituation& s) {
  constexpr auto kYieldFor = std::chrono::milliseconds(2);
  if (s.knowsPeers && s.peerHere && (s.crowded || elapsed >= kWaitSpinFor))
    return s.strangerHere && s.oversubscribed ? WaitAction::kSleep : WaitAction::kYield;
  if (elapsed < kWaitSpinFor) return WaitAction::kSpin;
  if (elapsed < kYieldFor && s.knowsPeers)
    return s.preempted || s.oversubscribed ? WaitAction::kSleep : WaitAction::kSpin;
  if (elapsed < kYieldFor) return WaitAction::kYield;
  return WaitAction::kSleep;
}

// Waits until ready() returns true; check() runs periodically and throws to give up. The next
// action is chosen every 16 or 64 spins, every 8 yields and after every sleep (nextWaitAction).
template <typename Ready, typename Check>
void waitUntil(Ready&& ready, Check&& check, const CoreSharing& peers = CoreSharing()) {
  constexpr long kMaxSleepNs = 200 * 1000;
  constexpr auto kStrangerSlice = std::chrono::milliseconds(1);  // EEVDF's slice: 0.75-3 ms
  if (ready()) return;
  const bool knowsPeers = static_cast<bool>(peers);
  // A peer waiting for the core this wait spins on costs the spin's length on every hand-over:
  // with peers to look for, look every 16 spins (under a microsecond), else every 64.
  const uint32_t spinMask = knowsPeers ? 15 : 63;
  // Clears this rank's sleeping mark however the wait ends (ready, or check() throwing).
  struct SleepMark {
    const CoreSharing& peers;
    bool set = false;
    void operator()(bool sleeping) {
      if (sleeping != set) peers.markSleeping(set = sleeping);
    }
    ~SleepMark() {
      if (set) peers.markSleeping(false);
    }
  } mark{peers};
  WaitAction action = WaitAction::kSpin;
  const Clock::time_point start = Clock::now();
  Clock::time_point lastLook = start;
  bool preempted = false;  // a gap between two looks while spinning: descheduled
  // Time the yields for strangers only where the answer is used (an oversubscribed host), so the
  // yields of ranks sharing cores on a quiet host take no clock reads (no difference in their
  // timings was measurable either way; it keeps the quiet path as it was).
  bool watchYields = false;
  long sleepNs = 2000;
  for (uint32_t i = 1;; ++i) {
    if (ready()) return;
    switch (action) {
      case WaitAction::kSpin:
        cpuRelax();
        break;
      case WaitAction::kYield: {
        if (!watchYields) {
          sched_yield();
          break;
        }
        const Clock::time_point before = Clock::now();
        sched_yield();
        // Peers hand the core back within their step's work; a stranger keeps it for a slice.
        const Clock::time_point after = Clock::now();
        if (after - before > kStrangerSlice) peers.noteStranger(after);
        break;
      }
      case WaitAction::kSleep: {
        timespec ts{0, sleepNs};
        nanosleep(&ts, nullptr);
        if (sleepNs < kMaxSleepNs) sleepNs += sleepNs / 2;
        break;
      }
    }
    if (action == WaitAction::kSleep || (i & (action == WaitAction::kSpin ? spinMask : 7)) == 0) {
      if (checkUnlessReady(ready, check)) return;
      bool peerHere = knowsPeers && peers.peerRunnableOn(peers.publishCpu());
      const Clock::time_point now = Clock::now();
      if (action == WaitAction::kSpin && now - lastLook > std::chrono::microseconds(100))
        preempted = true;
      lastLook = now;
      const Clock::duration elapsed = now - start;
      WaitSituation situation{.knowsPeers = knowsPeers,
                              .peerHere = peerHere,
                              .crowded = peerHere && peers.crowded(now),
                              .oversubscribed = knowsPeers &&
                                                (peerHere || elapsed >= kWaitSpinFor) &&
                                                peers.oversubscribed(now),
                              .preempted = preempted,
                              .strangerHere = peerHere && peers.strangerSeenLately(now)};
      action = nextWaitAction(elapsed, situation);
      watchYields = situation.oversubscribed;
      if (knowsPeers) mark(action == WaitAction::kSleep);
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
void waitUntil(Ready&& ready, Check&& check, Gather&& gather, PollSet& set,
               const CoreSharing& peers = CoreSharing()) {
  constexpr long kPollSliceNs = 2 * 1000 * 1000;
  constexpr long kMaxPartialNs = 200 * 1000;
  if (ready()) return;
  set.clear();
  gather(set);
  if (set.empty()) return waitUntil(ready, check, peers);  // shared memory only
  const Clock::time_point start = Clock::now();
  for (uint32_t i = 1;; ++i) {
    if (ready()) return;
    cpuRelax();
    if ((i & 63) == 0) {
      if (checkUnlessReady(ready, check)) return;
      if (Clock::now() - start >= kWaitSpinFor) break;
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
    if (set.empty()) return waitUntil(ready, check, peers);
  }
}

}  // namespace loom
