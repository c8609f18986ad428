// Aborts that arrive at awkward moments: during a non-blocking initialization, and before a rank
// that is late to a collective the others already failed.
#include <gtest/gtest.h>

#include <thread>
#include <vector>

#include "api_test_helpers.hpp"

namespace loom::test {
namespace {

TEST(AbortEdges, AbortStopsANonBlockingInitializationAtOnce) {
  // Regression: loomCommAbort joined the progress thread, which sat in the bootstrap until the
  // init timeout because nothing could reach the abort flag of the Comm being constructed.
  loomUniqueId id;
  ASSERT_LOOM(loomGetUniqueId(&id));
  loomConfig_t config = configWithTimeout(20000, /*blocking=*/0);
  loomComm_t comm = nullptr;
  loomResult_t r = loomCommInitRankConfig(&comm, 2, id, 0, &config);  // rank 1 never comes
  ASSERT_TRUE(r == loomInProgress || r == loomSuccess) << lastError();
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  Clock::time_point start = Clock::now();
  EXPECT_LOOM(loomCommAbort(comm));
  EXPECT_LT(secondsSince(start), 5.0) << "abort waited for the initialization's timeout";
}

TEST(AbortEdges, ALateRankDoesNotSucceedAfterThePeersFailed) {
  // Regression: a rank arriving after the others had aborted found every input already staged,
  // never waited, and returned success for a collective its peers had failed.
  std::vector<loomComm_t> comms = initRanks(3, nullptr);
  std::vector<loomResult_t> results(3, loomSuccess);
  std::vector<std::thread> early;
  for (int r = 0; r < 2; ++r) {
    early.emplace_back([&, r] {
      int32_t in = 1, out = 0;
      results[r] = loomAllReduce(&in, &out, 1, loomInt32, loomSum, comms[r], nullptr);
    });
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(300));  // both wait for rank 2
  EXPECT_LOOM(loomCommAbort(comms[0]));
  for (auto& t : early) t.join();
  EXPECT_NE(results[0], loomSuccess);
  EXPECT_NE(results[1], loomSuccess);
  int32_t in = 1, out = 0;
  results[2] = loomAllReduce(&in, &out, 1, loomInt32, loomSum, comms[2], nullptr);
  EXPECT_EQ(results[2], loomRemoteError) << "rank 2 got " << out;
  loomResult_t async = loomSuccess;
  EXPECT_LOOM(loomCommGetAsyncError(comms[2], &async));
  EXPECT_EQ(async, loomRemoteError);
  EXPECT_LOOM(loomCommDestroy(comms[1]));
  EXPECT_LOOM(loomCommDestroy(comms[2]));
}

}  // namespace
}  // namespace loom::test
