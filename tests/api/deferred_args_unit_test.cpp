// Operations that run after their call returned (recorded in a group, queued on a non-blocking
// communicator) must not read caller memory other than the data buffers after the call: the
// caller may reuse its count arrays at once.
#include <gtest/gtest.h>

#include <numeric>
#include <vector>

#include "api_test_helpers.hpp"

namespace loom::test {
namespace {

// Rank r sends (r + 1) * (j + 1) int32 values r * 100 + j to rank j.
struct AllToAllvCase {
  int rank, n;
  std::vector<size_t> sc, sd, rc, rd;
  std::vector<int32_t> send, recv;
  AllToAllvCase(int r, int ranks) : rank(r), n(ranks), sc(n), sd(n), rc(n), rd(n) {
    size_t s = 0, q = 0;
    for (int j = 0; j < n; ++j) {
      sc[j] = (r + 1) * (j + 1), sd[j] = s, s += sc[j];
      rc[j] = (j + 1) * (r + 1), rd[j] = q, q += rc[j];
    }
    send.resize(s);
    recv.assign(q, -1);
    for (int j = 0; j < n; ++j) std::fill_n(send.begin() + sd[j], sc[j], r * 100 + j);
  }
  loomResult_t post(loomComm_t comm) {
    return loomAllToAllv(send.data(), sc.data(), sd.data(), recv.data(), rc.data(), rd.data(),
                         loomInt32, comm, nullptr);
  }
  void scribbleOverCounts() {
    // What a caller reusing its arrays would leave there.
    for (auto* v : {&sc, &sd, &rc, &rd}) std::fill(v->begin(), v->end(), size_t{1} << 40);
  }
  void expectReceived() const {
    size_t at = 0;
    for (int i = 0; i < n; ++i)
      for (size_t k = 0; k < static_cast<size_t>((i + 1) * (rank + 1)); ++k, ++at)
        ASSERT_EQ(recv[at], i * 100 + rank) << "from rank " << i;
  }
};

TEST(DeferredArguments, AllToAllvCountsAreCopiedWhenRecordedInAGroup) {
  // Regression: the group kept pointers to the caller's arrays and read them at loomGroupEnd.
  std::vector<loomComm_t> comms = initRanks(3);
  onEachRank(comms, [&](int r) {
    AllToAllvCase c(r, 3);
    ASSERT_LOOM(loomGroupStart());
    EXPECT_LOOM(c.post(comms[r]));
    c.scribbleOverCounts();
    ASSERT_LOOM(loomGroupEnd());
    c.expectReceived();
  });
  for (loomComm_t c : comms) EXPECT_LOOM(loomCommDestroy(c));
}

TEST(DeferredArguments, AllToAllvCountsAreCopiedWhenQueuedOnANonBlockingCommunicator) {
  loomConfig_t config = configWithTimeout(30000, /*blocking=*/0);
  std::vector<loomComm_t> comms = initRanks(2, &config);
  onEachRank(comms, [&](int r) {
    ASSERT_EQ(pollAsync(comms[r]), loomSuccess) << lastError();
    // A barrier that rank 1 joins late keeps rank 0's progress thread busy while the alltoallv
    // waits in its queue, so the scribble lands before the alltoallv runs.
    if (r == 1) std::this_thread::sleep_for(std::chrono::milliseconds(200));
    loomResult_t b = loomBarrier(comms[r], nullptr);
    ASSERT_TRUE(b == loomSuccess || b == loomInProgress) << lastError();
    AllToAllvCase c(r, 2);
    loomResult_t p = c.post(comms[r]);
    ASSERT_TRUE(p == loomSuccess || p == loomInProgress) << lastError();
    c.scribbleOverCounts();
    ASSERT_EQ(pollAsync(comms[r]), loomSuccess) << lastError();
    c.expectReceived();
  });
  for (loomComm_t c : comms) EXPECT_LOOM(loomCommDestroy(c));
}

}  // namespace
}  // namespace loom::test
