// Every collective on GPU communicators x data type x op x in-place/out-of-place x size, under
// every config (each algorithm forced, tiny staging slots, host transport), compared bit for bit
// with the CPU library's reduction in rank order. Run by every rank under loomrun.
#include <chrono>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

#include "base/dtype.hpp"
#include "gpu_checks.hpp"

namespace loom::gputest {
namespace {

using Clock = std::chrono::steady_clock;

class Sweep : public ::testing::TestWithParam<GpuConfig> {};
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(Sweep);

TEST_P(Sweep, Reductions) {
  Harness h(GetParam());
  for (loomDataType_t t : allTypes()) {
    for (loomRedOp_t op : kOps) {
      for (size_t n : sweepSizes(t)) {
        for (bool inPlace : {false, true}) {
          checkAllReduce(h, t, op, n, {inPlace});
          checkReduce(h, t, op, n, {inPlace});
          checkReduceScatter(h, t, op, n, {inPlace});
        }
      }
    }
  }
}

TEST_P(Sweep, DataMovement) {
  Harness h(GetParam());
  for (loomDataType_t t : allTypes()) {
    for (size_t n : sweepSizes(t)) {
      for (bool inPlace : {false, true}) {
        checkBroadcast(h, t, n, {inPlace});
        checkAllGather(h, t, n, {inPlace});
        checkGather(h, t, n, {inPlace});
        checkScatter(h, t, n, {inPlace});
      }
      checkAllToAll(h, t, n, {});
      checkAllToAllv(h, t, n, {});
      checkSendRecvRing(h, t, n, {});
    }
  }
}

// Buffers one element past an allocation's start: 2-byte types at addresses that are not 4-byte
// aligned, 1-byte types at odd addresses, floats not 16-byte aligned.
TEST_P(Sweep, UnalignedPointers) {
  Harness h(GetParam());
  for (loomDataType_t t : {loomFloat16, loomBfloat16, loomInt8, loomFloat8e4m3, loomFloat32}) {
    for (size_t n : {size_t{7}, size_t{4096 + 1}, largeCount(t)}) {
      for (bool inPlace : {false, true}) {
        const Layout layout{inPlace, 1};
        checkAllReduce(h, t, loomSum, n, layout);
        checkAllReduce(h, t, loomMax, n, layout);
        checkReduce(h, t, loomAvg, n, layout);
        checkReduceScatter(h, t, loomSum, n, layout);
        checkBroadcast(h, t, n, layout);
        checkAllGather(h, t, n, layout);
        checkGather(h, t, n, layout);
        checkScatter(h, t, n, layout);
      }
      checkAllToAll(h, t, n, {false, 1});
      checkAllToAllv(h, t, n, {false, 1});
      checkSendRecvRing(h, t, n, {false, 1});
    }
  }
}

// loomCommGetAlgorithm names the forced algorithm for every collective and size; the selector
// picks one of the two GPU algorithms.
TEST_P(Sweep, AlgorithmNames) {
  if (cpuReferenceMode()) GTEST_SKIP() << "CUDA only";
  const GpuConfig& c = GetParam();
  Harness h(c, 4096);
  ASSERT_TRUE(h.ok());
  const loomFunc_t funcs[9] = {loomFuncAllReduce, loomFuncBroadcast,     loomFuncReduce,
                               loomFuncAllGather, loomFuncReduceScatter, loomFuncAllToAll,
                               loomFuncAllToAllv, loomFuncGather,        loomFuncScatter};
  std::string table;
  for (int f = 0; f < 9; ++f) {
    table += std::string("  ") + kAlgoKeys[f] + ":";
    for (size_t count : {size_t{1}, size_t{4097}, size_t{1} << 20, size_t{64} << 20}) {
      const char* name = nullptr;
      ASSERT_LOOM(loomCommGetAlgorithm(h.comm(), funcs[f], count, loomFloat32, &name));
      ASSERT_NE(name, nullptr);
      const std::string got = name;
      table += " " + got;
      if (c.algo[0] != '\0') {
        EXPECT_EQ(got, c.algo) << kAlgoKeys[f] << " count " << count << " in config " << c.name;
      } else {
        EXPECT_TRUE(got == "ll" || got == "simple")
            << kAlgoKeys[f] << " count " << count << " picked '" << got << "'";
      }
    }
    table += "\n";
  }
  if (gRank == 0)
    std::printf("config %s: algorithms for float counts 1, 4097, 1Mi, 64Mi\n%s", c.name,
                table.c_str());
}

INSTANTIATE_TEST_SUITE_P(Configs, Sweep, ::testing::ValuesIn(sweepConfigs()),
                         [](const auto& info) { return configTestName(info.param); });

// Narrow floats with config.accumType = float32: one rounding at the end, still bit-exact with
// the reference computed with the same accumulation type.
class Accum : public ::testing::TestWithParam<GpuConfig> {};
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(Accum);

TEST_P(Accum, NarrowFloatsAccumulateInFloat32) {
  Harness h(GetParam());
  for (loomDataType_t t :
       {loomFloat16, loomBfloat16, loomFloat8e4m3, loomFloat8e5m2, loomFloat8e4m3b15}) {
    for (loomRedOp_t op : kOps) {
      for (size_t n : sweepSizes(t)) {
        for (bool inPlace : {false, true}) {
          checkAllReduce(h, t, op, n, {inPlace});
          checkReduce(h, t, op, n, {inPlace});
          checkReduceScatter(h, t, op, n, {inPlace});
        }
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Configs, Accum, ::testing::ValuesIn(accumConfigs()),
                         [](const auto& info) { return configTestName(info.param); });

// The barrier of a stream completes only after every rank entered it.
TEST(Barrier, WaitsForTheLastRank) {
  if (gRanks < 2) GTEST_SKIP() << "needs 2 ranks";
  Harness h({"barrier", "", "", ""}, 4096);
  ASSERT_TRUE(h.ok());
  for (int i = 0; i < 100; ++i)
    ASSERT_TRUE(h.call(loomBarrier(h.comm(), h.loomStream()), "barrier"));
  ASSERT_TRUE(h.settle("100 barriers"));
  for (int late = 0; late < gRanks; ++late) {
    ASSERT_TRUE(h.call(loomBarrier(h.comm(), h.loomStream()), "barrier") && h.settle("barrier"));
    if (gRank == late) std::this_thread::sleep_for(std::chrono::milliseconds(300));
    const Clock::time_point start = Clock::now();
    ASSERT_TRUE(h.call(loomBarrier(h.comm(), h.loomStream()), "barrier") && h.settle("barrier"));
    const double waited = secondsSince(start);
    if (gRank != late) {
      EXPECT_GE(waited, 0.2) << "the barrier completed before rank " << late << " entered it";
    }
  }
}

// Separate (ungrouped) sends to one peer arrive in issue order, small and multi-chunk alike.
TEST(PointToPoint, MessagesToOnePeerArriveInOrder) {
  if (gRanks < 2) GTEST_SKIP() << "needs 2 ranks";
  Harness h({"p2p", "", "", ""});
  ASSERT_TRUE(h.ok());
  const loomDataType_t t = loomFloat32;
  const std::vector<size_t> counts = {1000, largeCount(t), 7, 0, 4097};
  std::vector<std::vector<char>> messages;
  std::vector<size_t> at;  // element offsets in the buffers
  size_t total = 0;
  for (size_t m = 0; m < counts.size(); ++m) {
    messages.push_back(values(t, 500 + static_cast<int>(m), counts[m], 0));
    at.push_back(total);
    total += counts[m];
  }
  const Span send = h.span(h.a(), {}, t, total * sizeof(float));
  const Span recv = h.span(h.b(), {}, t, total * sizeof(float));
  h.poison(send);
  h.poison(recv);
  for (size_t m = 0; m < counts.size(); ++m) {
    const std::string what = "message " + std::to_string(m) + " count " + std::to_string(counts[m]);
    if (gRank == 0) {
      h.upload(send.data() + at[m] * sizeof(float), messages[m]);
      ASSERT_TRUE(h.call(
          loomSend(send.data() + at[m] * sizeof(float), counts[m], t, 1, h.comm(), h.loomStream()),
          what));
    } else if (gRank == 1) {
      ASSERT_TRUE(h.call(
          loomRecv(recv.data() + at[m] * sizeof(float), counts[m], t, 0, h.comm(), h.loomStream()),
          what));
    }
  }
  ASSERT_TRUE(h.settle("messages"));
  if (gRank == 1) {
    for (size_t m = 0; m < counts.size(); ++m)
      h.expectData(messages[m], recv.data() + at[m] * sizeof(float), t,
                   "message " + std::to_string(m));
    h.expectGuards(recv, "messages");
  }
}

}  // namespace
}  // namespace loom::gputest
