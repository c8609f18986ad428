// Every collective x data type (one per element size where data only moves: kTypePerSize) x op x
// in-place/out-of-place x size, with each algorithm forced in turn (and with tiny staging buffers
// so that every chunking and wrap-around path runs), compared bit for bit with an independent
// reference. Run by every rank under loomrun (see CMakeLists).
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <span>
#include <string>
#include <vector>

#include "expect_loom.hpp"
#include "loom/loom.h"
#include "test_values.hpp"

namespace loom::test {
namespace {

loomComm_t gWorld = nullptr;
int gRank = 0, gRanks = 1;

struct Config {
  const char* name;
  const char* algo;            // LOOM_ALGO for the communicator
  const char* chunkBytes;      // LOOM_SHM_CHUNK_BYTES ("" = default)
  const char* p2pBytes;        // LOOM_P2P_BUFFER_BYTES
  size_t largeCount;           // the largest size of the sweep
  const char* streaming = "";  // LOOM_STREAMING_MIN_BYTES ("0": every output copy streams)
  const char* streams = "";    // LOOM_SOCKET_STREAMS (ranks on several nodes)
};

constexpr size_t kMiBPlus3 = (1u << 20) + 3;
// Every collective forced onto its algorithm over pair channels (any transport).
constexpr const char* kChannelAlgos =
    "allreduce:ring,allgather:ring,reducescatter:ring,broadcast:ring,reduce:ring,"
    "gather:pairwise,scatter:pairwise,alltoall:pairwise,alltoallv:pairwise,barrier:pairwise";
const Config kConfigs[] = {
    {"auto", "", "", "", kMiBPlus3},
    {"direct", "allreduce:direct,reduce:direct", "", "", kMiBPlus3, "0"},
    {"pipelined", "allreduce:pipelined,reduce:pipelined", "", "", kMiBPlus3, "0"},
    {"ring", "allreduce:ring,allgather:ring,reducescatter:ring", "", "", kMiBPlus3},
    {"tiny-pipelined", "allreduce:pipelined,reduce:pipelined", "4096", "4096", 20000 + 3},
    {"tiny-ring", "allreduce:ring,allgather:ring,reducescatter:ring", "4096", "4096", 20000 + 3},
    {"channels", kChannelAlgos, "", "4096", 20000 + 3},
};

// Ranks on several nodes (COLLECTIVES_TEST_CONFIGS=multinode, e.g. LOOM_NODE_ID per rank): only
// the algorithms over pair channels are valid there. Striping over 3 connections, tiny staging
// buffers and a single connection each get a run.
const Config kMultiNodeConfigs[] = {
    {"auto", "", "", "", kMiBPlus3, "", "3"},
    {"ring", kChannelAlgos, "", "", kMiBPlus3, "0", "1"},
    {"tiny-ring", kChannelAlgos, "4096", "4096", 20000 + 3, "", "2"},
};

// The hierarchical algorithms forced (COLLECTIVES_TEST_CONFIGS=hierarchical), with the default
// buffers and with tiny ones, so that every phase runs many arena steps and ring chunks.
constexpr const char* kHierarchicalAlgos =
    "allreduce:hierarchical,allgather:hierarchical,reducescatter:hierarchical,"
    "broadcast:hierarchical,reduce:hierarchical,alltoall:hierarchical";
const Config kHierarchicalConfigs[] = {
    {"hierarchical", kHierarchicalAlgos, "", "", kMiBPlus3, "0", "2"},
    {"tiny-hierarchical", kHierarchicalAlgos, "4096", "4096", 20000 + 3, "", "1"},
};

std::string configSet() {
  const char* which = std::getenv("COLLECTIVES_TEST_CONFIGS");
  return which != nullptr ? which : "";
}
bool multiNode() { return configSet() == "multinode" || configSet() == "hierarchical"; }

// COLLECTIVES_TEST_ALGO=<a LOOM_ALGO value> replaces the config list by that value at the full
// and at tiny staging sizes, so a script can force each algorithm in turn (LOOM_ALGO itself is
// set per config below). Only the collectives it names run.
std::span<const Config> configs() {
  static const char* forced = std::getenv("COLLECTIVES_TEST_ALGO");
  static const Config kForced[] = {
      {"forced", forced != nullptr ? forced : "", "", "", kMiBPlus3},
      {"tiny-forced", forced != nullptr ? forced : "", "4096", "4096", 20000 + 3, "", "2"},
  };
  if (forced != nullptr && *forced != '\0') return kForced;
  if (configSet() == "hierarchical") return kHierarchicalConfigs;
  if (multiNode()) return kMultiNodeConfigs;
  return kConfigs;
}

// A communicator built with the config's environment (read at init), split off the world.
struct ConfigComm {
  const Config& config;
  loomComm_t comm = nullptr;
  explicit ConfigComm(const Config& c) : config(c) {
    setenv("LOOM_ALGO", c.algo, 1);
    setenv("LOOM_SHM_CHUNK_BYTES", c.chunkBytes, 1);
    setenv("LOOM_P2P_BUFFER_BYTES", c.p2pBytes, 1);
    setenv("LOOM_STREAMING_MIN_BYTES", c.streaming, 1);
    setenv("LOOM_SOCKET_STREAMS", c.streams, 1);
    loomResult_t r = loomCommSplit(gWorld, 0, gRank, &comm, nullptr);
    unsetenv("LOOM_ALGO");
    unsetenv("LOOM_SHM_CHUNK_BYTES");
    unsetenv("LOOM_P2P_BUFFER_BYTES");
    unsetenv("LOOM_STREAMING_MIN_BYTES");
    unsetenv("LOOM_SOCKET_STREAMS");
    if (r != loomSuccess)
      ADD_FAILURE() << "split for " << c.name << ": " << loomGetLastError(nullptr);
  }
  ~ConfigComm() {
    if (comm) loomCommDestroy(comm);
  }
  std::vector<size_t> sizes() const { return {0, 1, 7, 4096, config.largeCount}; }
};

// True if the config forces an algorithm for this collective or runs the default table.
bool configCovers(const Config& c, const char* collective) {
  std::string algo = c.algo;
  // tiny-pipelined also runs everything else with many chunks; direct streams every output.
  return algo.empty() || algo.find(std::string(collective) + ":") != std::string::npos ||
         std::string(c.name) == "tiny-pipelined" || std::string(c.name) == "direct";
}

const loomRedOp_t kOps[] = {loomSum, loomProd, loomMax, loomMin, loomAvg};

// The reductions' types. COLLECTIVES_TEST_TYPES=lean: kTypePerSize. Set for the many-rank and
// multi-node runs: how an algorithm splits and orders the data depends on the rank count and the
// element size, while every type's reduction runs in full at 1-5 ranks.
std::vector<loomDataType_t> allTypes() {
  const char* which = std::getenv("COLLECTIVES_TEST_TYPES");
  if (which != nullptr && std::string(which) == "lean")
    return {std::begin(kTypePerSize), std::end(kTypePerSize)};
  std::vector<loomDataType_t> out;
  for (int t = 0; t < loomNumTypes; ++t) out.push_back(static_cast<loomDataType_t>(t));
  return out;
}

std::string describe(const Config& c, loomDataType_t t, const char* op, bool inPlace, size_t n) {
  return std::string(c.name) + " " + dtypeName(t) + " " + op +
         (inPlace ? " in-place" : " out-of-place") + " count " + std::to_string(n) + " ranks " +
         std::to_string(gRanks);
}

// A buffer reused from case to case: fresh vectors per case (up to 64 MiB a rank at 8 ranks) spent
// about a fifth of these tests in page faults and zeroing. Poisoned when taken, so an element a
// collective fails to write still fails the check, as in the zeroed vectors before.
class CaseBuffer {
 public:
  char* take(size_t bytes) {
    if (bytes_.size() < bytes) bytes_.resize(bytes);
    std::memset(bytes_.data(), 0xA5, bytes);
    return bytes_.data();
  }

