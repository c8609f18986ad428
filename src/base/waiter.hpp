// The waits of one thread on one communicator. A wait spins for an adaptive while, then yields
// while yielding pays, then blocks: on this rank's doorbell (base/doorbell.hpp) when everything it
// waits for rings it (shared-memory flags and channels), in poll when it waits on network
// channels, and otherwise (device events, no arena) in the plain spin, yield and sleep of
// waitUntil (base/wait.hpp).
//
// Why both yielding and sleeping, and how a Waiter picks: which is cheaper depends on who else
// wants the core, which it cannot see, so it measures what each costs and takes the cheaper.
//  - When the other runnable threads on a core are this job's ranks (more ranks than cores), a
//    yield hands the core straight to a peer that has work, without a wake-up.
//  - When they are strangers in the same scheduling group (a busy process started from the same
//    session, a data loader), a yield hands one of them a whole time slice (EEVDF pushes the
//    yielder's deadline back), while a sleeper leaves them the core and runs again promptly when
//    rung.
//  - When they are strangers in another group (another session's compiler under autogroup), a
//    yield costs nothing (the group keeps the core) but a sleeper's wake-up waits for that group's
//    slice.
// Cost of yielding: a yield that kept this thread off the core for long (kLongYield) while its
// condition stayed false. Cost of sleeping: the time from the ring to this thread running again
// (the ringer stamps the doorbell). Both are averaged; a wait that spun in vain yields while
// yielding is the cheaper, else sleeps. The cost of yielding decays while it is not tried, so
// yields are tried again now and then.
//
// The spin adapts too:
//  - a wait that ended soon after its thread went to sleep would have been caught by a longer
//    spin: the spin grows (doubling, up to kMaxSpin) to cover such waits. On a quiet machine this
//    keeps steps from becoming wake-ups: a woken vCPU takes tens of microseconds;
//  - a thread that was preempted since its last sleep (its involuntary context switches grew:
//    something else wants its core) halves its spin, down to kDefaultSpin: what it spins is taken
//    from whoever else needs the core. Shorter spins only add wake-ups (each costs about as much
//    as the default spin);
//  - a wait for a rank that is asleep itself (waiting on another) stops spinning at once.
#pragma once

#include <sys/resource.h>

#include <algorithm>

#include "base/doorbell.hpp"
#include "base/wait.hpp"

namespace loom {

class Waiter {
 public:
  static constexpr long kDefaultSpinNs = 20 * 1000;
  static constexpr long kMaxSpinNs = 1000 * 1000;
  static constexpr auto kYieldFor = std::chrono::milliseconds(2);
  static constexpr auto kLongYield = std::chrono::microseconds(50);

  // What a communicator's waits count (shown at LOOM_DEBUG=INFO when it is destroyed).
  struct Counters {
    uint64_t sleeps = 0;         // waits that blocked on the doorbell
    uint64_t timeouts = 0;       // sleeps that ended by their timeout rather than a ring
    uint64_t yieldsStopped = 0;  // yields that kept this thread off the core in vain
  };

  // Without a doorbell: every wait is waitUntil's (or polls descriptors).
  Waiter() = default;
  // Sleeps on `self`'s doorbell of `lane` of board.
  Waiter(const DoorbellBoard& board, int lane, int self)
      : board_(board), mine_(&board.bell(lane, self)), lane_(lane), self_(self) {
    involuntarySwitches_ = involuntarySwitches();
  }

  // Waits until ready(); check() runs every so often and throws to give up. `awaiting`: the rank
  // (of the board) whose store ends the wait, -1 if any may.
  template <typename Ready, typename Check>
  void until(Ready&& ready, Check&& check, int awaiting = -1) {
    if (ready()) return;
    if (!board_) return waitUntil(ready, check);
    const Clock::time_point start = Clock::now();
    if (spin(ready, check, awaiting, start)) return;
    if (yieldCostNs_ <= wakeCostNs_ && yield(ready, check, start)) return;
    sleep(ready, check, awaiting, start);
  }

  // The same for waits that may involve network channels: gather(PollSet&) names the descriptors
  // to poll (asked again after every wake-up, since the socket that matters moves as a transfer
  // progresses). A set without descriptors waits as above (shared memory only). With descriptors,
  // a short spin is followed by poll: yielding ranks on a small machine take the CPU that the
  // kernel's TCP processing needs, and a sleep adds its whole interval to every message. A
  // complete set blocks up to kPollSliceNs between health checks; an incomplete one (shared memory
  // too, which wakes no descriptor) blocks no longer than a sleep would.
  template <typename Ready, typename Check, typename Gather>
  void until(Ready&& ready, Check&& check, Gather&& gather) {
    constexpr auto kSpinFor = std::chrono::microseconds(20);
    constexpr long kPollSliceNs = 2 * 1000 * 1000;
    constexpr long kMaxPartialNs = 200 * 1000;
    if (ready()) return;
    pollSet_.clear();
    gather(pollSet_);
    if (pollSet_.empty()) return untilWithoutDescriptors(ready, check);
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
      if (pollSet_.complete()) {
        pollSet_.block(kPollSliceNs);
      } else {
        pollSet_.block(partialNs);
        if (partialNs < kMaxPartialNs) partialNs += partialNs / 2;
      }
      if (checkUnlessReady(ready, check)) return;
      if (ready()) return;
      pollSet_.clear();
      gather(pollSet_);
      if (pollSet_.empty()) return untilWithoutDescriptors(ready, check);
    }
  }

