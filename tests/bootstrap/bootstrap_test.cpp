#include "bootstrap/bootstrap.hpp"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <functional>
#include <memory>
#include <thread>
#include <vector>

#include "base/error.hpp"
#include "bootstrap/protocol.hpp"
#include "bootstrap/socket.hpp"
#include "group_helpers.hpp"

namespace loom {
namespace {

// First in the file so that it forks before any test has started a thread.
TEST(BootstrapFailure, KilledChildProcessFailsOthersInsteadOfHanging) {
  int toChild[2], fromChild[2];
  ASSERT_EQ(pipe(toChild), 0);
  ASSERT_EQ(pipe(fromChild), 0);
  pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    close(toChild[1]);
    close(fromChild[0]);
    loomUniqueId raw;
    char status = 'E';
    if (read(toChild[0], &raw, sizeof(raw)) == static_cast<ssize_t>(sizeof(raw))) {
      try {
        Bootstrap b(unpackUniqueId(raw), 2, 3, "child", quickOptions(5000));
        b.allGather("c");
        status = 'R';
        (void)!write(fromChild[1], &status, 1);
        for (int i = 0; i < 300; ++i) usleep(100000);  // killed long before this ends
      } catch (...) {
      }
    }
    (void)!write(fromChild[1], &status, 1);
    _exit(1);
  }
  close(toChild[0]);
  close(fromChild[1]);
  UniqueId id = localRoot(JobSecret::random());
  loomUniqueId raw;
  packUniqueId(id, &raw);
  ASSERT_EQ(write(toChild[1], &raw, sizeof(raw)), static_cast<ssize_t>(sizeof(raw)));

  std::atomic<int> firstDone{0};
  std::atomic<int64_t> killedAtNs{0};
  std::thread killer([&] {
    char status = 0;
    if (read(fromChild[0], &status, 1) != 1 || status != 'R') return;
    while (firstDone.load() < 2) std::this_thread::sleep_for(std::chrono::milliseconds(5));
    // Let both parent ranks block inside the second allGather first.
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    killedAtNs = Clock::now().time_since_epoch().count();
    kill(pid, SIGKILL);
  });
  std::vector<double> failedAfterKill(2, -1);
  auto outcomes = parallel(2, [&](int r) {
    Bootstrap b(id, r, 3, "parent", quickOptions(10000));
    b.allGather("p");
    ++firstDone;
    try {
      b.allGather("second");
    } catch (...) {
      auto killedAt = Clock::time_point(Clock::duration(killedAtNs.load()));
      if (killedAtNs.load() != 0) failedAfterKill[r] = secondsSince(killedAt);
      throw;
    }
  });
  killer.join();
  close(toChild[1]);
  close(fromChild[0]);
  int wstatus = 0;
  ASSERT_EQ(waitpid(pid, &wstatus, 0), pid);
  EXPECT_TRUE(WIFSIGNALED(wstatus));
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(outcomes[r].code, loomRemoteError) << outcomes[r].message;
    EXPECT_NE(outcomes[r].message.find("rank 2"), std::string::npos) << outcomes[r].message;
    EXPECT_GE(failedAfterKill[r], 0.0);
    EXPECT_LT(failedAfterKill[r], 2.0);
  }
}

TEST(UniqueIdTest, PackUnpackRoundTrip) {
  UniqueId id;
  id.host = "fe80::1234:5678:9abc:def0";
  id.port = 54321;
  id.secret = JobSecret::random();
  id.jobNonce = 0x0123456789abcdefull;
  loomUniqueId raw;
  packUniqueId(id, &raw);
  UniqueId back = unpackUniqueId(raw);
  EXPECT_EQ(back.host, id.host);
  EXPECT_EQ(back.port, id.port);
  EXPECT_TRUE(back.secret.present);
  EXPECT_EQ(back.secret.hex(), id.secret.hex());
  EXPECT_EQ(back.jobNonce, id.jobNonce);

  id.secret = JobSecret();
  packUniqueId(id, &raw);
  back = unpackUniqueId(raw);
  EXPECT_FALSE(back.secret.present);
  EXPECT_EQ(back.secret.hex(), "");
}

