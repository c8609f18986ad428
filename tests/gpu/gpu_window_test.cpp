// Collectives on registered windows (loomCommWindowRegister): the harness's two buffers are
// registered on every rank, so the usual checks (reference results, guards around outputs,
// inputs unchanged, in place, misaligned offsets) run through the zero-copy kernels and, with
// "ce", the copy engines; also CUDA graph capture, deregistration, and a call whose offsets
// differ between ranks (an error on every rank, not wrong data).
#include <cuda_runtime.h>
#include <unistd.h>

#include <cstring>
#include <string>
#include <vector>

#include "gpu_checks.hpp"

namespace loom::gputest {
namespace {

// The harness's buffers as windows for the life of the object.
class Windows {
 public:
  explicit Windows(Harness& h) : h_(h) {
    const size_t bytes = h.capacity() + kGuardBytes + 64;
    for (char* base : {h.a(), h.b()}) {
      loomWindow_t w = nullptr;
      if (!h.call(loomCommWindowRegister(h.comm(), base, bytes, &w, LOOM_WIN_COLL_SYMMETRIC),
                  "loomCommWindowRegister"))
        return;
      windows_.push_back(w);
    }
  }
  ~Windows() {
    cudaStreamSynchronize(h_.stream());
    for (loomWindow_t w : windows_)
      if (h_.ok()) h_.call(loomCommWindowDeregister(h_.comm(), w), "loomCommWindowDeregister");
  }
  Windows(const Windows&) = delete;
  Windows& operator=(const Windows&) = delete;
  bool registered() const { return windows_.size() == 2; }
  // Every window is used directly.
  bool direct() {
    int all = 1;
    for (loomWindow_t w : windows_) {
      int d = 0;
      h_.call(loomCommWindowIsDirect(h_.comm(), w, &d), "loomCommWindowIsDirect");
      all &= d;
    }
    return all == 1;
  }

