#include "base/doorbell.hpp"

#include <linux/futex.h>
#include <linux/membarrier.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <climits>

namespace loom {

namespace {
long membarrier(int cmd) { return syscall(SYS_membarrier, cmd, 0, 0); }
}  // namespace

bool joinAsymmetricFences() {
  long supported = membarrier(MEMBARRIER_CMD_QUERY);
  if (supported < 0 || (supported & MEMBARRIER_CMD_GLOBAL_EXPEDITED) == 0 ||
      (supported & MEMBARRIER_CMD_REGISTER_GLOBAL_EXPEDITED) == 0)
    return false;
  return membarrier(MEMBARRIER_CMD_REGISTER_GLOBAL_EXPEDITED) == 0;
}

void sleeperFence(FenceMode mode) {
  std::atomic_thread_fence(std::memory_order_seq_cst);
  // Cannot fail once every process registered; if it did, the sleep would still end at its
  // timeout, so the wait stays bounded.
  if (mode == FenceMode::kAsymmetric) (void)membarrier(MEMBARRIER_CMD_GLOBAL_EXPEDITED);
}

// Shared (not FUTEX_PRIVATE) futex operations: the word lives in memory mapped by several
// processes.
void wakeSleepers(Doorbell& bell) {
  timespec now{};
  clock_gettime(CLOCK_MONOTONIC,
                &now);  // std::chrono::steady_clock's clock, the same in every process
  bell.rungAtNs.store(now.tv_sec * 1000000000LL + now.tv_nsec, std::memory_order_relaxed);
  bell.seq.fetch_add(1, std::memory_order_release);
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(&bell.seq), FUTEX_WAKE, INT_MAX, nullptr, nullptr,
          0);
}

void sleepOnBell(Doorbell& bell, uint32_t seen, long timeoutNs) {
  timespec ts{timeoutNs / 1000000000, timeoutNs % 1000000000};
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(&bell.seq), FUTEX_WAIT, seen, &ts, nullptr, 0);
}

void DoorbellBoard::ringAwaitingSlow(int lane, int self) const {
  for (int r = 0; r < nranks_; ++r) {
    if (r == self) continue;
    Doorbell& b = bell(lane, r);
    if (b.sleepers.load(std::memory_order_acquire) == 0) continue;
    int32_t awaiting = b.awaiting.load(std::memory_order_relaxed);
    if (awaiting == self || awaiting < 0) wakeSleepers(b);
  }
}

void DoorbellBoard::ringAll(int lanes) const {
  std::atomic_thread_fence(std::memory_order_seq_cst);
  for (int i = 0; i < lanes * nranks_; ++i)
    if (bells_[i].sleepers.load(std::memory_order_relaxed) != 0) wakeSleepers(bells_[i]);
}

}  // namespace loom
