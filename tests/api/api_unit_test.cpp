// Bad arguments to every C entry point, inside one process: each is refused with
// loomInvalidArgument and a message naming the problem, never a crash, and leaves the communicator
// usable (the next allreduce works). Also version, error strings and introspection. Lifetime,
// abort, timeout and non-blocking behaviour are in lifetime_unit_test.cpp (same binary).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "api_test_helpers.hpp"
#include "loom/loom.h"

namespace loom::test {
namespace {

// ----------------------------------------------------------------------------------------------
// Bad arguments on a one-rank communicator.

class BadArguments : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { comm_ = initSolo(); }
  static void TearDownTestSuite() { EXPECT_LOOM(loomCommDestroy(comm_)); }

  // The call was refused as the caller's mistake, said why, and the communicator still works.
  static void expectRefused(const char* call, loomResult_t result, const char* words) {
    std::string message = lastError();
    EXPECT_EQ(result, loomInvalidArgument) << call << ": " << message;
    EXPECT_NE(message.find(words), std::string::npos)
        << call << ": message should mention '" << words << "': " << message;
    if (comm_ != nullptr) expectUsable({comm_});
  }

  static loomComm_t comm_;
  float send_[16] = {};
  float recv_[16] = {};
  size_t ones_[1] = {1};
  size_t zeros_[1] = {0};
};
loomComm_t BadArguments::comm_ = nullptr;

#define EXPECT_REFUSED(call, words) expectRefused(#call, (call), (words))

TEST_F(BadArguments, NullCommunicator) {
  loomComm_t c = nullptr;
  float* s = send_;
  float* r = recv_;
  int value = 0;
  const char* text = nullptr;
  loomResult_t state;
  loomComm_t child = nullptr;
  const char* words = "communicator is NULL";
  EXPECT_REFUSED(loomAllReduce(s, r, 1, loomFloat, loomSum, c, nullptr), words);
  EXPECT_REFUSED(loomBroadcast(s, r, 1, loomFloat, 0, c, nullptr), words);
  EXPECT_REFUSED(loomReduce(s, r, 1, loomFloat, loomSum, 0, c, nullptr), words);
  EXPECT_REFUSED(loomAllGather(s, r, 1, loomFloat, c, nullptr), words);
  EXPECT_REFUSED(loomReduceScatter(s, r, 1, loomFloat, loomSum, c, nullptr), words);
  EXPECT_REFUSED(loomAllToAll(s, r, 1, loomFloat, c, nullptr), words);
  EXPECT_REFUSED(loomAllToAllv(s, ones_, zeros_, r, ones_, zeros_, loomFloat, c, nullptr), words);
  EXPECT_REFUSED(loomGather(s, r, 1, loomFloat, 0, c, nullptr), words);
  EXPECT_REFUSED(loomScatter(s, r, 1, loomFloat, 0, c, nullptr), words);
  EXPECT_REFUSED(loomSend(s, 1, loomFloat, 0, c, nullptr), words);
  EXPECT_REFUSED(loomRecv(r, 1, loomFloat, 0, c, nullptr), words);
  EXPECT_REFUSED(loomBarrier(c, nullptr), words);
  EXPECT_REFUSED(loomCommSplit(c, 0, 0, &child, nullptr), words);
  EXPECT_REFUSED(loomCommFinalize(c), words);
  EXPECT_REFUSED(loomCommDestroy(c), words);
  EXPECT_REFUSED(loomCommAbort(c), words);
  EXPECT_REFUSED(loomCommGetAsyncError(c, &state), words);
  EXPECT_REFUSED(loomCommCount(c, &value), words);
  EXPECT_REFUSED(loomCommUserRank(c, &value), words);
  EXPECT_REFUSED(loomCommGetAlgorithm(c, loomFuncAllReduce, 1, loomFloat, &text), words);
  // Memory that is not a communicator is recognized by its missing magic.
  alignas(64) static char notAComm[512] = {};
  EXPECT_REFUSED(
      loomAllReduce(s, r, 1, loomFloat, loomSum, reinterpret_cast<loomComm_t>(notAComm), nullptr),
      "not a Loom communicator");
  EXPECT_REFUSED(loomCommDestroy(reinterpret_cast<loomComm_t>(notAComm)),
                 "not a Loom communicator");
}

TEST_F(BadArguments, NullOutputPointers) {
  loomUniqueId zeroId = {};
  EXPECT_REFUSED(loomGetVersion(nullptr), "NULL");
  EXPECT_REFUSED(loomGetUniqueId(nullptr), "NULL");
  EXPECT_REFUSED(loomCommInitRank(nullptr, 1, zeroId, 0), "NULL");
  EXPECT_REFUSED(loomCommInitRankConfig(nullptr, 1, zeroId, 0, nullptr), "NULL");
  {
    ScopedEnv rank("LOOM_RANK", "0"), size("LOOM_WORLD_SIZE", "1");
    EXPECT_REFUSED(loomCommInitFromEnv(nullptr, nullptr), "NULL");
  }
  EXPECT_REFUSED(loomCommSplit(comm_, 0, 0, nullptr, nullptr), "newcomm is NULL");
  EXPECT_REFUSED(loomCommGetAsyncError(comm_, nullptr), "NULL");
  EXPECT_REFUSED(loomCommCount(comm_, nullptr), "NULL");
  EXPECT_REFUSED(loomCommUserRank(comm_, nullptr), "NULL");
  EXPECT_REFUSED(loomCommGetAlgorithm(comm_, loomFuncAllReduce, 1, loomFloat, nullptr), "NULL");
}

TEST_F(BadArguments, InitArguments) {
  loomComm_t c = reinterpret_cast<loomComm_t>(this);  // must be overwritten with NULL
  loomUniqueId zeroId = {};
  EXPECT_REFUSED(loomCommInitRank(&c, 0, zeroId, 0), "nranks");
  EXPECT_REFUSED(loomCommInitRank(&c, 2, zeroId, -1), "out of range");
  EXPECT_REFUSED(loomCommInitRank(&c, 2, zeroId, 2), "out of range");
  EXPECT_REFUSED(loomCommInitRank(&c, 1, zeroId, 0), "unique id");  // never made by GetUniqueId
  EXPECT_EQ(c, nullptr);
  loomComm_t child = nullptr;
  EXPECT_REFUSED(loomCommSplit(comm_, -7, 0, &child, nullptr), "color");
  ScopedEnv noRank("LOOM_RANK", ""), noRankToo("RANK", ""), noSize("LOOM_WORLD_SIZE", "");
  EXPECT_REFUSED(loomCommInitFromEnv(&c, nullptr), "environment");
}

TEST_F(BadArguments, NullBuffersWithCount) {
  float* s = send_;
  float* r = recv_;
  EXPECT_REFUSED(loomAllReduce(nullptr, r, 1, loomFloat, loomSum, comm_, nullptr), "sendbuff");
  EXPECT_REFUSED(loomAllReduce(s, nullptr, 1, loomFloat, loomSum, comm_, nullptr), "recvbuff");
  EXPECT_REFUSED(loomBroadcast(nullptr, r, 1, loomFloat, 0, comm_, nullptr), "sendbuff");
  EXPECT_REFUSED(loomBroadcast(s, nullptr, 1, loomFloat, 0, comm_, nullptr), "recvbuff");
  EXPECT_REFUSED(loomReduce(nullptr, r, 1, loomFloat, loomSum, 0, comm_, nullptr), "sendbuff");
  EXPECT_REFUSED(loomReduce(s, nullptr, 1, loomFloat, loomSum, 0, comm_, nullptr), "recvbuff");
  EXPECT_REFUSED(loomAllGather(nullptr, r, 1, loomFloat, comm_, nullptr), "sendbuff");
  EXPECT_REFUSED(loomAllGather(s, nullptr, 1, loomFloat, comm_, nullptr), "recvbuff");
  EXPECT_REFUSED(loomReduceScatter(nullptr, r, 1, loomFloat, loomSum, comm_, nullptr), "sendbuff");
  EXPECT_REFUSED(loomReduceScatter(s, nullptr, 1, loomFloat, loomSum, comm_, nullptr), "recvbuff");
  EXPECT_REFUSED(loomAllToAll(nullptr, r, 1, loomFloat, comm_, nullptr), "sendbuff");
  EXPECT_REFUSED(loomAllToAll(s, nullptr, 1, loomFloat, comm_, nullptr), "recvbuff");
  EXPECT_REFUSED(loomAllToAllv(nullptr, ones_, zeros_, r, ones_, zeros_, loomFloat, comm_, nullptr),
                 "sendbuff");
  EXPECT_REFUSED(loomAllToAllv(s, ones_, zeros_, nullptr, ones_, zeros_, loomFloat, comm_, nullptr),
                 "recvbuff");
  EXPECT_REFUSED(loomGather(nullptr, r, 1, loomFloat, 0, comm_, nullptr), "sendbuff");
  EXPECT_REFUSED(loomGather(s, nullptr, 1, loomFloat, 0, comm_, nullptr), "recvbuff");
  EXPECT_REFUSED(loomScatter(nullptr, r, 1, loomFloat, 0, comm_, nullptr), "sendbuff");
  EXPECT_REFUSED(loomScatter(s, nullptr, 1, loomFloat, 0, comm_, nullptr), "recvbuff");
  EXPECT_REFUSED(loomSend(nullptr, 1, loomFloat, 0, comm_, nullptr), "sendbuff");
  EXPECT_REFUSED(loomRecv(nullptr, 1, loomFloat, 0, comm_, nullptr), "recvbuff");
}

TEST_F(BadArguments, NullBuffersWithZeroCountAreFine) {
  EXPECT_LOOM(loomAllReduce(nullptr, nullptr, 0, loomFloat, loomSum, comm_, nullptr));
  EXPECT_LOOM(loomBroadcast(nullptr, nullptr, 0, loomFloat, 0, comm_, nullptr));
  EXPECT_LOOM(loomReduce(nullptr, nullptr, 0, loomFloat, loomSum, 0, comm_, nullptr));
  EXPECT_LOOM(loomAllGather(nullptr, nullptr, 0, loomFloat, comm_, nullptr));
  EXPECT_LOOM(loomReduceScatter(nullptr, nullptr, 0, loomFloat, loomSum, comm_, nullptr));
  EXPECT_LOOM(loomAllToAll(nullptr, nullptr, 0, loomFloat, comm_, nullptr));
  EXPECT_LOOM(
      loomAllToAllv(nullptr, zeros_, zeros_, nullptr, zeros_, zeros_, loomFloat, comm_, nullptr));
  EXPECT_LOOM(loomGather(nullptr, nullptr, 0, loomFloat, 0, comm_, nullptr));
  EXPECT_LOOM(loomScatter(nullptr, nullptr, 0, loomFloat, 0, comm_, nullptr));
  EXPECT_LOOM(loomBarrier(comm_, nullptr));
  EXPECT_LOOM(loomGroupStart());
  EXPECT_LOOM(loomSend(nullptr, 0, loomFloat, 0, comm_, nullptr));
  EXPECT_LOOM(loomRecv(nullptr, 0, loomFloat, 0, comm_, nullptr));
  EXPECT_LOOM(loomGroupEnd());
  expectUsable({comm_});
}

TEST_F(BadArguments, UnknownTypesOpsAndRoots) {
  float* s = send_;
  float* r = recv_;
  for (int bad : {static_cast<int>(loomNumTypes), -1}) {
    auto t = static_cast<loomDataType_t>(bad);
    const char* words = "unknown data type";
    EXPECT_REFUSED(loomAllReduce(s, r, 1, t, loomSum, comm_, nullptr), words);
    EXPECT_REFUSED(loomBroadcast(s, r, 1, t, 0, comm_, nullptr), words);
    EXPECT_REFUSED(loomReduce(s, r, 1, t, loomSum, 0, comm_, nullptr), words);
    EXPECT_REFUSED(loomAllGather(s, r, 1, t, comm_, nullptr), words);
    EXPECT_REFUSED(loomReduceScatter(s, r, 1, t, loomSum, comm_, nullptr), words);
    EXPECT_REFUSED(loomAllToAll(s, r, 1, t, comm_, nullptr), words);
    EXPECT_REFUSED(loomAllToAllv(s, ones_, zeros_, r, ones_, zeros_, t, comm_, nullptr), words);
    EXPECT_REFUSED(loomGather(s, r, 1, t, 0, comm_, nullptr), words);
    EXPECT_REFUSED(loomScatter(s, r, 1, t, 0, comm_, nullptr), words);
    EXPECT_REFUSED(loomSend(s, 1, t, 0, comm_, nullptr), words);
    EXPECT_REFUSED(loomRecv(r, 1, t, 0, comm_, nullptr), words);
    const char* algo = nullptr;
    EXPECT_REFUSED(loomCommGetAlgorithm(comm_, loomFuncAllReduce, 1, t, &algo), words);
  }
  for (int bad : {static_cast<int>(loomNumOps), -1}) {
    auto op = static_cast<loomRedOp_t>(bad);
    const char* words = "unknown reduction op";
    EXPECT_REFUSED(loomAllReduce(s, r, 1, loomFloat, op, comm_, nullptr), words);
    EXPECT_REFUSED(loomReduce(s, r, 1, loomFloat, op, 0, comm_, nullptr), words);
    EXPECT_REFUSED(loomReduceScatter(s, r, 1, loomFloat, op, comm_, nullptr), words);
  }
  for (int root : {-1, 1}) {
    const char* words = "out of range";
    EXPECT_REFUSED(loomBroadcast(s, r, 1, loomFloat, root, comm_, nullptr), words);
    EXPECT_REFUSED(loomReduce(s, r, 1, loomFloat, loomSum, root, comm_, nullptr), words);
    EXPECT_REFUSED(loomGather(s, r, 1, loomFloat, root, comm_, nullptr), words);
    EXPECT_REFUSED(loomScatter(s, r, 1, loomFloat, root, comm_, nullptr), words);
    EXPECT_REFUSED(loomSend(s, 1, loomFloat, root, comm_, nullptr), words);
    EXPECT_REFUSED(loomRecv(r, 1, loomFloat, root, comm_, nullptr), words);
  }
  const char* algo = nullptr;
  EXPECT_REFUSED(loomCommGetAlgorithm(comm_, loomNumFuncs, 1, loomFloat, &algo), "unknown");
  EXPECT_REFUSED(loomCommGetAlgorithm(comm_, static_cast<loomFunc_t>(-1), 1, loomFloat, &algo),
                 "unknown");
}

TEST_F(BadArguments, SizeOverflow) {
  float* s = send_;
  float* r = recv_;
  const size_t huge = std::numeric_limits<size_t>::max() / 2;
  const char* words = "overflow";
  EXPECT_REFUSED(loomAllReduce(s, r, huge, loomFloat, loomSum, comm_, nullptr), words);
  EXPECT_REFUSED(loomBroadcast(s, r, huge, loomFloat, 0, comm_, nullptr), words);
  EXPECT_REFUSED(loomReduce(s, r, huge, loomFloat, loomSum, 0, comm_, nullptr), words);
  EXPECT_REFUSED(loomAllGather(s, r, huge, loomFloat, comm_, nullptr), words);
  EXPECT_REFUSED(loomReduceScatter(s, r, huge, loomFloat, loomSum, comm_, nullptr), words);
  EXPECT_REFUSED(loomAllToAll(s, r, huge, loomFloat, comm_, nullptr), words);
  EXPECT_REFUSED(loomGather(s, r, huge, loomFloat, 0, comm_, nullptr), words);
  EXPECT_REFUSED(loomScatter(s, r, huge, loomFloat, 0, comm_, nullptr), words);
  EXPECT_REFUSED(loomSend(s, huge, loomFloat, 0, comm_, nullptr), words);
  EXPECT_REFUSED(loomRecv(r, huge, loomFloat, 0, comm_, nullptr), words);
  size_t hugeCount[1] = {huge};
  EXPECT_REFUSED(loomAllToAllv(s, hugeCount, zeros_, r, ones_, zeros_, loomFloat, comm_, nullptr),
                 words);
  // A displacement plus a count that wraps around to a small number is no less an overflow.
  size_t wraps[1] = {std::numeric_limits<size_t>::max()};
  EXPECT_REFUSED(loomAllToAllv(s, ones_, wraps, r, ones_, zeros_, loomFloat, comm_, nullptr),
                 words);
  EXPECT_REFUSED(loomAllToAllv(s, ones_, zeros_, r, ones_, wraps, loomFloat, comm_, nullptr),
                 words);
}

TEST_F(BadArguments, StreamsAlltoallvArraysAndGroups) {
  float* s = send_;
  float* r = recv_;
  auto stream = reinterpret_cast<loomStream_t>(0x1);
  const char* words = "NULL stream";
  EXPECT_REFUSED(loomAllReduce(s, r, 1, loomFloat, loomSum, comm_, stream), words);
  EXPECT_REFUSED(loomBroadcast(s, r, 1, loomFloat, 0, comm_, stream), words);
  EXPECT_REFUSED(loomReduce(s, r, 1, loomFloat, loomSum, 0, comm_, stream), words);
  EXPECT_REFUSED(loomAllGather(s, r, 1, loomFloat, comm_, stream), words);
  EXPECT_REFUSED(loomReduceScatter(s, r, 1, loomFloat, loomSum, comm_, stream), words);
  EXPECT_REFUSED(loomAllToAll(s, r, 1, loomFloat, comm_, stream), words);
  EXPECT_REFUSED(loomAllToAllv(s, ones_, zeros_, r, ones_, zeros_, loomFloat, comm_, stream),
                 words);
  EXPECT_REFUSED(loomGather(s, r, 1, loomFloat, 0, comm_, stream), words);
  EXPECT_REFUSED(loomScatter(s, r, 1, loomFloat, 0, comm_, stream), words);
  EXPECT_REFUSED(loomSend(s, 1, loomFloat, 0, comm_, stream), words);
  EXPECT_REFUSED(loomRecv(r, 1, loomFloat, 0, comm_, stream), words);
  EXPECT_REFUSED(loomBarrier(comm_, stream), words);

  words = "arrays must not be NULL";
  EXPECT_REFUSED(loomAllToAllv(s, nullptr, zeros_, r, ones_, zeros_, loomFloat, comm_, nullptr),
                 words);
  EXPECT_REFUSED(loomAllToAllv(s, ones_, nullptr, r, ones_, zeros_, loomFloat, comm_, nullptr),
                 words);
  EXPECT_REFUSED(loomAllToAllv(s, ones_, zeros_, r, nullptr, zeros_, loomFloat, comm_, nullptr),
                 words);
  EXPECT_REFUSED(loomAllToAllv(s, ones_, zeros_, r, ones_, nullptr, loomFloat, comm_, nullptr),
                 words);
  EXPECT_REFUSED(loomAllToAll(s, s, 1, loomFloat, comm_, nullptr), "in place");

  EXPECT_REFUSED(loomGroupEnd(), "without loomGroupStart");
  // A bad call inside a group is refused on its own; the rest of the group still runs.
  ASSERT_LOOM(loomGroupStart());
  EXPECT_EQ(loomAllReduce(s, r, 1, static_cast<loomDataType_t>(99), loomSum, comm_, nullptr),
            loomInvalidArgument);
  send_[0] = 5;
  EXPECT_LOOM(loomAllReduce(s, r, 1, loomFloat, loomSum, comm_, nullptr));
  ASSERT_LOOM(loomGroupEnd());
  EXPECT_EQ(recv_[0], 5.0f);
  EXPECT_REFUSED(loomGroupEnd(), "without loomGroupStart");
}

TEST_F(BadArguments, ConfigAndEnvironment) {
  loomComm_t c = nullptr;
  loomUniqueId id;
  ASSERT_LOOM(loomGetUniqueId(&id));  // before LOOM_TIMEOUT is broken: it reads it too
  loomConfig_t config = LOOM_CONFIG_INITIALIZER;
  config.magic = 0x12345678;
  EXPECT_REFUSED(loomCommInitRankConfig(&c, 1, id, 0, &config), "LOOM_CONFIG_INITIALIZER");
  config = LOOM_CONFIG_INITIALIZER;
  config.size = 0;
  EXPECT_REFUSED(loomCommInitRankConfig(&c, 1, id, 0, &config), "LOOM_CONFIG_INITIALIZER");
  config = configWithTimeout(-5);
  EXPECT_REFUSED(loomCommInitRankConfig(&c, 1, id, 0, &config), "timeoutMs");
  config = LOOM_CONFIG_INITIALIZER;
  config.accumType = 99;
  EXPECT_REFUSED(loomCommInitRankConfig(&c, 1, id, 0, &config), "accumType");
  config = LOOM_CONFIG_INITIALIZER;
  config.device = "quantum";
  EXPECT_REFUSED(loomCommInitRankConfig(&c, 1, id, 0, &config), "unknown device");
  for (const char* bad : {"garbage", "0", "-3", "5s"}) {
    ScopedEnv timeout("LOOM_TIMEOUT", bad);
    EXPECT_REFUSED(loomCommInitRank(&c, 1, id, 0), "LOOM_TIMEOUT");
    EXPECT_REFUSED(loomGetUniqueId(&id), "LOOM_TIMEOUT");
  }
  {
    ScopedEnv accum("LOOM_ACCUM_TYPE", "float37");
    EXPECT_REFUSED(loomCommInitRank(&c, 1, id, 0), "LOOM_ACCUM_TYPE");
  }
  EXPECT_EQ(c, nullptr);
  // The id was not used by any of these: it still makes a working communicator.
  ASSERT_LOOM(loomCommInitRank(&c, 1, id, 0));
  expectUsable({c});
  EXPECT_LOOM(loomCommDestroy(c));
}

TEST(Environment, UnknownAlgorithmListsTheChoices) {
  struct Case {
    const char* algo;
    const char* words;
  };
  for (Case k : {Case{"allreduce:bogus", "choices: "}, Case{"warp:ring", "unknown collective"},
                 Case{"allreduce", "collective:algorithm"}}) {
    ScopedEnv algo("LOOM_ALGO", k.algo);
    loomUniqueId id;
    ASSERT_LOOM(loomGetUniqueId(&id));
    loomComm_t c = nullptr;
    EXPECT_EQ(loomCommInitRank(&c, 1, id, 0), loomInvalidArgument) << k.algo;
    EXPECT_EQ(c, nullptr);
    EXPECT_NE(lastError().find(k.words), std::string::npos) << lastError();
    if (std::string(k.words) == "choices: ") {
      EXPECT_NE(lastError().find("ring"), std::string::npos) << lastError();
      EXPECT_NE(lastError().find("direct"), std::string::npos) << lastError();
    }
  }
}

TEST(Environment, ForcedAlgorithmIsReported) {
  ScopedEnv algo("LOOM_ALGO", "allreduce:ring");
  loomComm_t c = initSolo();
  const char* name = nullptr;
  EXPECT_LOOM(loomCommGetAlgorithm(c, loomFuncAllReduce, 1 << 20, loomFloat, &name));
  EXPECT_STREQ(name, "ring");
  EXPECT_LOOM(loomCommGetAlgorithm(c, loomFuncSendRecv, 1, loomFloat, &name));
  EXPECT_STREQ(name, "p2p");
  EXPECT_LOOM(loomCommGetAlgorithm(c, loomFuncBroadcast, 1, loomFloat, &name));
  EXPECT_TRUE(name != nullptr && name[0] != '\0');
  EXPECT_LOOM(loomCommDestroy(c));
}

// ----------------------------------------------------------------------------------------------
// Introspection.

TEST(Introspection, VersionErrorStringsCountAndRank) {
  int version = 0;
  EXPECT_LOOM(loomGetVersion(&version));
  EXPECT_EQ(version, LOOM_VERSION_CODE);
  std::vector<std::string> seen;
  for (int code = 0; code < loomNumResults; ++code) {
    const char* text = loomGetErrorString(static_cast<loomResult_t>(code));
    ASSERT_NE(text, nullptr);
    EXPECT_GT(strlen(text), 3u) << code;
    EXPECT_EQ(std::count(seen.begin(), seen.end(), text), 0) << "duplicate: " << text;
    seen.push_back(text);
  }
  EXPECT_STREQ(loomGetErrorString(loomNumResults), "unknown result code");
  EXPECT_STREQ(loomGetErrorString(static_cast<loomResult_t>(-1)), "unknown result code");

  std::vector<loomComm_t> comms = initRanks(3);
  for (int r = 0; r < 3; ++r) {
    int count = 0, rank = -1;
    EXPECT_LOOM(loomCommCount(comms[r], &count));
    EXPECT_LOOM(loomCommUserRank(comms[r], &rank));
    EXPECT_EQ(count, 3);
    EXPECT_EQ(rank, r);
  }
  onEachRank(comms, [&](int r) { EXPECT_LOOM(loomCommDestroy(comms[r])); });
}

// ----------------------------------------------------------------------------------------------
// Bad arguments that need more than one rank, and the ranks are left usable.

TEST(MultiRankArguments, OverflowByTheRankCountAndUsableAfter) {
  std::vector<loomComm_t> comms = initRanks(2);
  float buffer[4] = {};
  // count * 4 bytes fits; count * 4 bytes * 2 ranks does not.
  size_t count = static_cast<size_t>(std::numeric_limits<ptrdiff_t>::max()) / 4 / 2 + 1;
  EXPECT_EQ(loomAllGather(buffer, buffer + 1, count, loomFloat, comms[0], nullptr),
            loomInvalidArgument);
  EXPECT_NE(lastError().find("overflow"), std::string::npos) << lastError();
  EXPECT_EQ(loomReduceScatter(buffer, buffer + 1, count, loomFloat, loomSum, comms[1], nullptr),
            loomInvalidArgument);
  EXPECT_EQ(loomGather(buffer, buffer + 1, count, loomFloat, 0, comms[0], nullptr),
            loomInvalidArgument);
  EXPECT_EQ(loomBroadcast(buffer, buffer, 1, loomFloat, 2, comms[1], nullptr), loomInvalidArgument);
  EXPECT_EQ(loomSend(buffer, 1, loomFloat, 2, comms[0], nullptr), loomInvalidArgument);
  expectUsable(comms);
  onEachRank(comms, [&](int r) { EXPECT_LOOM(loomCommDestroy(comms[r])); });
}

}  // namespace
}  // namespace loom::test
