// Doorbells (base/doorbell.hpp) and the waits that sleep on them (base/waiter.hpp), between
// threads of one process: the futex is the shared kind, so the same holds across processes.
#include "base/doorbell.hpp"

#include <gtest/gtest.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <fstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "base/waiter.hpp"

namespace loom {
namespace {

// Two ranks' doorbells, two lanes each, as an arena lays them out.
struct Board {
  explicit Board(FenceMode mode = FenceMode::kFull)
      : bells(4), board(bells.data(), &sleeping, 2, mode) {}
  std::vector<Doorbell> bells;
  std::atomic<uint32_t> sleeping{0};
  DoorbellBoard board;
};

// Pretends that rank `rank` sleeps on `lane` waiting for `awaiting`.
void announce(Board& b, int lane, int rank, int awaiting) {
  Doorbell& bell = b.board.bell(lane, rank);
  bell.awaiting.store(awaiting);
  bell.sleepers.fetch_add(1);
  b.sleeping.fetch_add(1);
}

TEST(Doorbell, RingsOnlyWhereSomeoneSleeps) {
  Board b;
  b.board.ring(0, 1);
  b.board.ringAwaiting(0, 0);
  EXPECT_EQ(b.board.bell(0, 1).seq.load(), 0u);
  announce(b, 0, 1, -1);
  b.board.ring(0, 1);
  EXPECT_EQ(b.board.bell(0, 1).seq.load(), 1u);
  EXPECT_EQ(b.board.bell(1, 1).seq.load(), 0u);  // the other lane is another thread's
}

TEST(Doorbell, StepFlagsWakeOnlyTheirWaiters) {
  Board b(FenceMode::kFull);
  std::vector<Doorbell> three(3);
  std::atomic<uint32_t> sleeping{0};
  DoorbellBoard board(three.data(), &sleeping, 3, FenceMode::kFull);
  // Rank 0 sleeps waiting for rank 2's flag.
  three[0].awaiting.store(2);
  three[0].sleepers.store(1);
  sleeping.store(1);
  board.ringAwaiting(0, 1);  // rank 1 published: not what rank 0 waits for
  EXPECT_EQ(three[0].seq.load(), 0u);
  board.ringAwaiting(0, 2);
  EXPECT_EQ(three[0].seq.load(), 1u);
  three[0].awaiting.store(-1);  // waiting for any rank
  board.ringAwaiting(0, 1);
  EXPECT_EQ(three[0].seq.load(), 2u);
}

TEST(Doorbell, AbortRingsEverySleeper) {
  Board b;
  announce(b, 0, 0, 1);
  announce(b, 1, 1, 0);
  b.board.ringAll(2);
  EXPECT_EQ(b.board.bell(0, 0).seq.load(), 1u);
  EXPECT_EQ(b.board.bell(1, 1).seq.load(), 1u);
  EXPECT_EQ(b.board.bell(0, 1).seq.load(), 0u);  // nobody sleeps there
}

// Whether thread `tid` of this process is blocked (state S in /proc).
bool blocked(pid_t tid) {
  std::ifstream stat("/proc/self/task/" + std::to_string(tid) + "/stat");
  std::string line;
  std::getline(stat, line);
  size_t end = line.rfind(')');  // the name may hold spaces and parentheses
  return end != std::string::npos && end + 2 < line.size() && line[end + 2] == 'S';
}

// A waiter blocked on its doorbell is woken by the ring that follows the store it waits for: the
// sleep it was in ends by the ring, not by a timeout.
void sleeperWokenByRing(FenceMode mode) {
  Board b(mode);
  std::atomic<uint64_t> flag{0};
  std::atomic<pid_t> sleeperTid{0};
  Waiter waiter(b.board, 0, 0);
  std::thread writer([&] {
    // Announced, and blocked (in the futex: nothing else blocks after the announcement).
    while (sleeperTid.load() == 0 || b.board.bell(0, 0).sleepers.load() == 0 ||
           !blocked(sleeperTid.load()))
      std::this_thread::yield();
    flag.store(1, std::memory_order_release);
    b.board.ringAwaiting(0, 1);
  });
  sleeperTid.store(static_cast<pid_t>(syscall(SYS_gettid)));
  waiter.until([&] { return flag.load(std::memory_order_acquire) == 1; }, [] {}, 1);
  writer.join();
  EXPECT_GE(waiter.counters().sleeps, 1u);
  EXPECT_LT(waiter.counters().timeouts, waiter.counters().sleeps);
  EXPECT_EQ(b.board.bell(0, 0).sleepers.load(), 0u);
  EXPECT_EQ(b.sleeping.load(), 0u);
}

TEST(Waiter, SleeperIsWokenByTheRingWithFullFences) { sleeperWokenByRing(FenceMode::kFull); }

TEST(Waiter, SleeperIsWokenByTheRingWithAsymmetricFences) {
  if (!joinAsymmetricFences()) GTEST_SKIP() << "membarrier(2) GLOBAL_EXPEDITED refused here";
  sleeperWokenByRing(FenceMode::kAsymmetric);
}

// Two threads hand a counter back and forth through flags, sleeping between turns: every value
// arrives, in order, whatever the interleaving of a store and the other side going to sleep.
TEST(Waiter, PingPongLosesNoWakeUp) {
  Board b(joinAsymmetricFences() ? FenceMode::kAsymmetric : FenceMode::kFull);
  std::atomic<uint64_t> turn{0};
  constexpr uint64_t kRounds = 20000;
  auto player = [&](int rank) {
    Waiter waiter(b.board, 0, rank);
    for (uint64_t i = rank; i < kRounds; i += 2) {
      waiter.until([&] { return turn.load(std::memory_order_acquire) == i; }, [] {}, 1 - rank);
      turn.store(i + 1, std::memory_order_release);
      b.board.ringAwaiting(0, rank);
    }
  };
  std::thread other(player, 1);
  player(0);
  other.join();
  EXPECT_EQ(turn.load(), kRounds);
}

TEST(Waiter, HealthCheckEndsASleepThatIsNeverRung) {
  Board b;
  Waiter waiter(b.board, 0, 0);
  int checks = 0;
  EXPECT_THROW(waiter.until([] { return false; },
                            [&] {
                              if (++checks == 3) throw std::runtime_error("peer died");
                            }),
               std::runtime_error);
  EXPECT_EQ(b.sleeping.load(), 0u);  // no sleeper left announced
}

}  // namespace
}  // namespace loom