  // Wakes this thread's wait if it sleeps (another thread of this rank posted work for it).
  void ringSelf() const {
    if (board_) board_.ring(lane_, self_);
  }

  long spinNs() const { return spinNs_; }
  const Counters& counters() const { return counters_; }

 private:
  // Shared memory only: the doorbell, unless a source rings none.
  template <typename Ready, typename Check>
  void untilWithoutDescriptors(Ready& ready, Check& check) {
    if (pollSet_.unwakeable()) return waitUntil(ready, check);
    until(ready, check);
  }

  // Returns true when the wait is over.
  template <typename Ready, typename Check>
  bool spin(Ready& ready, Check& check, int awaiting, Clock::time_point start) {
    const auto spinFor = std::chrono::nanoseconds(spinNs_);
    for (uint32_t i = 1;; ++i) {
      if (ready()) return true;
      cpuRelax();
      if ((i & 63) == 0) {
        if (checkUnlessReady(ready, check)) return true;
        if (Clock::now() - start >= spinFor) return false;
        if (awaiting >= 0 &&
            board_.bell(lane_, awaiting).sleepers.load(std::memory_order_relaxed) != 0)
          return false;
      }
    }
  }

  // Returns true when the wait is over; false to sleep (yields stopped paying, or kYieldFor).
  template <typename Ready, typename Check>
  bool yield(Ready& ready, Check& check, Clock::time_point start) {
    for (uint32_t i = 1;; ++i) {
      const Clock::time_point before = Clock::now();
      sched_yield();
      const Clock::time_point after = Clock::now();
      if (ready()) {
        yieldCostNs_ -= yieldCostNs_ / 4;  // yielding worked
        return true;
      }
      if (after - before >= kLongYield) {
        average(yieldCostNs_, after - before);
        ++counters_.yieldsStopped;
        return false;
      }
      if ((i & 7) == 0) {
        if (checkUnlessReady(ready, check)) return true;
        if (after - start >= kYieldFor) return false;
      }
    }
  }

  // Sleeps in slices (health checks in between; a ring that never comes, as from a dead peer,
  // costs one slice) until ready().
  template <typename Ready, typename Check>
  void sleep(Ready& ready, Check& check, int awaiting, Clock::time_point start) {
    constexpr long kFirstSliceNs = 200 * 1000;
    constexpr long kMaxSliceNs = 5 * 1000 * 1000;
    const bool preempted = sampleInvoluntarySwitches();
    long sliceNs = kFirstSliceNs;
    for (;;) {
      const uint32_t seen = mine_->seq.load(std::memory_order_acquire);
      mine_->awaiting.store(awaiting, std::memory_order_relaxed);
      mine_->sleepers.fetch_add(1, std::memory_order_seq_cst);
      board_.sleeping().fetch_add(1, std::memory_order_seq_cst);
      sleeperFence(board_.mode());
      const bool done = ready();
      if (!done) {
        ++counters_.sleeps;
        sleepOnBell(*mine_, seen, sliceNs);
        if (mine_->seq.load(std::memory_order_acquire) == seen) {
          ++counters_.timeouts;
        } else {
          const auto rungAt = Clock::time_point(
              std::chrono::nanoseconds(mine_->rungAtNs.load(std::memory_order_relaxed)));
          average(wakeCostNs_, std::max(Clock::now() - rungAt, Clock::duration::zero()));
        }
        yieldCostNs_ -= yieldCostNs_ / 64;  // untried, yielding may have become cheaper
      }
      board_.sleeping().fetch_sub(1, std::memory_order_relaxed);
      mine_->sleepers.fetch_sub(1, std::memory_order_relaxed);
      if (done || ready() || checkUnlessReady(ready, check)) break;
      sliceNs = std::min(sliceNs * 2, kMaxSliceNs);
    }
    adapt(Clock::now() - start, preempted);
  }

  void adapt(Clock::duration waited, bool preempted) {
    if (preempted) {
      spinNs_ = std::max(kDefaultSpinNs, spinNs_ / 2);
      return;
    }
    long waitedNs =
        static_cast<long>(std::chrono::duration_cast<std::chrono::nanoseconds>(waited).count());
    if (waitedNs < kMaxSpinNs)
      spinNs_ = std::min({kMaxSpinNs, 2 * spinNs_, std::max(spinNs_, waitedNs + waitedNs / 2)});
  }

  static void average(long& costNs, Clock::duration sample) {
    long ns =
        static_cast<long>(std::chrono::duration_cast<std::chrono::nanoseconds>(sample).count());
    costNs += (ns - costNs) / 4;
  }

  static long involuntarySwitches() {
    rusage usage{};
    getrusage(RUSAGE_THREAD, &usage);
    return usage.ru_nivcsw;
  }
  // Whether this thread was preempted since the last sample.
  bool sampleInvoluntarySwitches() {
    long now = involuntarySwitches();
    bool grew = now != involuntarySwitches_;
    involuntarySwitches_ = now;
    return grew;
  }

  DoorbellBoard board_;
  Doorbell* mine_ = nullptr;
  int lane_ = 0, self_ = 0;
  long spinNs_ = kDefaultSpinNs;
  long yieldCostNs_ = 0;  // averages of what yielding and sleeping cost (above)
  long wakeCostNs_ = 0;
  long involuntarySwitches_ = 0;
  PollSet pollSet_;
  Counters counters_;
};

}  // namespace loom