TEST(UniqueIdTest, RejectsBadMagicVersionAndLongHost) {
  UniqueId id;
  id.host = "127.0.0.1";
  id.port = 1;
  loomUniqueId raw;
  packUniqueId(id, &raw);
  loomUniqueId bad = raw;
  bad.internal[0] ^= 0x5a;
  EXPECT_EQ(capture([&] { unpackUniqueId(bad); }).code, loomInvalidArgument);
  bad = raw;
  bad.internal[4] = 99;  // version
  EXPECT_EQ(capture([&] { unpackUniqueId(bad); }).code, loomInvalidArgument);
  loomUniqueId zeros;
  std::memset(&zeros, 0, sizeof(zeros));
  EXPECT_EQ(capture([&] { unpackUniqueId(zeros); }).code, loomInvalidArgument);
  id.host = std::string(200, 'h');
  EXPECT_EQ(capture([&] { packUniqueId(id, &raw); }).code, loomInvalidArgument);
}

TEST(JobSecretTest, HexAndDerive) {
  JobSecret s = JobSecret::fromHex("00112233445566778899AABBCCDDEEFF");
  EXPECT_TRUE(s.present);
  EXPECT_EQ(s.hex(), "00112233445566778899aabbccddeeff");
  EXPECT_EQ(JobSecret::fromHex(s.hex()).bytes, s.bytes);
  EXPECT_EQ(capture([] { JobSecret::fromHex("abc"); }).code, loomInvalidArgument);
  EXPECT_EQ(capture([] { JobSecret::fromHex(std::string(32, 'g')); }).code, loomInvalidArgument);
  EXPECT_NE(JobSecret::random().hex(), JobSecret::random().hex());

  JobSecret a = deriveSecret(s, 7, "split");
  EXPECT_TRUE(a.present);
  EXPECT_EQ(a.hex(), deriveSecret(s, 7, "split").hex());
  EXPECT_NE(a.hex(), deriveSecret(s, 8, "split").hex());
  EXPECT_NE(a.hex(), deriveSecret(s, 7, "other").hex());
  EXPECT_NE(a.hex(), s.hex());
  EXPECT_FALSE(deriveSecret(JobSecret(), 7, "split").present);
}

class GroupSizes : public ::testing::TestWithParam<int> {};

TEST_P(GroupSizes, RendezvousAllGatherBarrier) {
  int n = GetParam();
  UniqueId id = localRoot(JobSecret::random());
  auto group = makeGroup(id, n);
  auto outcomes = parallel(n, [&](int r) {
    Bootstrap& b = *group[r];
    EXPECT_EQ(b.rank(), r);
    EXPECT_EQ(b.nranks(), n);
    ASSERT_EQ(static_cast<int>(b.rankInfos().size()), n);
    for (int k = 0; k < n; ++k) EXPECT_EQ(b.rankInfos()[k], infoFor(k));
    // Different sizes per rank, including empty.
    auto all = b.allGather(std::string(static_cast<size_t>(r) * 1000, static_cast<char>('A' + r)));
    ASSERT_EQ(static_cast<int>(all.size()), n);
    for (int k = 0; k < n; ++k)
      EXPECT_EQ(all[k], std::string(static_cast<size_t>(k) * 1000, static_cast<char>('A' + k)));
    b.barrier();
    b.checkHealth();
  });
  for (auto& o : outcomes) EXPECT_EQ(o.code, loomSuccess) << o.message;
}

INSTANTIATE_TEST_SUITE_P(Bootstrap, GroupSizes, ::testing::Values(1, 2, 3, 5, 8));

TEST(BootstrapTest, HundredBackToBackAllGathers) {
  const int n = 4;
  UniqueId id = localRoot(JobSecret::random());
  auto group = makeGroup(id, n);
  auto outcomes = parallel(n, [&](int r) {
    for (int i = 0; i < 100; ++i) {
      auto all = group[r]->allGather(std::to_string(i * 10 + r));
      for (int k = 0; k < n; ++k) ASSERT_EQ(all[k], std::to_string(i * 10 + k));
      group[r]->checkHealth();
    }
  });
  for (auto& o : outcomes) EXPECT_EQ(o.code, loomSuccess) << o.message;
}

TEST(BootstrapTest, LargeAllGather) {
  const int n = 3;
  UniqueId id = localRoot(JobSecret::random());
  auto group = makeGroup(id, n);
  auto outcomes = parallel(n, [&](int r) {
    std::string mine(size_t{4} << 20, static_cast<char>('0' + r));
    auto all = group[r]->allGather(mine);
    for (int k = 0; k < n; ++k) EXPECT_EQ(all[k], std::string(size_t{4} << 20, '0' + k));
  });
  for (auto& o : outcomes) EXPECT_EQ(o.code, loomSuccess) << o.message;
}