 private:
  std::vector<char> bytes_;
};

void expectMatch(const Pattern& want, const void* got, size_t count, size_t first,
                 const std::string& what) {
  long bad = want.firstMismatch(got, count, first);
  EXPECT_EQ(bad, -1) << what << ": first wrong element " << bad;
}

TEST(Collectives, AllReduceAndReduce) {
  CaseBuffer sendBuffer, recvBuffer;
  for (const Config& c : configs()) {
    ConfigComm cc(c);
    ASSERT_NE(cc.comm, nullptr);
    for (loomDataType_t t : allTypes()) {
      size_t esize = dtypeSize(t);
      for (loomRedOp_t op : kOps) {
        Pattern input = Pattern::input(t, op, gRank);
        Pattern reduced = Pattern::reduced(t, op, gRanks);
        for (size_t n : cc.sizes()) {
          if (!atLargeSize(op, n)) continue;
          char* send = sendBuffer.take(n * esize + 1);
          char* recv = recvBuffer.take(n * esize + 1);
          for (bool inPlace : {false, true}) {
            int root = static_cast<int>((static_cast<int>(t) + static_cast<int>(op) + n) % gRanks);
            if (configCovers(c, "allreduce")) {
              input.fill(send, n);
              void* out = inPlace ? send : recv;
              EXPECT_LOOM(loomAllReduce(send, out, n, t, op, cc.comm, nullptr));
              expectMatch(reduced, out, n, 0,
                          "allreduce " + describe(c, t, opName(op), inPlace, n));
            }
            if (configCovers(c, "reduce")) {
              input.fill(send, n);
              void* out = inPlace ? send : recv;
              EXPECT_LOOM(loomReduce(send, out, n, t, op, root, cc.comm, nullptr));
              if (gRank == root)
                expectMatch(reduced, out, n, 0, "reduce " + describe(c, t, opName(op), inPlace, n));
            }
          }
        }
      }
    }
  }
}

TEST(Collectives, ReduceScatter) {
  CaseBuffer sendBuffer, recvBuffer;
  for (const Config& c : configs()) {
    if (!configCovers(c, "reducescatter")) continue;
    ConfigComm cc(c);
    ASSERT_NE(cc.comm, nullptr);
    for (loomDataType_t t : allTypes()) {
      size_t esize = dtypeSize(t);
      for (loomRedOp_t op : kOps) {
        Pattern input = Pattern::input(t, op, gRank);
        Pattern reduced = Pattern::reduced(t, op, gRanks);
        for (size_t n : cc.sizes()) {
          if (!atLargeSize(op, n)) continue;
          char* send = sendBuffer.take(n * esize * gRanks + 1);
          char* recv = recvBuffer.take(n * esize + 1);
          for (bool inPlace : {false, true}) {
            // Block i of the input is the sequence from index i*n, so each rank's block differs.
            input.fill(send, n * gRanks);
            void* out = inPlace ? send + gRank * n * esize : recv;
            EXPECT_LOOM(loomReduceScatter(send, out, n, t, op, cc.comm, nullptr));
            expectMatch(reduced, out, n, gRank * n,
                        "reducescatter " + describe(c, t, opName(op), inPlace, n));
          }
        }
      }
    }
  }
}

TEST(Collectives, AllGatherAndGather) {
  CaseBuffer sendBuffer, recvBuffer;
  for (const Config& c : configs()) {
    ConfigComm cc(c);
    ASSERT_NE(cc.comm, nullptr);
    for (loomDataType_t t : kTypePerSize) {
      size_t esize = dtypeSize(t);
      std::vector<Pattern> blocks;
      for (int r = 0; r < gRanks; ++r) blocks.push_back(Pattern::input(t, loomSum, r));
      for (size_t n : cc.sizes()) {
        char* send = sendBuffer.take(n * esize + 1);
        char* recv = recvBuffer.take(n * esize * gRanks + 1);
        int root = static_cast<int>((t + n) % gRanks);
        for (bool inPlace : {false, true}) {
          if (configCovers(c, "allgather")) {
            char* mine = inPlace ? recv + gRank * n * esize : send;
            blocks[gRank].fill(mine, n);
            EXPECT_LOOM(loomAllGather(mine, recv, n, t, cc.comm, nullptr));
            for (int r = 0; r < gRanks; ++r)
              expectMatch(
                  blocks[r], recv + r * n * esize, n, 0,
                  "allgather block " + std::to_string(r) + " " + describe(c, t, "", inPlace, n));
          }
          if (configCovers(c, "gather") && !inPlace) {
            blocks[gRank].fill(send, n);
            EXPECT_LOOM(loomGather(send, recv, n, t, root, cc.comm, nullptr));
            if (gRank == root)
              for (int r = 0; r < gRanks; ++r)
                expectMatch(
                    blocks[r], recv + r * n * esize, n, 0,
                    "gather block " + std::to_string(r) + " " + describe(c, t, "", false, n));
          }
        }
      }
    }
  }
}

TEST(Collectives, BroadcastAndScatter) {
  CaseBuffer sendBuffer, recvBuffer;
  for (const Config& c : configs()) {
    if (!configCovers(c, "broadcast")) continue;
    ConfigComm cc(c);
    ASSERT_NE(cc.comm, nullptr);
    for (loomDataType_t t : kTypePerSize) {
      size_t esize = dtypeSize(t);
      for (size_t n : cc.sizes()) {
        int root = static_cast<int>((t * 3 + n) % gRanks);
        Pattern rootData = Pattern::input(t, loomSum, root);
        char* send = sendBuffer.take(n * esize * gRanks + 1);
        char* recv = recvBuffer.take(n * esize * gRanks + 1);
        for (bool inPlace : {false, true}) {
          if (gRank == root) rootData.fill(send, n);
          void* out = inPlace ? send : recv;
          EXPECT_LOOM(loomBroadcast(send, out, n, t, root, cc.comm, nullptr));
          expectMatch(rootData, out, n, 0, "broadcast " + describe(c, t, "", inPlace, n));
        }
        if (gRank == root) rootData.fill(send, n * gRanks);
        EXPECT_LOOM(
            loomScatter(gRank == root ? send : nullptr, recv, n, t, root, cc.comm, nullptr));
        expectMatch(rootData, recv, n, gRank * n, "scatter " + describe(c, t, "", false, n));
      }
    }
  }
}

TEST(Collectives, AllToAllAndAllToAllv) {
  CaseBuffer sendBuffer, recvBuffer, vsendBuffer, vrecvBuffer;
  for (const Config& c : configs()) {
    if (!configCovers(c, "alltoall")) continue;
    ConfigComm cc(c);
    ASSERT_NE(cc.comm, nullptr);
    for (loomDataType_t t : kTypePerSize) {
      size_t esize = dtypeSize(t);
      // Pair (i -> j) carries the sequence of "rank" i * 64 + j.
      auto pair = [&](int i, int j) { return Pattern::input(t, loomSum, i * 64 + j); };
      for (size_t n : cc.sizes()) {
        char* send = sendBuffer.take(n * esize * gRanks + 1);
        char* recv = recvBuffer.take(n * esize * gRanks + 1);
        for (int j = 0; j < gRanks; ++j) pair(gRank, j).fill(send + j * n * esize, n);
        EXPECT_LOOM(loomAllToAll(send, recv, n, t, cc.comm, nullptr));
        for (int i = 0; i < gRanks; ++i)
          expectMatch(pair(i, gRank), recv + i * n * esize, n, 0,
                      "alltoall from " + std::to_string(i) + " " + describe(c, t, "", false, n));

        // alltoallv: uneven counts (some zero), packed in reverse peer order.
        auto count = [&](int i, int j) { return n == 0 ? 0 : (n * ((i + 2 * j) % 4)) / 3; };
        std::vector<size_t> sc(gRanks), sd(gRanks), rc(gRanks), rd(gRanks);
        size_t sTotal = 0, rTotal = 0;
        for (int j = gRanks - 1; j >= 0; --j) {
          sc[j] = count(gRank, j), sd[j] = sTotal, sTotal += sc[j];
          rc[j] = count(j, gRank), rd[j] = rTotal, rTotal += rc[j];
        }
        char* vsend = vsendBuffer.take(sTotal * esize + 1);
        char* vrecv = vrecvBuffer.take(rTotal * esize + 1);
        for (int j = 0; j < gRanks; ++j) pair(gRank, j).fill(vsend + sd[j] * esize, sc[j]);
        EXPECT_LOOM(loomAllToAllv(vsend, sc.data(), sd.data(), vrecv, rc.data(), rd.data(), t,
                                  cc.comm, nullptr));
        for (int i = 0; i < gRanks; ++i)
          expectMatch(pair(i, gRank), vrecv + rd[i] * esize, rc[i], 0,
                      "alltoallv from " + std::to_string(i) + " " + describe(c, t, "", false, n));
      }
    }
  }
}

TEST(PointToPoint, RingExchangeInGroups) {
  for (const Config& c : configs()) {
    if (std::string(c.name) != "auto" && std::string(c.name) != "tiny-ring") continue;
    ConfigComm cc(c);
    ASSERT_NE(cc.comm, nullptr);
    for (loomDataType_t t : {loomInt8, loomFloat32, loomFloat64, loomBfloat16}) {
      size_t esize = dtypeSize(t);
      for (size_t n : cc.sizes()) {
        int right = (gRank + 1) % gRanks, left = (gRank - 1 + gRanks) % gRanks;
        std::vector<char> toRight(n * esize + 1), toLeft(n * esize + 1), fromLeft(n * esize + 1),
            fromRight(n * esize + 1);
        Pattern::input(t, loomSum, gRank * 2).fill(toRight.data(), n);
        Pattern::input(t, loomSum, gRank * 2 + 1).fill(toLeft.data(), n);
        // Sends first on every rank: only the group makes this safe for sizes beyond the buffers.
        ASSERT_LOOM(loomGroupStart());
        EXPECT_LOOM(loomSend(toRight.data(), n, t, right, cc.comm, nullptr));
        EXPECT_LOOM(loomSend(toLeft.data(), n, t, left, cc.comm, nullptr));
        EXPECT_LOOM(loomRecv(fromLeft.data(), n, t, left, cc.comm, nullptr));
        EXPECT_LOOM(loomRecv(fromRight.data(), n, t, right, cc.comm, nullptr));
        ASSERT_LOOM(loomGroupEnd());
        std::string what = describe(c, t, "", false, n);
        expectMatch(Pattern::input(t, loomSum, left * 2), fromLeft.data(), n, 0,
                    "from left " + what);
        expectMatch(Pattern::input(t, loomSum, right * 2 + 1), fromRight.data(), n, 0,
                    "from right " + what);
      }
    }
  }
}

TEST(PointToPoint, BlockingPairsInOrder) {
  // Several messages to the same peer arrive in issue order; a blocking send fits the buffer.
  if (gRanks < 2) GTEST_SKIP() << "needs 2 ranks";
  std::vector<int32_t> a(100), b(100);
  for (int m = 0; m < 5; ++m) {
    if (gRank == 0) {
      for (int i = 0; i < 100; ++i) a[i] = m * 1000 + i;
      EXPECT_LOOM(loomSend(a.data(), 100, loomInt32, 1, gWorld, nullptr));
    } else if (gRank == 1) {
      EXPECT_LOOM(loomRecv(b.data(), 100, loomInt32, 0, gWorld, nullptr));
      for (int i = 0; i < 100; ++i) ASSERT_EQ(b[i], m * 1000 + i);
    }
  }
  EXPECT_LOOM(loomBarrier(gWorld, nullptr));
}

TEST(PointToPoint, TagsMatchOutOfOrder) {
  // Rank 0 sends tags 7, 3, 5, 3 (sizes differ; the large one exceeds the channel buffer); rank 1
  // receives 5, then 3 twice (oldest first), then 7: earlier messages wait in the inbox.
  if (gRanks < 2) GTEST_SKIP() << "needs 2 ranks";
  const size_t big = 300 * 1024;  // int32s: over the default 256 KiB channel
  auto fill = [](std::vector<int32_t>& v, int seed) {
    for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<int32_t>(seed * 1000003 + i);
  };
  struct Message {
    int tag;
    size_t count;
    int seed;
  };
  const Message sent[] = {{7, 10, 1}, {3, 1000, 2}, {5, big, 3}, {3, 0, 4}};
  if (gRank == 0) {
    // A group, so the large message does not block the later ones behind the channel's capacity.
    std::vector<std::vector<int32_t>> bufs;
    for (const Message& m : sent) fill(bufs.emplace_back(m.count), m.seed);
    EXPECT_LOOM(loomGroupStart());
    for (size_t i = 0; i < 4; ++i)
      EXPECT_LOOM(
          loomSendTag(bufs[i].data(), sent[i].count, loomInt32, 1, sent[i].tag, gWorld, nullptr));
    EXPECT_LOOM(loomGroupEnd());
  } else if (gRank == 1) {
    const int order[] = {2, 1, 3, 0};
    for (int i : order) {
      std::vector<int32_t> got(sent[i].count, -1), want(sent[i].count);
      fill(want, sent[i].seed);
      EXPECT_LOOM(
          loomRecvTag(got.data(), sent[i].count, loomInt32, 0, sent[i].tag, gWorld, nullptr));
      EXPECT_EQ(got, want) << "tag " << sent[i].tag << " count " << sent[i].count;
    }
  }
  EXPECT_LOOM(loomBarrier(gWorld, nullptr));
}

TEST(PointToPoint, LaterReceiveCompletesFromTheInboxInAGroup) {
  // In one group rank 1 first posts a receive whose message comes last; the second receive's
  // message arrived before and completes from the inbox meanwhile.
  if (gRanks < 2) GTEST_SKIP() << "needs 2 ranks";
  int32_t a = 11, b = 22, x = 0, y = 0;
  if (gRank == 0) {
    EXPECT_LOOM(loomSendTag(&b, 1, loomInt32, 1, 2, gWorld, nullptr));
    EXPECT_LOOM(loomSendTag(&a, 1, loomInt32, 1, 1, gWorld, nullptr));
  } else if (gRank == 1) {
    EXPECT_LOOM(loomGroupStart());
    EXPECT_LOOM(loomRecvTag(&x, 1, loomInt32, 0, 1, gWorld, nullptr));
    EXPECT_LOOM(loomRecvTag(&y, 1, loomInt32, 0, 2, gWorld, nullptr));
    EXPECT_LOOM(loomGroupEnd());
    EXPECT_EQ(x, 11);
    EXPECT_EQ(y, 22);
  }
  EXPECT_LOOM(loomBarrier(gWorld, nullptr));
}

TEST(Collectives, AccumulationTypeIsMoreAccurate) {
  // The ring's partial sums travel between ranks in the data type, so only the one-shot path
  // rounds once; ranks on several nodes have no one-shot path.
  if (multiNode()) GTEST_SKIP() << "no one-shot allreduce across nodes";
  // fp16: 2048 plus (n-1) ones. Rounding after every step (native) stays at 2048; accumulating in
  // fp32 rounds once.
  loomConfig_t config = LOOM_CONFIG_INITIALIZER;
  config.accumType = loomFloat32;
  setenv("LOOM_ALGO", "allreduce:direct", 1);
  loomComm_t accum = nullptr;
  ASSERT_LOOM(loomCommSplit(gWorld, 0, gRank, &accum, &config));
  unsetenv("LOOM_ALGO");
  uint16_t mine = floatToHalf(gRank == 0 ? 2048.0f : 1.0f), native = 0, wide = 0;
  EXPECT_LOOM(loomAllReduce(&mine, &native, 1, loomFloat16, loomSum, gWorld, nullptr));
  EXPECT_LOOM(loomAllReduce(&mine, &wide, 1, loomFloat16, loomSum, accum, nullptr));
  EXPECT_EQ(halfToFloat(wide), halfToFloat(floatToHalf(2048.0f + (gRanks - 1))));
  const char* algo = nullptr;
  EXPECT_LOOM(loomCommGetAlgorithm(gWorld, loomFuncAllReduce, 1, loomFloat16, &algo));
  if (std::string(algo) == "direct") {
    EXPECT_EQ(halfToFloat(native), 2048.0f);
  }
  EXPECT_LOOM(loomCommDestroy(accum));
}

// A collective of zero elements returns at once, as NCCL's do: it is not matched with the
// peers' calls, so one rank may make some the others do not (before, rank 0's empty allreduce met
// the others' next allreduce and failed it as a mismatch).
TEST(Collectives, ZeroCountCallsAreNoOps) {
  if (gRank == 0) {
    EXPECT_LOOM(loomAllReduce(nullptr, nullptr, 0, loomFloat32, loomSum, gWorld, nullptr));
    EXPECT_LOOM(loomAllGather(nullptr, nullptr, 0, loomInt32, gWorld, nullptr));
    EXPECT_LOOM(loomBroadcast(nullptr, nullptr, 0, loomFloat64, 0, gWorld, nullptr));
    EXPECT_LOOM(loomReduceScatter(nullptr, nullptr, 0, loomFloat32, loomMax, gWorld, nullptr));
    EXPECT_LOOM(loomAllToAll(nullptr, nullptr, 0, loomInt8, gWorld, nullptr));
  }
  // Arguments are still checked first.
  EXPECT_EQ(loomAllReduce(nullptr, nullptr, 0, loomFloat32, static_cast<loomRedOp_t>(99), gWorld,
                          nullptr),
            loomInvalidArgument);
  std::vector<float> data(4, 1.0f);
  EXPECT_LOOM(
      loomAllReduce(data.data(), data.data(), data.size(), loomFloat32, loomSum, gWorld, nullptr));
  EXPECT_EQ(data[3], static_cast<float>(gRanks));
}

TEST(Communicators, SplitByParityAndNoColor) {
  loomComm_t half = nullptr;
  int color = gRank == gRanks - 1 && gRanks > 2 ? LOOM_SPLIT_NOCOLOR : gRank % 2;
  ASSERT_LOOM(loomCommSplit(gWorld, color, -gRank, &half, nullptr));  // reversed order by key
  if (color == LOOM_SPLIT_NOCOLOR) {
    EXPECT_EQ(half, nullptr);
    return;
  }
  ASSERT_NE(half, nullptr);
  std::vector<int> members;
  for (int r = 0; r < gRanks; ++r)
    if (r % 2 == color && !(r == gRanks - 1 && gRanks > 2)) members.push_back(r);
  int size = 0, rank = -1;
  EXPECT_LOOM(loomCommCount(half, &size));
  EXPECT_LOOM(loomCommUserRank(half, &rank));
  EXPECT_EQ(size, static_cast<int>(members.size()));
  // Key -rank: the highest world rank becomes rank 0.
  int expectedRank = 0;
  for (int m : members) expectedRank += m > gRank;
  EXPECT_EQ(rank, expectedRank);
  int64_t value = gRank, sum = 0, expected = 0;
  for (int m : members) expected += m;
  EXPECT_LOOM(loomAllReduce(&value, &sum, 1, loomInt64, loomSum, half, nullptr));
  EXPECT_EQ(sum, expected);
  EXPECT_LOOM(loomCommDestroy(half));
}

// A child communicator made with LOOM_ALGO=algo must fail init with loomInvalidArgument and a
// message containing `words`; the world communicator stays usable.
void expectSplitRefused(const char* algo, const std::string& words) {
  setenv("LOOM_ALGO", algo, 1);
  loomComm_t comm = nullptr;
  loomResult_t r = loomCommSplit(gWorld, 0, gRank, &comm, nullptr);
  std::string why = loomGetLastError(nullptr);
  unsetenv("LOOM_ALGO");
  EXPECT_EQ(r, loomInvalidArgument);
  EXPECT_EQ(comm, nullptr);
  EXPECT_NE(why.find(words), std::string::npos) << why;
  EXPECT_LOOM(loomBarrier(gWorld, nullptr));
}

TEST(Communicators, ArenaAlgorithmsRefusedAcrossNodes) {
  if (!multiNode()) GTEST_SKIP() << "ranks on one node";
  expectSplitRefused("allreduce:direct", "valid here: ring");
}

TEST(Communicators, HierarchicalRefusedWhereItHasNoAlgorithm) {
  expectSplitRefused("alltoallv:hierarchical", "alltoallv has no algorithm 'hierarchical'");
}

TEST(Communicators, NonBlockingCommunicator) {
  loomConfig_t config = LOOM_CONFIG_INITIALIZER;
  config.blocking = 0;
  loomComm_t nb = nullptr;
  ASSERT_LOOM(loomCommSplit(gWorld, 0, gRank, &nb, nullptr));
  EXPECT_LOOM(loomCommDestroy(nb));
  // Non-blocking init through a unique id shared over the world communicator.
  loomUniqueId id;
  if (gRank == 0) {
    ASSERT_LOOM(loomGetUniqueId(&id));
  }
  EXPECT_LOOM(loomBroadcast(&id, &id, sizeof(id), loomUint8, 0, gWorld, nullptr));
  loomResult_t r = loomCommInitRankConfig(&nb, gRanks, id, gRank, &config);
  ASSERT_TRUE(r == loomSuccess || r == loomInProgress) << loomGetLastError(nullptr);
  std::vector<float> data(1000, 1.0f);
  r = loomAllReduce(data.data(), data.data(), data.size(), loomFloat32, loomSum, nb, nullptr);
  EXPECT_TRUE(r == loomSuccess || r == loomInProgress) << loomGetLastError(nullptr);
  loomResult_t state = loomInProgress;
  for (int i = 0; i < 600000 && state == loomInProgress; ++i) {
    EXPECT_LOOM(loomCommGetAsyncError(nb, &state));
    if (state == loomInProgress) usleep(100);
  }
  EXPECT_EQ(state, loomSuccess) << loomGetLastError(nullptr);
  EXPECT_EQ(data[999], static_cast<float>(gRanks));
  EXPECT_LOOM(loomCommFinalize(nb));
  EXPECT_LOOM(loomCommDestroy(nb));
}

}  // namespace
}  // namespace loom::test

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  if (loomCommInitFromEnv(&loom::test::gWorld, nullptr) != loomSuccess) {  // NOLINT
    fprintf(stderr, "init failed: %s\n", loomGetLastError(nullptr));
    return 2;
  }
  loomCommUserRank(loom::test::gWorld, &loom::test::gRank);
  loomCommCount(loom::test::gWorld, &loom::test::gRanks);
  int result = RUN_ALL_TESTS();
  loomCommDestroy(loom::test::gWorld);
  return result;
}