 private:
  Harness& h_;
  std::vector<loomWindow_t> windows_;
};

// Windows take calls of every size whatever the protocol; "simple" and "ce" where it matters.
std::vector<GpuConfig> windowConfigs() {
  return {
      {"windows", "simple", "", ""},
      {"windows-ce", "allreduce:simple,reducescatter:simple,allgather:ce,alltoall:ce", "", ""},
      {"windows-auto", "", "", ""},
  };
}

class WindowSweep : public ::testing::TestWithParam<GpuConfig> {};
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(WindowSweep);

TEST_P(WindowSweep, CollectivesOnWindowsMatchTheReference) {
  if (cpuReferenceMode()) GTEST_SKIP() << "CUDA only";
  Harness h(GetParam());
  ASSERT_TRUE(h.ok());
  Windows w(h);
  ASSERT_TRUE(w.registered());
  // Ranks on GPUs that map each other's memory (one GPU shared, or peers over NVLink/PCIe).
  EXPECT_TRUE(w.direct()) << "windows were registered but are not used directly";
  // sweepSizes reach past LOOM_CUDA_ONESHOT_MAX_BYTES: allreduce runs one-shot below it and
  // two-shot above it and in place.
  for (loomDataType_t t : {loomFloat32, loomBfloat16, loomInt32, loomFloat64}) {
    for (size_t count : sweepSizes(t)) {
      for (Layout layout : {Layout{false, 0}, Layout{true, 0}, Layout{false, 1}}) {
        if (!h.ok()) return;
        checkAllReduce(h, t, loomSum, count, layout);
        checkAllReduce(h, t, loomAvg, count, layout);
        checkReduceScatter(h, t, t == loomInt32 ? loomMax : loomSum, count, layout);
        checkAllGather(h, t, count, layout);
        if (!layout.inPlace) checkAllToAll(h, t, count, layout);
        // Collectives without a window plan still run on window buffers.
        checkBroadcast(h, t, count, layout);
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Configs, WindowSweep, ::testing::ValuesIn(windowConfigs()),
                         [](const auto& info) { return configTestName(info.param); });

// Captured into a graph (the copy engines' host-side sequence numbers cannot replay, so "ce"
// runs the zero-copy kernel there), replayed with fresh inputs; then eager calls again.
TEST(WindowGraphs, CapturedCallsOnWindowsReplay) {
  if (cpuReferenceMode()) GTEST_SKIP() << "CUDA only";
  Harness h(windowConfigs()[1]);
  ASSERT_TRUE(h.ok());
  Windows w(h);
  ASSERT_TRUE(w.registered());
  const loomDataType_t t = loomFloat32;
  const size_t n = 4096 + 3, bytes = n * sizeof(float);
  cudaStream_t s = h.stream();
  char* in = h.a();
  char* sum = h.b();
  char* gathered = h.b() + bytes + 256;
  ASSERT_LE(256 + bytes + bytes * gRanks, h.capacity());
  std::vector<char> src(bytes);
  cudaGraph_t graph = nullptr;
  ASSERT_CUDA(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
  loomResult_t reduced = loomAllReduce(in, sum, n, t, loomSum, h.comm(), h.loomStream());
  loomResult_t all = loomAllGather(in, gathered, n, t, h.comm(), h.loomStream());
  cudaError_t ended = cudaStreamEndCapture(s, &graph);
  ASSERT_TRUE(h.call(reduced, "allreduce captured"));
  ASSERT_TRUE(h.call(all, "allgather captured"));
  ASSERT_EQ(ended, cudaSuccess) << cudaErrorText(ended);
  cudaGraphExec_t exec = nullptr;
  ASSERT_CUDA(cudaGraphInstantiate(&exec, graph, 0));
  for (int replay = 0; replay < 20 && h.ok(); ++replay) {
    const size_t first = h.nextFirst();
    h.upload(in, values(t, gRank, n, first));
    EXPECT_CUDA(cudaMemsetAsync(sum, kPoison, bytes, s));
    EXPECT_CUDA(cudaMemsetAsync(gathered, kPoison, bytes * gRanks, s));
    EXPECT_CUDA(cudaGraphLaunch(exec, s));
    if (!h.settle("replay " + std::to_string(replay))) break;
    h.expectData(reduceReference(t, loomSum, -1, n, first, gRanks), sum, t,
                 "allreduce replay " + std::to_string(replay));
    std::vector<char> blocks;
    for (int r = 0; r < gRanks; ++r) {
      std::vector<char> b = values(t, r, n, first);
      blocks.insert(blocks.end(), b.begin(), b.end());
    }
    h.expectData(blocks, gathered, t, "allgather replay " + std::to_string(replay));
  }
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  checkAllGather(h, t, n, {});
  checkAllReduce(h, t, loomSum, n, {});
}

// Deregistered windows are ordinary buffers again; registering anew works.
TEST(WindowLifetime, DeregisteredBuffersKeepWorking) {
  if (cpuReferenceMode()) GTEST_SKIP() << "CUDA only";
  Harness h(windowConfigs()[0]);
  ASSERT_TRUE(h.ok());
  for (int round = 0; round < 3 && h.ok(); ++round) {
    {
      Windows w(h);
      ASSERT_TRUE(w.registered());
      checkAllReduce(h, loomFloat32, loomSum, 70001, {});
      checkAllGather(h, loomFloat32, 70001, {});
    }
    checkAllReduce(h, loomFloat32, loomSum, 70001, {});
    checkAllGather(h, loomFloat32, 70001, {});
  }
}

// Rank 0 gathers into another offset of its window than the others: every rank's call fails
// with loomInvalidUsage, and nothing waits for ever.
TEST(WindowMisuse, OffsetsThatDifferBetweenRanksFailEveryRank) {
  if (cpuReferenceMode()) GTEST_SKIP() << "CUDA only";
  loomConfig_t cfg = LOOM_CONFIG_INITIALIZER;
  cfg.device = "cuda";
  cfg.timeoutMs = 30000;
  loomComm_t comm = nullptr;
  ASSERT_LOOM(loomCommSplit(gWorld, 0, gRank, &comm, &cfg));
  const size_t count = 1024, bytes = count * sizeof(float);
  char* buf = nullptr;
  const size_t total = bytes * (gRanks + 1) + 8192;
  ASSERT_LOOM(loomMemAlloc(comm, reinterpret_cast<void**>(&buf), total));
  loomWindow_t win = nullptr;
  ASSERT_LOOM(loomCommWindowRegister(comm, buf, total, &win, LOOM_WIN_COLL_SYMMETRIC));
  int direct = 0;
  ASSERT_LOOM(loomCommWindowIsDirect(comm, win, &direct));
  if (direct == 1) {
    cudaStream_t s = nullptr;
    ASSERT_CUDA(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    char* out = buf + (gRank == 0 ? 0 : 1024);
    char* in = buf + bytes * gRanks + 4096;
    loomResult_t r = loomAllGather(in, out, count, loomFloat32, comm, s);
    EXPECT_TRUE(r == loomSuccess || r == loomInvalidUsage) << loomGetErrorString(r);
    EXPECT_CUDA(cudaStreamSynchronize(s));
    loomResult_t async = loomSuccess;
    for (int i = 0; i < 2000 && async == loomSuccess; ++i) {
      EXPECT_LOOM(loomCommGetAsyncError(comm, &async));
      if (async == loomSuccess) usleep(1000);
    }
    EXPECT_EQ(async, loomInvalidUsage) << loomGetLastError(comm);
    cudaStreamDestroy(s);
  }
  loomCommAbort(comm);
  cudaFree(buf);
}

}  // namespace
}  // namespace loom::gputest
