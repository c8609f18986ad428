// Sleeping on shared memory. A thread that waited longer than its spin blocks in the kernel
// (futex) on its own doorbell, and whoever stores what it waits for rings that doorbell. When the
// cores are oversubscribed this is what keeps collectives fast: a waiter that sleeps leaves its
// core to the peer it waits for (spinning or yielding burns the time slice that peer needs, and a
// yield hands the core to any busy process for a whole slice), and the scheduler runs a woken
// sleeper promptly.
//
// No lost wake-up: the sleeper announces itself (sleepers), then checks its condition once more
// before it blocks; the writer stores, then looks for sleepers. With a full barrier on both sides
// one of them sees the other's write (Dekker). Writers run on every publish and sleepers only
// before they block, so the barrier is asymmetric where the kernel allows it: a writer orders its
// two accesses with a compiler barrier only, and the sleeper makes every running thread of the job
// execute a barrier (membarrier(2), GLOBAL_EXPEDITED). Where that is refused, writers pay a full
// fence. Every process that shares the doorbells must use the same mode.
#pragma once

#include <atomic>
#include <cstdint>

namespace loom {

struct alignas(64) Doorbell {
  std::atomic<uint32_t> seq{0};       // the futex word: every ring bumps it
  std::atomic<uint32_t> sleepers{0};  // threads blocked on it, or about to block
  std::atomic<int32_t> awaiting{-1};  // the rank they wait for (a hint for rings); -1: any
  std::atomic<int64_t> rungAtNs{0};   // steady clock of the last ring: sleepers learn how long
                                      // their wake-up took
};
static_assert(sizeof(Doorbell) == 64);

enum class FenceMode : uint32_t { kFull = 0, kAsymmetric = 1 };

// Registers this process for asymmetric barriers (idempotent); false where the kernel refuses.
bool joinAsymmetricFences();

// The sleeper's side of the barrier (after announcing itself, before its last check).
void sleeperFence(FenceMode mode);

// Wakes every thread blocked on bell.
void wakeSleepers(Doorbell& bell);

// Blocks until bell is rung, timeoutNs passed or a signal arrived; at once if it was rung since
// its seq read `seen`.
void sleepOnBell(Doorbell& bell, uint32_t seen, long timeoutNs);

// The doorbells of the ranks that share one arena: `lanes` per rank (one per kind of thread that
// waits: a communicator's collectives, its point-to-point engine), and a count of the sleepers
// over all of them so that a publish nobody sleeps for costs one load.
class DoorbellBoard {
 public:
  DoorbellBoard() = default;
  DoorbellBoard(Doorbell* bells, std::atomic<uint32_t>* sleeping, int nranks, FenceMode mode)
      : bells_(bells), sleeping_(sleeping), nranks_(nranks), mode_(mode) {}

  explicit operator bool() const { return bells_ != nullptr; }
  FenceMode mode() const { return mode_; }
  Doorbell& bell(int lane, int rank) const { return bells_[lane * nranks_ + rank]; }
  std::atomic<uint32_t>& sleeping() const { return *sleeping_; }

  // After a store that may unblock `rank`'s thread of `lane` (a channel's peer).
  void ring(int lane, int rank) const {
    writerFence();
    Doorbell& b = bell(lane, rank);
    if (b.sleepers.load(std::memory_order_relaxed) != 0) wakeSleepers(b);
  }
  // After a store that any rank may wait for (rank `self`'s step flags): wakes the sleepers that
  // wait for `self` or for anyone.
  void ringAwaiting(int lane, int self) const {
    writerFence();
    if (sleeping_->load(std::memory_order_relaxed) == 0) return;
    ringAwaitingSlow(lane, self);
  }
  // Every sleeper, whatever it waits for (an abort).
  void ringAll(int lanes) const;

 private:
  void writerFence() const {
    if (mode_ == FenceMode::kAsymmetric)
      std::atomic_signal_fence(std::memory_order_seq_cst);
    else
      std::atomic_thread_fence(std::memory_order_seq_cst);
  }
  void ringAwaitingSlow(int lane, int self) const;

  Doorbell* bells_ = nullptr;
  std::atomic<uint32_t>* sleeping_ = nullptr;
  int nranks_ = 0;
  FenceMode mode_ = FenceMode::kFull;
};

}  // namespace loom