TEST(BootstrapTest, WorksOverIpv6Loopback) {
  UniqueId id;
  try {
    id = startRendezvousRoot("::1", 0, JobSecret::random(), 10000);
  } catch (const Error& e) {
    GTEST_SKIP() << "no IPv6 loopback: " << e.what();
  }
  EXPECT_EQ(id.host, "::1");
  auto group = makeGroup(id, 3);
  expectGroupWorks(group);
}

TEST(BootstrapTest, UnauthenticatedJobStillWorks) {
  UniqueId id = localRoot(JobSecret());
  auto group = makeGroup(id, 2);
  expectGroupWorks(group);
}

TEST(BootstrapTest, RanksMayStartBeforeTheRoot) {
  // Reserve a port, free it, and start the root on it only after the ranks began retrying.
  uint16_t port;
  {
    Listener probe = listenTcp("127.0.0.1", 0);
    port = probe.port;
  }
  UniqueId id;
  id.host = "127.0.0.1";
  id.port = port;
  id.secret = JobSecret::random();
  std::thread late([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    startRendezvousRoot("127.0.0.1", port, id.secret, 10000);
  });
  auto group = makeGroup(id, 2);
  late.join();
  expectGroupWorks(group);
}

TEST(BootstrapTest, RootFailsAtOnceIfItCannotBind) {
  UniqueId first = localRoot(JobSecret::random(), 1000);
  auto start = Clock::now();
  EXPECT_EQ(capture([&] { startRendezvousRoot("127.0.0.1", first.port, JobSecret(), 1000); }).code,
            loomSystemError);
  EXPECT_LT(secondsSince(start), 0.5);
}

TEST(BootstrapTest, InfoSizeLimits) {
  UniqueId id = localRoot(JobSecret::random());
  std::string big(wire::kMaxInfoBytes, 'x');
  auto outcomes = parallel(2, [&](int r) {
    Bootstrap b(id, r, 2, big, quickOptions());
    EXPECT_EQ(b.rankInfos()[1 - r], big);
  });
  for (auto& o : outcomes) EXPECT_EQ(o.code, loomSuccess) << o.message;
  Outcome tooBig = capture([&] { Bootstrap b(id, 0, 1, big + "x", quickOptions()); });
  EXPECT_EQ(tooBig.code, loomInvalidArgument);
}

TEST(BootstrapTest, RankAndNranksMismatchesAreReported) {
  EXPECT_EQ(capture([] {
              Bootstrap b(UniqueId{"127.0.0.1", 1, JobSecret(), 0}, 3, 2, "", quickOptions());
            }).code,
            loomInvalidArgument);
  EXPECT_EQ(capture([] {
              Bootstrap b(UniqueId{"127.0.0.1", 1, JobSecret(), 0}, 0, 0, "", quickOptions());
            }).code,
            loomInvalidArgument);

  UniqueId id = localRoot(JobSecret::random());
  std::unique_ptr<Bootstrap> rank0, rank1;
  std::thread first([&] { rank0 = std::make_unique<Bootstrap>(id, 0, 2, "a", quickOptions()); });
  std::this_thread::sleep_for(std::chrono::milliseconds(200));  // rank 0 is registered by now
  Outcome duplicate = capture([&] { Bootstrap b(id, 0, 2, "dup", quickOptions()); });
  EXPECT_EQ(duplicate.code, loomInvalidArgument) << duplicate.message;
  EXPECT_NE(duplicate.message.find("already taken"), std::string::npos) << duplicate.message;
  Outcome wrongSize = capture([&] { Bootstrap b(id, 1, 3, "wrong", quickOptions()); });
  EXPECT_EQ(wrongSize.code, loomInvalidArgument) << wrongSize.message;
  EXPECT_NE(wrongSize.message.find("nranks"), std::string::npos) << wrongSize.message;
  Outcome outOfRange = capture([&] { Bootstrap b(id, 2, 3, "range", quickOptions()); });
  EXPECT_EQ(outOfRange.code, loomInvalidArgument) << outOfRange.message;
  // The job itself is unharmed.
  rank1 = std::make_unique<Bootstrap>(id, 1, 2, "b", quickOptions());
  first.join();
  ASSERT_TRUE(rank0 && rank1);
  EXPECT_EQ(rank1->rankInfos()[0], "a");
}

