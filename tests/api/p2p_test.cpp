// Point-to-point progress: non-blocking sends and receives (loomIsend/loomIrecv) and groups
// complete whatever the order of posting on every rank (receives first, collectives between sends
// and receives in a group, any source), with messages beyond the channels' buffers, bit for bit.
// Run by every rank under loomrun (see CMakeLists), also over TCP (fake nodes).
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <vector>

#include "expect_loom.hpp"
#include "loom/loom.h"

namespace {

loomComm_t gWorld = nullptr;
int gRank = 0, gRanks = 1;

// The bytes rank `from` sends to rank `to` as message `seq`: distinct for every triple.
uint32_t word(int from, int to, int seq, size_t i) {
  uint64_t x = (static_cast<uint64_t>(from) << 48) ^ (static_cast<uint64_t>(to) << 40) ^
               (static_cast<uint64_t>(seq) << 28) ^ i;
  x *= 0x9e3779b97f4a7c15ull;
  return static_cast<uint32_t>(x >> 32);
}
std::vector<uint32_t> message(int from, int to, int seq, size_t n) {
  std::vector<uint32_t> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = word(from, to, seq, i);
  return v;
}

void waitAll(std::vector<loomRequest_t>& requests) {
  for (loomRequest_t& r : requests) {
    EXPECT_LOOM(loomWait(r));
    EXPECT_LOOM(loomRequestFree(r));
  }
  requests.clear();
}

TEST(NonBlocking, ReceivesPostedBeforeSendsOnEveryRank) {
  // Larger than any channel buffer: a send can finish only while its receive runs.
  const size_t n = (1u << 20) + 3;
  std::vector<std::vector<uint32_t>> out(gRanks), in(gRanks);
  std::vector<loomRequest_t> requests;
  for (int peer = 0; peer < gRanks; ++peer) {
    in[peer].assign(n, 0);
    loomRequest_t r;
    ASSERT_LOOM(loomIrecv(in[peer].data(), n, loomUint32, peer, 9, gWorld, &r));
    requests.push_back(r);
  }
  for (int peer = 0; peer < gRanks; ++peer) {
    out[peer] = message(gRank, peer, 0, n);
    loomRequest_t r;
    ASSERT_LOOM(loomIsend(out[peer].data(), n, loomUint32, peer, 9, gWorld, &r));
    requests.push_back(r);
  }
  waitAll(requests);
  for (int peer = 0; peer < gRanks; ++peer)
    EXPECT_TRUE(in[peer] == message(peer, gRank, 0, n)) << "from rank " << peer;
}

TEST(NonBlocking, BlockingCallsMixWithOutstandingRequests) {
  // An outstanding receive (its send comes later) does not hold back a blocking exchange.
  if (gRanks < 2) GTEST_SKIP() << "needs 2 ranks";
  const int right = (gRank + 1) % gRanks, left = (gRank + gRanks - 1) % gRanks;
  const size_t n = 300000;
  std::vector<uint32_t> late(n), a = message(gRank, right, 1, n), b(n);
  std::vector<uint32_t> lateOut = message(gRank, right, 2, n);
  loomRequest_t pending;
  ASSERT_LOOM(loomIrecv(late.data(), n, loomUint32, left, 2, gWorld, &pending));
  ASSERT_LOOM(loomGroupStart());
  EXPECT_LOOM(loomRecvTag(b.data(), n, loomUint32, left, 1, gWorld, nullptr));
  EXPECT_LOOM(loomSendTag(a.data(), n, loomUint32, right, 1, gWorld, nullptr));
  ASSERT_LOOM(loomGroupEnd());
  EXPECT_TRUE(b == message(left, gRank, 1, n));
  EXPECT_LOOM(loomSendTag(lateOut.data(), n, loomUint32, right, 2, gWorld, nullptr));
  EXPECT_LOOM(loomWait(pending));
  EXPECT_LOOM(loomRequestFree(pending));
  EXPECT_TRUE(late == message(left, gRank, 2, n));
}

TEST(Group, ReceiveCollectiveSendInOneGroup) {
  // Issue order would deadlock: every rank's receive waits for a send behind its allreduce.
  if (gRanks < 2) GTEST_SKIP() << "needs 2 ranks";
  const int right = (gRank + 1) % gRanks, left = (gRank + gRanks - 1) % gRanks;
  const size_t n = (1u << 19) + 5;
  std::vector<uint32_t> out = message(gRank, right, 3, n), in(n);
  std::vector<float> sum(1000, 1.0f);
  ASSERT_LOOM(loomGroupStart());
  EXPECT_LOOM(loomRecv(in.data(), n, loomUint32, left, gWorld, nullptr));
  EXPECT_LOOM(
      loomAllReduce(sum.data(), sum.data(), sum.size(), loomFloat32, loomSum, gWorld, nullptr));
  EXPECT_LOOM(loomSend(out.data(), n, loomUint32, right, gWorld, nullptr));
  ASSERT_LOOM(loomGroupEnd());
  EXPECT_TRUE(in == message(left, gRank, 3, n));
  EXPECT_EQ(sum[999], static_cast<float>(gRanks));
}

struct Fired {
  std::atomic<int> count{0};
  std::atomic<int> result{-1};
};
void onDone(loomResult_t result, void* arg) {
  auto* f = static_cast<Fired*>(arg);
  f->result = result;
  f->count.fetch_add(1);
}

TEST(NonBlocking, AnySourceAndCallbacks) {
  // Rank 0 receives one message from every other rank, from whichever comes first.
  const int tag = 42;
  if (gRank == 0) {
    std::vector<int32_t> got(gRanks, -1);
    std::vector<loomRequest_t> requests(gRanks - 1);
    std::vector<Fired> fired(gRanks);
    for (int i = 0; i + 1 < gRanks; ++i) {
      ASSERT_LOOM(loomIrecv(&got[i], 1, loomInt32, LOOM_ANY_SOURCE, tag, gWorld, &requests[i]));
      ASSERT_LOOM(loomRequestSetCallback(requests[i], onDone, &fired[i]));
    }
    std::vector<int> sources;
    for (int i = 0; i + 1 < gRanks; ++i) {
      EXPECT_LOOM(loomWait(requests[i]));
      int source = -1;
      EXPECT_LOOM(loomRequestGetSource(requests[i], &source));
      EXPECT_EQ(got[i], source * 100) << "message " << i;
      sources.push_back(source);
      EXPECT_LOOM(loomRequestFree(requests[i]));
    }
    std::sort(sources.begin(), sources.end());
    for (int i = 0; i + 1 < gRanks; ++i) EXPECT_EQ(sources[i], i + 1);
    for (int i = 0; i + 1 < gRanks; ++i) {
      while (fired[i].count.load() == 0) {
      }  // the callback runs right after the request is marked finished
      EXPECT_EQ(fired[i].count.load(), 1);
      EXPECT_EQ(fired[i].result.load(), loomSuccess);
    }
  } else {
    int32_t value = gRank * 100;
    EXPECT_LOOM(loomSendTag(&value, 1, loomInt32, 0, tag, gWorld, nullptr));
  }
  EXPECT_LOOM(loomBarrier(gWorld, nullptr));
}

TEST(NonBlocking, RandomOrdersTagsAndSizes) {
  // Every rank derives the same schedule: for each round, messages between random pairs with
  // random tags and sizes (up to 4 MiB); each rank posts its sends and receives in a random order
  // of its own, waits for them in another random order, and checks every byte.
  std::mt19937 shared(1234);
  const int rounds = 12;
  for (int round = 0; round < rounds; ++round) {
    struct Msg {
      int from, to, tag;
      size_t n;
    };
    std::vector<Msg> msgs;
    const int count = 1 + static_cast<int>(shared() % (3 * gRanks));
    for (int m = 0; m < count; ++m) {
      Msg msg{static_cast<int>(shared() % gRanks), static_cast<int>(shared() % gRanks),
              static_cast<int>(shared() % 3), 0};
      const uint32_t kind = shared() % 4;
      msg.n = kind == 0   ? 0
              : kind == 1 ? shared() % 64
              : kind == 2 ? shared() % 70000
                          : shared() % (1u << 20);
      msgs.push_back(msg);
    }
    std::mt19937 mine(round * 7919 + gRank);
    std::vector<int> order;
    for (int m = 0; m < count; ++m)
      if (msgs[m].from == gRank || msgs[m].to == gRank) order.push_back(m);
    // Messages with the same (from, to, tag) match in posting order: keep those in order.
    std::shuffle(order.begin(), order.end(), mine);
    std::vector<int> posted;
    std::vector<bool> done(count, false);
    for (int m : order) {
      std::vector<int> chain;
      for (int k = 0; k <= m; ++k)
        if (!done[k] && msgs[k].from == msgs[m].from && msgs[k].to == msgs[m].to &&
            msgs[k].tag == msgs[m].tag)
          chain.push_back(k);
      for (int k : chain) done[k] = true, posted.push_back(k);
    }
    std::vector<std::vector<uint32_t>> send(count), recv(count);
    std::vector<loomRequest_t> requests;
    std::vector<int> isRecvOf;
    for (int m : posted) {
      const Msg& msg = msgs[m];
      if (msg.to == gRank) {
        recv[m].assign(msg.n, 0xdeadbeef);
        loomRequest_t r;
        ASSERT_LOOM(loomIrecv(recv[m].data(), msg.n, loomUint32, msg.from, msg.tag, gWorld, &r));
        requests.push_back(r);
      }
      if (msg.from == gRank) {
        send[m] = message(msg.from, msg.to, m + round * 1000, msg.n);
        loomRequest_t r;
        ASSERT_LOOM(loomIsend(send[m].data(), msg.n, loomUint32, msg.to, msg.tag, gWorld, &r));
        requests.push_back(r);
      }
    }
    std::shuffle(requests.begin(), requests.end(), mine);
    waitAll(requests);
    for (int m = 0; m < count; ++m) {
      if (msgs[m].to == gRank) {
        EXPECT_TRUE(recv[m] == message(msgs[m].from, gRank, m + round * 1000, msgs[m].n))
            << "round " << round << " message " << m << " from " << msgs[m].from;
      }
    }
  }
  EXPECT_LOOM(loomBarrier(gWorld, nullptr));
}

TEST(NonBlocking, BadArgumentsLeaveTheCommunicatorUsable) {
  loomRequest_t r = nullptr;
  int32_t x = 0;
  EXPECT_EQ(loomIsend(&x, 1, loomInt32, gRanks, 0, gWorld, &r), loomInvalidArgument);
  EXPECT_EQ(loomIsend(&x, 1, loomInt32, LOOM_ANY_SOURCE, 0, gWorld, &r), loomInvalidArgument);
  EXPECT_EQ(loomIrecv(nullptr, 1, loomInt32, 0, 0, gWorld, &r), loomInvalidArgument);
  EXPECT_EQ(loomIrecv(&x, 1, loomInt32, 0, 0, gWorld, nullptr), loomInvalidArgument);
  EXPECT_EQ(loomWait(nullptr), loomInvalidArgument);
  EXPECT_LOOM(loomBarrier(gWorld, nullptr));
}

TEST(NonBlocking, AnUnmatchedReceiveTimesOutOnItsCommunicator) {
  // A receive nobody sends to fails with loomTimeout after the communicator's timeout, and the
  // communicator is aborted (every rank learns it); the world communicator is untouched.
  loomConfig_t config = LOOM_CONFIG_INITIALIZER;
  config.timeoutMs = 1500;
  loomComm_t comm = nullptr;
  ASSERT_LOOM(loomCommSplit(gWorld, 0, gRank, &comm, &config));
  if (gRank == 0) {
    int32_t x = 0;
    loomRequest_t r;
    ASSERT_LOOM(loomIrecv(&x, 1, loomInt32, gRanks - 1, 5, comm, &r));
    EXPECT_EQ(loomWait(r), loomTimeout);
    EXPECT_NE(std::string(loomGetLastError(nullptr)).find("timed out"), std::string::npos)
        << loomGetLastError(nullptr);
    int done = 0;
    EXPECT_EQ(loomTest(r, &done), loomTimeout);
    EXPECT_EQ(done, 1);
    EXPECT_LOOM(loomRequestFree(r));
    int32_t y = 0;
    EXPECT_NE(loomIsend(&y, 1, loomInt32, 0, 0, comm, &r), loomSuccess);  // aborted
  }
  EXPECT_LOOM(loomBarrier(gWorld, nullptr));
  loomCommDestroy(comm);
}

}  // namespace

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  if (loomCommInitFromEnv(&gWorld, nullptr) != loomSuccess) {
    fprintf(stderr, "init failed: %s\n", loomGetLastError(nullptr));
    return 2;
  }
  loomCommUserRank(gWorld, &gRank);
  loomCommCount(gWorld, &gRanks);
  int result = RUN_ALL_TESTS();
  loomCommDestroy(gWorld);
  return result;
}
