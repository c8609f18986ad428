// Communicator lifetime inside one process (ranks are threads): calls on a destroyed communicator
// or one that another thread is destroying are refused, never crash; loomCommAbort from another
// thread ends a waiting collective; a peer that never comes makes the wait end at the timeout; a
// non-blocking communicator queues its work and reports errors through loomCommGetAsyncError.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <string>
#include <thread>
#include <vector>

#include "api_test_helpers.hpp"
#include "loom/loom.h"

namespace loom::test {
namespace {

bool mentions(const std::string& text, const char* words) {
  return text.find(words) != std::string::npos;
}

// The peer of a rank that failed is told instead of waiting out its own timeout. Its first call
// may still succeed: the failed rank may have published its contribution before it failed.
void expectPeerFailsFast(loomComm_t peer, const char* words) {
  std::vector<float> data(4096, 1.0f);
  loomResult_t result = loomSuccess;
  Clock::time_point start = Clock::now();
  for (int call = 0; call < 2 && result == loomSuccess; ++call)
    result =
        loomAllReduce(data.data(), data.data(), data.size(), loomFloat, loomSum, peer, nullptr);
  EXPECT_EQ(result, loomRemoteError) << lastError();
  EXPECT_TRUE(mentions(lastError(), words)) << lastError();
  EXPECT_LT(secondsSince(start), 1.0);
}

// ----------------------------------------------------------------------------------------------
// Destroyed communicators.

TEST(Destroyed, EveryCallIsInvalidUsage) {
  loomComm_t c = initSolo();
  ASSERT_LOOM(loomCommDestroy(c));
  float s[2] = {1, 2}, r[2] = {};
  size_t one[1] = {1}, zero[1] = {0};
  int value = 0;
  const char* name = nullptr;
  loomResult_t state;
  loomComm_t child = nullptr;
  auto expectRefused = [](const char* call, loomResult_t result) {
    EXPECT_EQ(result, loomInvalidUsage) << call << ": " << lastError();
    EXPECT_TRUE(mentions(lastError(), "destroyed")) << call << ": " << lastError();
  };
#define EXPECT_DESTROYED(call) expectRefused(#call, (call))
  EXPECT_DESTROYED(loomAllReduce(s, r, 2, loomFloat, loomSum, c, nullptr));
  EXPECT_DESTROYED(loomBroadcast(s, r, 2, loomFloat, 0, c, nullptr));
  EXPECT_DESTROYED(loomReduce(s, r, 2, loomFloat, loomSum, 0, c, nullptr));
  EXPECT_DESTROYED(loomAllGather(s, r, 1, loomFloat, c, nullptr));
  EXPECT_DESTROYED(loomReduceScatter(s, r, 1, loomFloat, loomSum, c, nullptr));
  EXPECT_DESTROYED(loomAllToAll(s, r, 1, loomFloat, c, nullptr));
  EXPECT_DESTROYED(loomAllToAllv(s, one, zero, r, one, zero, loomFloat, c, nullptr));
  EXPECT_DESTROYED(loomGather(s, r, 1, loomFloat, 0, c, nullptr));
  EXPECT_DESTROYED(loomScatter(s, r, 1, loomFloat, 0, c, nullptr));
  EXPECT_DESTROYED(loomSend(s, 1, loomFloat, 0, c, nullptr));
  EXPECT_DESTROYED(loomRecv(r, 1, loomFloat, 0, c, nullptr));
  EXPECT_DESTROYED(loomBarrier(c, nullptr));
  EXPECT_DESTROYED(loomCommSplit(c, 0, 0, &child, nullptr));
  EXPECT_DESTROYED(loomCommFinalize(c));
  EXPECT_DESTROYED(loomCommDestroy(c));
  EXPECT_DESTROYED(loomCommAbort(c));
  EXPECT_DESTROYED(loomCommGetAsyncError(c, &state));
  EXPECT_DESTROYED(loomCommCount(c, &value));
  EXPECT_DESTROYED(loomCommUserRank(c, &value));
  EXPECT_DESTROYED(loomCommGetAlgorithm(c, loomFuncAllReduce, 1, loomFloat, &name));
#undef EXPECT_DESTROYED
  EXPECT_EQ(child, nullptr);
}

TEST(Destroyed, GroupWhoseCommunicatorWasDestroyedBeforeGroupEnd) {
  loomComm_t c = initSolo();
  float s[2] = {1, 2}, r[2] = {};
  ASSERT_LOOM(loomGroupStart());
  EXPECT_LOOM(loomAllReduce(s, r, 2, loomFloat, loomSum, c, nullptr));  // recorded only
  EXPECT_LOOM(loomCommDestroy(c));
  EXPECT_EQ(loomGroupEnd(), loomInvalidUsage) << lastError();
  EXPECT_TRUE(mentions(lastError(), "destroyed")) << lastError();
  // The failed group left nothing behind for the next one.
  loomComm_t d = initSolo();
  ASSERT_LOOM(loomGroupStart());
  EXPECT_LOOM(loomAllReduce(s, r, 2, loomFloat, loomSum, d, nullptr));
  EXPECT_LOOM(loomGroupEnd());
  EXPECT_EQ(r[1], 2.0f);
  EXPECT_LOOM(loomCommDestroy(d));
}

// ----------------------------------------------------------------------------------------------
// A communicator that another thread destroys while this one calls it.

// Calls entry points on c until they are refused; every result must be a success (or
// loomInProgress: non-blocking) or loomInvalidUsage with a message, and once refused, never a
// success again: a handle being destroyed cannot come back to life. Collectives only where the
// peers take part (a one-rank communicator).
void hammer(loomComm_t c, bool collectives, int* calls, std::string* problem) {
  float s[64] = {}, r[64] = {};
  bool refused = false;
  int kinds = collectives ? 5 : 3;
  Clock::time_point start = Clock::now();
  for (int i = 0; secondsSince(start) < 10 && problem->empty(); ++i) {
    loomResult_t result;
    int n = 0;
    const char* name = nullptr;
    loomResult_t async;
    switch (i % kinds) {
      case 0:
        result = loomCommCount(c, &n);
        break;
      case 1:
        result = loomCommGetAlgorithm(c, loomFuncAllReduce, 64, loomFloat, &name);
        break;
      case 2:
        result = loomCommGetAsyncError(c, &async);
        break;
      case 3:
        result = loomAllReduce(s, r, 64, loomFloat, loomSum, c, nullptr);
        break;
      default: {
        loomGroupStart();
        loomResult_t recorded = loomBroadcast(s, r, 64, loomFloat, 0, c, nullptr);
        loomResult_t ended = loomGroupEnd();
        result = recorded != loomSuccess ? recorded : ended;
        break;
      }
    }
    ++*calls;
    bool ok = result == loomSuccess || result == loomInProgress;
    if (ok && refused) *problem = "a call succeeded after one was refused";
    if (!ok && result != loomInvalidUsage)
      *problem =
          std::string("unexpected result ") + loomGetErrorString(result) + ": " + lastError();
    if (result == loomInvalidUsage && lastError().empty()) *problem = "refused without a message";
    // Watch until the destruction is complete: nothing changes after that.
    if (result == loomInvalidUsage && mentions(lastError(), "was destroyed")) return;
    refused |= result == loomInvalidUsage;
  }
}

TEST(ConcurrentDestroy, OneRankCommunicator) {
  for (int round = 0; round < 30; ++round) {
    loomComm_t c = initSolo();
    int calls = 0;
    std::string problem;
    std::thread caller([&] { hammer(c, true, &calls, &problem); });
    std::this_thread::sleep_for(std::chrono::microseconds(200 * (round % 10)));
    EXPECT_LOOM(loomCommDestroy(c));
    caller.join();
    ASSERT_TRUE(problem.empty()) << "round " << round << " after " << calls
                                 << " calls: " << problem;
  }
}

TEST(ConcurrentDestroy, NonBlockingCommunicatorDuringInit) {
  // Destroying a non-blocking communicator while its initialization still runs must not let it
  // come back to life when the initialization finishes.
  for (int round = 0; round < 20; ++round) {
    loomConfig_t config = configWithTimeout(10000, 0);
    std::vector<loomComm_t> comms = initRanks(2, &config);
    int calls = 0;
    std::string problem;
    std::thread caller([&] { hammer(comms[0], false, &calls, &problem); });
    EXPECT_LOOM(loomCommDestroy(comms[0]));
    caller.join();
    EXPECT_TRUE(problem.empty()) << "round " << round << " after " << calls
                                 << " calls: " << problem;
    // Destroying rank 0 cancelled its initialization, so rank 1's can only time out; aborting it
    // must end it at once instead.
    Clock::time_point start = Clock::now();
    EXPECT_LOOM(loomCommAbort(comms[1]));
    EXPECT_LT(secondsSince(start), 5.0) << "round " << round;
  }
}

TEST(ConcurrentDestroy, TwoRanksWhileThePeerKeepsCalling) {
  loomConfig_t config = configWithTimeout(2000);
  std::vector<loomComm_t> comms = initRanks(2, &config);
  std::string problems[2];
  double lastCallSeconds = 0;
  loomResult_t peerEnd = loomSuccess;
  onEachRank(comms, [&](int r) {
    std::vector<float> s(1024, 1.0f), d(1024);
    if (r == 0) {
      std::thread destroyer([&] {
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
        EXPECT_LOOM(loomCommDestroy(comms[0]));
      });
      bool refused = false;
      for (Clock::time_point start = Clock::now(); secondsSince(start) < 10;) {
        loomResult_t res =
            loomAllReduce(s.data(), d.data(), 1024, loomFloat, loomSum, comms[0], nullptr);
        if (res == loomSuccess && refused) problems[0] = "success after a refusal";
        if (res != loomSuccess && res != loomInvalidUsage) problems[0] = lastError();
        if (res == loomInvalidUsage) {
          if (refused) break;
          refused = true;
        }
      }
      destroyer.join();
      return;
    }
    // Rank 1 keeps going until its peer is gone: the wait ends with an error within 2 x timeout.
    for (Clock::time_point begin = Clock::now(); secondsSince(begin) < 10;) {
      Clock::time_point start = Clock::now();
      peerEnd = loomAllReduce(s.data(), d.data(), 1024, loomFloat, loomSum, comms[1], nullptr);
      lastCallSeconds = secondsSince(start);
      if (peerEnd != loomSuccess) {
        problems[1] = lastError();
        break;
      }
    }
  });
  EXPECT_TRUE(problems[0].empty()) << problems[0];
  EXPECT_TRUE(peerEnd == loomTimeout || peerEnd == loomRemoteError) << problems[1];
  EXPECT_FALSE(problems[1].empty());
  EXPECT_LT(lastCallSeconds, 4.0);
  EXPECT_LOOM(loomCommDestroy(comms[1]));
}

// ----------------------------------------------------------------------------------------------
// Abort and timeout.

class AbortAndTimeout : public ::testing::TestWithParam<const char*> {
 protected:
  // LOOM_CHECK=1 makes each collective wait in the control plane first, through the bootstrap.
  ScopedEnv check_{"LOOM_CHECK", GetParam()};
};

INSTANTIATE_TEST_SUITE_P(Check, AbortAndTimeout, ::testing::Values("0", "1"));

TEST_P(AbortAndTimeout, AbortFromAnotherThreadEndsAWaitingCollective) {
  loomConfig_t config = configWithTimeout(30000);  // long: only the abort can end the wait soon
  std::vector<loomComm_t> comms = initRanks(2, &config);
  double abortSeconds = -1;
  std::thread aborter([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    Clock::time_point start = Clock::now();
    EXPECT_LOOM(loomCommAbort(comms[0]));
    abortSeconds = secondsSince(start);
  });
  std::vector<float> data(4096, 1.0f);
  Clock::time_point start = Clock::now();
  loomResult_t result =
      loomAllReduce(data.data(), data.data(), data.size(), loomFloat, loomSum, comms[0], nullptr);
  double waited = secondsSince(start);
  std::string message = lastError();
  aborter.join();
  EXPECT_TRUE(result == loomRemoteError || result == loomInvalidUsage)
      << loomGetErrorString(result) << ": " << message;
  EXPECT_TRUE(mentions(message, "abort")) << message;
  EXPECT_GT(waited, 0.25);
  EXPECT_LT(waited, 2.0);
  EXPECT_LT(abortSeconds, 2.0);
  // The handle is gone; the peer learned of the abort and fails fast instead of waiting 30 s.
  EXPECT_EQ(loomAllReduce(data.data(), data.data(), 4, loomFloat, loomSum, comms[0], nullptr),
            loomInvalidUsage);
  // Told the cause, not the echo of the abort in rank 0's own wait.
  expectPeerFailsFast(comms[1], "loomCommAbort called on rank 0");
  EXPECT_LOOM(loomCommDestroy(comms[1]));
}

TEST(Abort, IdleCommunicatorAndTwice) {
  loomComm_t c = initSolo();
  EXPECT_LOOM(loomCommAbort(c));
  EXPECT_EQ(loomCommAbort(c), loomInvalidUsage);
  EXPECT_FALSE(lastError().empty());
}

TEST_P(AbortAndTimeout, AbsentPeerEndsTheWaitAtTheTimeout) {
  loomConfig_t config = configWithTimeout(1000);
  std::vector<loomComm_t> comms = initRanks(2, &config);
  float data[8] = {1, 2, 3, 4, 5, 6, 7, 8};
  Clock::time_point start = Clock::now();
  loomResult_t result = loomAllReduce(data, data, 8, loomFloat, loomSum, comms[0], nullptr);
  double waited = secondsSince(start);
  std::string message = lastError();
  EXPECT_EQ(result, loomTimeout) << message;
  EXPECT_TRUE(mentions(message, "timed out")) << message;
  EXPECT_GE(waited, 1.0);
  EXPECT_LE(waited, 2.0);
  loomResult_t async = loomSuccess;
  EXPECT_LOOM(loomCommGetAsyncError(comms[0], &async));
  EXPECT_EQ(async, loomTimeout);
  EXPECT_TRUE(mentions(lastError(), "timed out")) << lastError();
  // Only loomInvalidArgument leaves a communicator usable: the next call reports the failure.
  EXPECT_EQ(loomAllReduce(data, data, 8, loomFloat, loomSum, comms[0], nullptr), loomTimeout);
  EXPECT_FALSE(lastError().empty());
  expectPeerFailsFast(comms[1], "rank 0");
  onEachRank(comms, [&](int r) { EXPECT_LOOM(loomCommDestroy(comms[r])); });
}

TEST(Timeout, PeerThatNeverInitializes) {
  loomUniqueId id;
  ASSERT_LOOM(loomGetUniqueId(&id));
  loomConfig_t config = configWithTimeout(1000);
  loomComm_t c = nullptr;
  Clock::time_point start = Clock::now();
  EXPECT_EQ(loomCommInitRankConfig(&c, 2, id, 0, &config), loomTimeout) << lastError();
  EXPECT_FALSE(lastError().empty());
  EXPECT_EQ(c, nullptr);
  EXPECT_GE(secondsSince(start), 0.9);
  EXPECT_LT(secondsSince(start), 2.0);
}

TEST(Failure, PointToPointSizeMismatchFailsAndSticks) {
  // 10 elements fit the channel's buffer, so the send completes before the receiver looks; 300000
  // do not, so the sender is still waiting when the receiver fails.
  for (size_t count : {size_t{10}, size_t{300000}}) {
    loomConfig_t config = configWithTimeout(20000);
    std::vector<loomComm_t> comms = initRanks(2, &config);
    loomResult_t first[2], next[2];
    std::string messages[2];
    double seconds[2];
    onEachRank(comms, [&](int r) {
      std::vector<int32_t> data(count + 2, r);
      Clock::time_point start = Clock::now();
      first[r] = r == 0 ? loomSend(data.data(), count, loomInt32, 1, comms[0], nullptr)
                        : loomRecv(data.data(), count + 2, loomInt32, 0, comms[1], nullptr);
      messages[r] = lastError();
      // Only loomInvalidArgument leaves a communicator usable: both sides now fail fast.
      for (int call = 0; call < 2; ++call) {
        next[r] =
            loomAllReduce(data.data(), data.data(), 12, loomInt32, loomSum, comms[r], nullptr);
        if (next[r] != loomSuccess) break;
      }
      seconds[r] = secondsSince(start);
    });
    std::string sizes[2] = {std::to_string(count * 4) + " bytes",
                            std::to_string(count * 4 + 8) + " bytes"};
    EXPECT_EQ(first[1], loomInvalidUsage) << messages[1];
    EXPECT_TRUE(mentions(messages[1], sizes[0].c_str()) && mentions(messages[1], sizes[1].c_str()))
        << messages[1];
    if (count == 10) {
      EXPECT_EQ(first[0], loomSuccess) << messages[0];
    } else {
      EXPECT_EQ(first[0], loomRemoteError) << messages[0];
    }
    EXPECT_EQ(next[1], loomInvalidUsage);
    EXPECT_EQ(next[0], loomRemoteError);
    for (int r = 0; r < 2; ++r) EXPECT_LT(seconds[r], 2.0) << "rank " << r << " count " << count;
    onEachRank(comms, [&](int r) { EXPECT_LOOM(loomCommDestroy(comms[r])); });
  }
}

// ----------------------------------------------------------------------------------------------
// Non-blocking communicators.

TEST(NonBlocking, InitAndCollectivesAreQueued) {
  loomConfig_t config = configWithTimeout(20000, 0);
  std::vector<loomComm_t> comms = initRanks(3, &config);
  std::vector<std::vector<int32_t>> data(3, std::vector<int32_t>(5000));
  onEachRank(comms, [&](int r) {
    for (int32_t& x : data[r]) x = r + 1;
    // Queued behind the initialization, which may still be running.
    for (int k = 0; k < 3; ++k) {
      loomResult_t res = loomAllReduce(data[r].data(), data[r].data(), data[r].size(), loomInt32,
                                       loomSum, comms[r], nullptr);
      EXPECT_TRUE(res == loomSuccess || res == loomInProgress) << lastError();
    }
    // A bad argument is refused at once, not queued.
    EXPECT_EQ(loomAllReduce(nullptr, data[r].data(), 1, loomInt32, loomSum, comms[r], nullptr),
              loomInvalidArgument);
    EXPECT_EQ(pollAsync(comms[r]), loomSuccess) << lastError();
    EXPECT_EQ(data[r][4999], 6 * 3 * 3);  // 1 + 2 + 3, then summed over 3 ranks twice more
    EXPECT_LOOM(loomCommFinalize(comms[r]));
  });
  onEachRank(comms, [&](int r) { EXPECT_LOOM(loomCommDestroy(comms[r])); });
}

TEST(NonBlocking, ErrorsSurfaceThroughGetAsyncError) {
  loomConfig_t config = configWithTimeout(1000, 0);
  std::vector<loomComm_t> comms = initRanks(2, &config);
  for (loomComm_t c : comms) ASSERT_EQ(pollAsync(c), loomSuccess) << lastError();
  float data[4] = {};
  Clock::time_point start = Clock::now();
  loomResult_t res = loomAllReduce(data, data, 4, loomFloat, loomSum, comms[0], nullptr);
  EXPECT_TRUE(res == loomSuccess || res == loomInProgress) << lastError();
  EXPECT_EQ(pollAsync(comms[0]), loomTimeout);
  EXPECT_TRUE(mentions(lastError(), "timed out")) << lastError();
  EXPECT_GE(secondsSince(start), 1.0);
  EXPECT_LT(secondsSince(start), 2.0);
  // It stays failed; later work is not run.
  res = loomAllReduce(data, data, 4, loomFloat, loomSum, comms[0], nullptr);
  EXPECT_NE(res, loomSuccess);
  EXPECT_EQ(pollAsync(comms[0]), loomTimeout);
  onEachRank(comms, [&](int r) { EXPECT_LOOM(loomCommDestroy(comms[r])); });
}

TEST(NonBlocking, FailedInitializationIsReported) {
  loomUniqueId id;
  ASSERT_LOOM(loomGetUniqueId(&id));
  loomConfig_t config = configWithTimeout(1000, 0);
  loomComm_t c = nullptr;
  loomResult_t res = loomCommInitRankConfig(&c, 2, id, 0, &config);  // rank 1 never comes
  ASSERT_TRUE(res == loomInProgress || res == loomSuccess) << lastError();
  ASSERT_NE(c, nullptr);
  EXPECT_EQ(pollAsync(c), loomTimeout);
  EXPECT_FALSE(lastError().empty());
  const char* name = nullptr;
  EXPECT_EQ(loomCommGetAlgorithm(c, loomFuncAllReduce, 1, loomFloat, &name), loomTimeout);
  EXPECT_TRUE(mentions(lastError(), "initialization failed")) << lastError();
  EXPECT_LOOM(loomCommDestroy(c));
}

}  // namespace
}  // namespace loom::test