TEST(BootstrapFailure, MissingRankTimesOut) {
  UniqueId id = localRoot(JobSecret::random(), 1000);
  auto outcomes = parallel(2, [&](int r) { Bootstrap b(id, r, 3, "", quickOptions(1000)); });
  for (auto& o : outcomes) {
    EXPECT_EQ(o.code, loomTimeout) << o.message;
    EXPECT_LT(o.seconds, 1.5);
    EXPECT_GT(o.seconds, 0.8);
  }
}

TEST(BootstrapFailure, AbortFlagUnblocksAllGather) {
  UniqueId id = localRoot(JobSecret::random());
  std::atomic<bool> abortFlags[2] = {false, false};
  std::vector<std::unique_ptr<Bootstrap>> group(2);
  auto setup = parallel(2, [&](int r) {
    Bootstrap::Options options = quickOptions();
    options.abortFlag = &abortFlags[r];
    group[r] = std::make_unique<Bootstrap>(id, r, 2, "", options);
  });
  for (auto& o : setup) ASSERT_EQ(o.code, loomSuccess) << o.message;
  // Each rank waits alone in an allGather (the other never joins) until its flag is set.
  for (int r = 0; r < 2; ++r) {
    std::thread setter([&] {
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
      abortFlags[r] = true;
    });
    auto start = Clock::now();
    Outcome o = capture([&] { group[r]->allGather("x"); });
    double waited = secondsSince(start);
    setter.join();
    EXPECT_EQ(o.code, loomRemoteError) << o.message;
    EXPECT_NE(o.message.find("aborted"), std::string::npos) << o.message;
    EXPECT_LT(waited, 0.7);
  }
}

void expectOthersFailWhenOneIsDestroyed(int victim) {
  const int n = 3;
  UniqueId id = localRoot(JobSecret::random());
  auto group = makeGroup(id, n);
  auto outcomes = parallel(n, [&](int r) {
    if (r == victim) {
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
      group[r].reset();  // as if the process died while the others wait for it
      return;
    }
    group[r]->allGather("x");
  });
  for (int r = 0; r < n; ++r) {
    if (r == victim) continue;
    EXPECT_EQ(outcomes[r].code, loomRemoteError) << outcomes[r].message;
    EXPECT_NE(outcomes[r].message.find("rank " + std::to_string(victim)), std::string::npos)
        << outcomes[r].message;
    EXPECT_LT(outcomes[r].seconds, 2.0);
    // The failure sticks.
    EXPECT_EQ(capture([&] { group[r]->barrier(); }).code, loomRemoteError);
    EXPECT_EQ(capture([&] { group[r]->checkHealth(); }).code, loomRemoteError);
  }
}

TEST(BootstrapFailure, DestroyedLeafFailsOthers) { expectOthersFailWhenOneIsDestroyed(2); }
TEST(BootstrapFailure, DestroyedRank0FailsOthers) { expectOthersFailWhenOneIsDestroyed(0); }

TEST(BootstrapFailure, CheckHealthNoticesADeadPeer) {
  UniqueId id = localRoot(JobSecret::random());
  auto group = makeGroup(id, 3);
  group[1].reset();
  Outcome o = firstHealthFailure(*group[0], 2.0);
  EXPECT_EQ(o.code, loomRemoteError) << o.message;
  EXPECT_NE(o.message.find("rank 1"), std::string::npos) << o.message;
  // Rank 0 relayed the death: rank 2 learns it too, without a collective.
  o = firstHealthFailure(*group[2], 2.0);
  EXPECT_EQ(o.code, loomRemoteError) << o.message;
  EXPECT_NE(o.message.find("rank 1"), std::string::npos) << o.message;
}

TEST(BootstrapFailure, BroadcastAbortReachesEveryone) {
  for (int origin : {0, 2}) {
    UniqueId id = localRoot(JobSecret::random());
    auto group = makeGroup(id, 3);
    auto start = Clock::now();
    group[origin]->broadcastAbort("device fell off the bus");
    EXPECT_LT(secondsSince(start), 0.2);
    auto outcomes = parallel(3, [&](int r) {
      if (r != origin) group[r]->allGather("x");
    });
    for (int r = 0; r < 3; ++r) {
      if (r == origin) continue;
      EXPECT_EQ(outcomes[r].code, loomRemoteError) << outcomes[r].message;
      EXPECT_NE(outcomes[r].message.find("rank " + std::to_string(origin)), std::string::npos)
          << outcomes[r].message;
      EXPECT_NE(outcomes[r].message.find("device fell off the bus"), std::string::npos)
          << outcomes[r].message;
      EXPECT_LT(outcomes[r].seconds, 2.0);
    }
    EXPECT_EQ(capture([&] { group[origin]->barrier(); }).code, loomRemoteError);
  }
}

TEST(BootstrapFailure, BroadcastAbortDuringACollectiveEndsItEverywhere) {
  UniqueId id = localRoot(JobSecret::random());
  auto group = makeGroup(id, 3);
  std::thread aborter([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    group[1]->broadcastAbort("watchdog fired");
  });
  // Ranks 0 and 1 wait for rank 2, which is busy elsewhere; rank 1 then aborts from the side.
  auto outcomes = parallel(2, [&](int r) { group[r]->allGather("x"); });
  aborter.join();
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(outcomes[r].code, loomRemoteError) << outcomes[r].message;
    EXPECT_NE(outcomes[r].message.find("rank 1 aborted"), std::string::npos) << outcomes[r].message;
    EXPECT_NE(outcomes[r].message.find("watchdog fired"), std::string::npos) << outcomes[r].message;
    EXPECT_LT(outcomes[r].seconds, 0.7);
  }
  Outcome late = capture([&] { group[2]->allGather("x"); });
  EXPECT_EQ(late.code, loomRemoteError) << late.message;
  EXPECT_NE(late.message.find("watchdog fired"), std::string::npos) << late.message;
}

TEST(BootstrapFailure, CheckHealthSeesAnAbortWithoutACollective) {
  UniqueId id = localRoot(JobSecret::random());
  auto group = makeGroup(id, 2);
  group[1]->checkHealth();
  group[0]->checkHealth();
  group[1]->broadcastAbort("oom");
  Outcome o = firstHealthFailure(*group[0], 2.0);
  EXPECT_EQ(o.code, loomRemoteError);
  EXPECT_NE(o.message.find("rank 1 aborted: oom"), std::string::npos) << o.message;
}

TEST(BootstrapTest, AnswerOfARank0ThatLeavesAtOnceStillArrives) {
  // Rank 0 answers a barrier and at once destroys its bootstrap (a last barrier, then
  // loomCommDestroy) or aborts (LOOM_CHECK found a mismatch in what the barrier gathered). A leaf
  // that reads the answer only after the EOF or the abort arrived behind it must still get the
  // answer; the abort is for its next call. Eight ranks on few cores make such late readers
  // common; the rounds make at least one near certain.
  const int n = 8;
  for (bool abort : {false, true}) {
    for (int round = 0; round < 50; ++round) {
      UniqueId id = localRoot(JobSecret::random());
      auto group = makeGroup(id, n);
      auto outcomes = parallel(n, [&](int r) {
        group[r]->barrier();
        if (r != 0) return;
        if (abort) {
          group[0]->broadcastAbort("mismatch");
        } else {
          group[0].reset();
        }
      });
      for (int r = 1; r < n; ++r)
        ASSERT_EQ(outcomes[r].code, loomSuccess)
            << (abort ? "abort" : "destroy") << " round " << round << ", rank " << r << ": "
            << outcomes[r].message;
      if (!abort) continue;
      Outcome next = capture([&] { group[1]->barrier(); });
      EXPECT_EQ(next.code, loomRemoteError) << next.message;
      EXPECT_NE(next.message.find("mismatch"), std::string::npos) << next.message;
    }
  }
}

TEST(BootstrapTest, CheckHealthKeepsDataOfALeafThatIsAhead) {
  UniqueId id = localRoot(JobSecret::random());
  auto group = makeGroup(id, 2);
  std::thread leaf([&] {
    auto all = group[1]->allGather("from 1");
    EXPECT_EQ(all[0], "from 0");
  });
  // Rank 0 probes while rank 1's contribution is already waiting on the connection.
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  group[0]->checkHealth();
  auto all = group[0]->allGather("from 0");
  leaf.join();
  EXPECT_EQ(all[1], "from 1");
}

}  // namespace
}  // namespace loom
