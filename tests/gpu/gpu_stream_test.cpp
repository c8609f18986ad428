// Stream semantics of GPU collectives: ordered with the user's work before and after them on the
// stream (and across streams through events) with no host synchronization in between, calls that
// return while the stream is still busy, CUDA graph capture and replay, and buffers freed and
// allocated again between calls.
#include <chrono>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "base/dtype.hpp"
#include "gpu_checks.hpp"

namespace loom::gputest {
namespace {

using Clock = std::chrono::steady_clock;

struct DeviceBuffer {
  char* p = nullptr;
  explicit DeviceBuffer(size_t bytes) {
    if (cudaMalloc(&p, bytes) != cudaSuccess) p = nullptr;
  }
  ~DeviceBuffer() {
    if (p != nullptr) cudaFree(p);
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
};

struct PinnedBuffer {
  char* p = nullptr;
  explicit PinnedBuffer(size_t bytes) {
    if (cudaMallocHost(&p, bytes) != cudaSuccess) p = nullptr;
  }
  ~PinnedBuffer() {
    if (p != nullptr) cudaFreeHost(p);
  }
  PinnedBuffer(const PinnedBuffer&) = delete;
  PinnedBuffer& operator=(const PinnedBuffer&) = delete;
};

// A host function on a stream that holds it up: whatever follows on the stream runs later.
void CUDART_CB holdStream(void* milliseconds) {
  std::this_thread::sleep_for(std::chrono::milliseconds(*static_cast<const int*>(milliseconds)));
}
int gHoldMs = 50;
int gLongHoldMs = 1000;

void expectHost(Harness& h, const std::vector<char>& want, const char* got, loomDataType_t t,
                const std::string& what) {
  if (std::memcmp(want.data(), got, want.size()) == 0) return;
  const size_t esize = dtypeSize(t);
  size_t i = 0;
  while (std::memcmp(want.data() + i * esize, got + i * esize, esize) == 0) ++i;
  h.fail(what + ": first wrong element " + std::to_string(i) + " of " +
         std::to_string(want.size() / esize) + ": got " + elementText(got, i, t) + ", want " +
         elementText(want.data(), i, t));
}

class Streams : public ::testing::TestWithParam<GpuConfig> {};
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(Streams);

// Held stream, input copied in, the collective, the input and output overwritten after it, the
// output copied out before that: one host synchronization at the end. Then the same with the
// input produced on another stream and handed over with an event.
TEST_P(Streams, OrderedWithUserWorkBeforeAndAfter) {
  if (cpuReferenceMode()) GTEST_SKIP() << "CUDA only";
  Harness h(GetParam());
  ASSERT_TRUE(h.ok());
  const loomDataType_t t = loomFloat32;
  cudaStream_t s = h.stream(), producer = nullptr;
  cudaEvent_t ready = nullptr;
  ASSERT_CUDA(cudaStreamCreateWithFlags(&producer, cudaStreamNonBlocking));
  ASSERT_CUDA(cudaEventCreateWithFlags(&ready, cudaEventDisableTiming));
  for (size_t n : {size_t{7}, size_t{4096 + 1}, largeCount(t)}) {
    for (bool gather : {false, true}) {
      for (bool crossStream : {false, true}) {
        const size_t bytes = n * sizeof(float), outBytes = gather ? bytes * gRanks : bytes;
        const size_t first = h.nextFirst();
        const std::string what = std::string(gather ? "allgather" : "allreduce") + " count " +
                                 std::to_string(n) +
                                 (crossStream ? " (input from another stream)" : " (one stream)");
        const std::vector<char> in = values(t, gRank, n, first);
        const std::vector<char> want =
            gather ? allBlocks(t, n, first) : reduceReference(t, loomSum, -1, n, first, gRanks);
        PinnedBuffer hostIn(bytes), hostOut(outBytes);
        ASSERT_TRUE(hostIn.p != nullptr && hostOut.p != nullptr);
        std::memcpy(hostIn.p, in.data(), bytes);
        std::memset(hostOut.p, 0x5A, outBytes);
        char *dIn = h.a(), *dOut = h.b();
        ASSERT_CUDA(cudaMemsetAsync(dIn, kPoison, bytes, s));
        ASSERT_CUDA(cudaMemsetAsync(dOut, kPoison, outBytes, s));
        cudaStream_t inStream = crossStream ? producer : s;
        if (crossStream) {  // the producer must not start before the poison above
          ASSERT_CUDA(cudaEventRecord(ready, s));
          ASSERT_CUDA(cudaStreamWaitEvent(producer, ready, 0));
        }
        ASSERT_CUDA(cudaLaunchHostFunc(inStream, holdStream, &gHoldMs));
        ASSERT_CUDA(cudaMemcpyAsync(dIn, hostIn.p, bytes, cudaMemcpyHostToDevice, inStream));
        if (crossStream) {
          ASSERT_CUDA(cudaEventRecord(ready, producer));
          ASSERT_CUDA(cudaStreamWaitEvent(s, ready, 0));
        }
        const loomResult_t r =
            gather ? loomAllGather(dIn, dOut, n, t, h.comm(), h.loomStream())
                   : loomAllReduce(dIn, dOut, n, t, loomSum, h.comm(), h.loomStream());
        ASSERT_TRUE(h.call(r, what));
        ASSERT_CUDA(cudaMemsetAsync(dIn, 0, bytes, s));  // the input, clobbered after the call
        ASSERT_CUDA(cudaMemcpyAsync(hostOut.p, dOut, outBytes, cudaMemcpyDeviceToHost, s));
        ASSERT_CUDA(cudaMemsetAsync(dOut, 0, outBytes, s));  // the output, after it was copied
        ASSERT_TRUE(h.settle(what));
        expectHost(h, want, hostOut.p, t, what);
      }
    }
  }
  cudaEventDestroy(ready);
  cudaStreamDestroy(producer);
}

// Collectives only enqueue: with the stream held for a second, each call returns at once.
TEST_P(Streams, CallsReturnWhileTheStreamIsBusy) {
  if (cpuReferenceMode()) GTEST_SKIP() << "CUDA only";
  Harness h(GetParam());
  ASSERT_TRUE(h.ok());
  const loomDataType_t t = loomFloat32;
  const size_t n = 4096 + 1;
  checkAllReduce(h, t, loomSum, n, {});  // warm-up: connections made, buffers registered
  checkAllGather(h, t, n, {});
  ASSERT_TRUE(h.ok());
  const size_t first = h.nextFirst();
  h.upload(h.a(), values(t, gRank, n, first));
  ASSERT_CUDA(cudaLaunchHostFunc(h.stream(), holdStream, &gLongHoldMs));
  const Clock::time_point start = Clock::now();
  ASSERT_TRUE(h.call(loomAllReduce(h.a(), h.b(), n, t, loomSum, h.comm(), h.loomStream()),
                     "allreduce behind a held stream"));
  const double allreduceSeconds = secondsSince(start);
  ASSERT_TRUE(
      h.call(loomAllGather(h.a(), h.b() + n * sizeof(float), n, t, h.comm(), h.loomStream()),
             "allgather behind a held stream"));
  const double bothSeconds = secondsSince(start);
  ASSERT_TRUE(h.settle("collectives behind a held stream"));
  EXPECT_LT(allreduceSeconds, 0.5) << "loomAllReduce waited for the stream";
  EXPECT_LT(bothSeconds, 0.5) << "loomAllGather waited for the stream";
  h.expectData(reduceReference(t, loomSum, -1, n, first, gRanks), h.b(), t, "allreduce");
  h.expectData(allBlocks(t, n, first), h.b() + n * sizeof(float), t, "allgather");
}

// Buffers freed and allocated again (often at the same addresses) between calls: nothing cached
// about an old buffer may be used for a new one.
TEST_P(Streams, BuffersFreedAndAllocatedAgain) {
  if (cpuReferenceMode()) GTEST_SKIP() << "CUDA only";
  Harness h(GetParam(), 4096);
  ASSERT_TRUE(h.ok());
  const loomDataType_t t = loomFloat32;
  for (int round = 0; round < 6; ++round) {
    const size_t n = round % 2 == 0 ? largeCount(t) : 4096 + 1, bytes = n * sizeof(float);
    DeviceBuffer send(bytes), recv(bytes * gRanks);
    ASSERT_TRUE(send.p != nullptr && recv.p != nullptr);
    const std::string what = "round " + std::to_string(round) + " count " + std::to_string(n);
    size_t first = h.nextFirst();
    h.upload(send.p, values(t, gRank, n, first));
    ASSERT_TRUE(h.call(loomAllReduce(send.p, recv.p, n, t, loomSum, h.comm(), h.loomStream()),
                       "allreduce " + what));
    ASSERT_TRUE(h.settle(what));
    h.expectData(reduceReference(t, loomSum, -1, n, first, gRanks), recv.p, t, "allreduce " + what);
    first = h.nextFirst();
    h.upload(send.p, values(t, gRank, n, first));
    ASSERT_TRUE(
        h.call(loomAllGather(send.p, recv.p, n, t, h.comm(), h.loomStream()), "allgather " + what));
    ASSERT_TRUE(h.settle(what));
    h.expectData(allBlocks(t, n, first), recv.p, t, "allgather " + what);
  }
}

// A split whose config names no device stays on the parent's GPU, as ncclCommSplit's children do
// (it used to fall back to the host: found through the torch backend's split_group).
TEST_P(Streams, SplitWithAConfigNamingNoDeviceStaysOnTheGpu) {
  if (cpuReferenceMode()) GTEST_SKIP() << "CUDA only";
  Harness h(GetParam(), 4096);
  ASSERT_TRUE(h.ok());
  loomConfig_t cfg = LOOM_CONFIG_INITIALIZER;
  cfg.name = "split child";
  loomComm_t child = nullptr;
  ASSERT_TRUE(h.call(loomCommSplit(h.comm(), 0, gRank, &child, &cfg), "split"));
  const loomDataType_t t = loomFloat32;
  const size_t n = 4096;
  DeviceBuffer buf(n * sizeof(float));
  ASSERT_TRUE(buf.p != nullptr);
  const size_t first = h.nextFirst();
  h.upload(buf.p, values(t, gRank, n, first));
  const bool called = h.call(loomAllReduce(buf.p, buf.p, n, t, loomSum, child, h.loomStream()),
                             "allreduce on the split child");
  if (called && h.settle("split child")) {
    h.expectData(reduceReference(t, loomSum, -1, n, first, gRanks), buf.p, t, "split child");
  }
  loomCommDestroy(child);
}

// Buffers of a series of allreduces: an input holding this rank's values and a poisoned output
// per call; every `largeEvery`th call has largeCount(t) elements, the others 4097.
struct AllReduceSeries {
  loomDataType_t t = loomFloat32;
  std::vector<std::unique_ptr<DeviceBuffer>> in, out;
  std::vector<size_t> counts, firsts;

  AllReduceSeries(Harness& h, int calls, int largeEvery) {
    for (int i = 0; i < calls; ++i) {
      const size_t n = i % largeEvery == largeEvery - 1 ? largeCount(t) : 4096 + 1;
      counts.push_back(n);
      firsts.push_back(h.nextFirst());
      in.push_back(std::make_unique<DeviceBuffer>(n * sizeof(float)));
      out.push_back(std::make_unique<DeviceBuffer>(n * sizeof(float)));
      if (in.back()->p == nullptr || out.back()->p == nullptr) {
        h.fail("no device memory for call " + std::to_string(i));
        in.clear();  // calls() == 0: the test stops
        out.clear();
        return;
      }
      const std::vector<char> mine = values(t, gRank, n, firsts.back());
      EXPECT_CUDA(cudaMemcpy(in.back()->p, mine.data(), mine.size(), cudaMemcpyHostToDevice));
      EXPECT_CUDA(cudaMemset(out.back()->p, kPoison, n * sizeof(float)));
    }
  }
  int calls() const { return static_cast<int>(out.size()); }
  loomResult_t call(Harness& h, int i, cudaStream_t s) {
    return loomAllReduce(in[i]->p, out[i]->p, counts[i], t, loomSum, h.comm(),
                         static_cast<loomStream_t>(s));
  }
  void expectResults(Harness& h, const std::string& what) {
    for (int i = 0; i < calls(); ++i)
      h.expectData(reduceReference(t, loomSum, -1, counts[i], firsts[i], gRanks), out[i]->p, t,
                   "allreduce " + std::to_string(i) + " " + what);
  }
};

// One communicator used from two streams in turn, with no host synchronization in between: the
// calls still run in issue order on every rank (neither deadlock nor mix up their data).
TEST_P(Streams, OneCommunicatorOnAlternatingStreams) {
  if (cpuReferenceMode()) GTEST_SKIP() << "CUDA only";
  Harness h(GetParam(), 4096);
  ASSERT_TRUE(h.ok());
  cudaStream_t streams[2] = {nullptr, nullptr};
  for (cudaStream_t& s : streams) ASSERT_CUDA(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  AllReduceSeries series(h, 10, 3);
  ASSERT_EQ(series.calls(), 10);
  for (int i = 0; i < series.calls(); ++i) {
    cudaStream_t s = streams[i % 2];
    ASSERT_CUDA(cudaLaunchHostFunc(s, holdStream, &gHoldMs));  // the other stream may run ahead
    ASSERT_TRUE(h.call(series.call(h, i, s),
                       "allreduce " + std::to_string(i) + " on stream " + std::to_string(i % 2)));
  }
  for (cudaStream_t s : streams) ASSERT_TRUE(h.settle("calls on alternating streams", s));
  for (cudaStream_t s : streams) cudaStreamDestroy(s);
  series.expectResults(h, "of calls on alternating streams");
}

// Every call on a stream of its own, destroyed right after the call while the call still waits
// behind a held stream: the next call, on a new stream (often with the destroyed one's handle),
// still runs after it. The communicator must not touch a destroyed stream (it did: "invalid
// device context" on the next call).
TEST_P(Streams, StreamsDestroyedBetweenCalls) {
  if (cpuReferenceMode()) GTEST_SKIP() << "CUDA only";
  Harness h(GetParam(), 4096);
  ASSERT_TRUE(h.ok());
  AllReduceSeries series(h, 6, 2);
  ASSERT_EQ(series.calls(), 6);
  for (int i = 0; i < series.calls(); ++i) {
    cudaStream_t s = nullptr;
    ASSERT_CUDA(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    if (i % 2 == 0) {
      ASSERT_CUDA(cudaLaunchHostFunc(s, holdStream, &gHoldMs));
    }
    ASSERT_TRUE(
        h.call(series.call(h, i, s), "allreduce " + std::to_string(i) + " on a stream of its own"));
    ASSERT_CUDA(cudaStreamDestroy(s));  // its work still runs to the end
  }
  // The streams are gone: wait for the device (a kernel gives up at the communicator's timeout),
  // then for the communicator's verdict.
  ASSERT_CUDA(cudaDeviceSynchronize());
  ASSERT_TRUE(h.settle("calls on streams destroyed between them"));
  series.expectResults(h, "on a destroyed stream");
}

INSTANTIATE_TEST_SUITE_P(Configs, Streams, ::testing::ValuesIn(sweepConfigs()),
                         [](const auto& info) { return configTestName(info.param); });

// ---------------------------------------------------------------------------------------------
// CUDA graphs

class Graphs : public ::testing::TestWithParam<GpuConfig> {};
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(Graphs);

const char* modeName(cudaStreamCaptureMode mode) {
  return mode == cudaStreamCaptureModeGlobal ? "global capture" : "thread-local capture";
}

// A graph of {copy a fresh input in, allreduce, allgather}, replayed 100 times with new input
// each time; then an eager allreduce on the same communicator.
TEST_P(Graphs, CapturedCollectivesReplayWithNewInputs) {
  if (cpuReferenceMode()) GTEST_SKIP() << "CUDA only";
  Harness h(GetParam());
  ASSERT_TRUE(h.ok());
  const loomDataType_t t = loomFloat32;
  cudaStream_t s = h.stream();
  for (cudaStreamCaptureMode mode :
       {cudaStreamCaptureModeGlobal, cudaStreamCaptureModeThreadLocal}) {
    for (size_t n : {size_t{4096 + 1}, largeCount(t)}) {
      const size_t bytes = n * sizeof(float);
      const std::string what = std::string(modeName(mode)) + " count " + std::to_string(n);
      ASSERT_TRUE(h.ok());
      DeviceBuffer src(bytes), in(bytes), out(bytes), gathered(bytes * gRanks);
      PinnedBuffer hostSrc(bytes), hostOut(bytes), hostGathered(bytes * gRanks);
      ASSERT_TRUE(src.p && in.p && out.p && gathered.p && hostSrc.p && hostOut.p && hostGathered.p);
      cudaGraph_t graph = nullptr;
      ASSERT_CUDA(cudaStreamBeginCapture(s, mode));
      cudaError_t copied = cudaMemcpyAsync(in.p, src.p, bytes, cudaMemcpyDeviceToDevice, s);
      loomResult_t reduced = loomAllReduce(in.p, out.p, n, t, loomSum, h.comm(), h.loomStream());
      loomResult_t gatheredResult = loomAllGather(in.p, gathered.p, n, t, h.comm(), h.loomStream());
      cudaError_t ended = cudaStreamEndCapture(s, &graph);  // always: leave capture mode
      ASSERT_CUDA(copied);
      ASSERT_TRUE(h.call(reduced, "allreduce captured, " + what));
      ASSERT_TRUE(h.call(gatheredResult, "allgather captured, " + what));
      ASSERT_EQ(ended, cudaSuccess)
          << "cudaStreamEndCapture, " << what << ": " << cudaErrorText(ended);
      cudaGraphExec_t exec = nullptr;
      ASSERT_CUDA(cudaGraphInstantiate(&exec, graph, 0));
      int wrong = 0;
      for (int replay = 0; replay < 100 && h.ok(); ++replay) {
        const size_t first = h.nextFirst();
        const std::vector<char> mine = values(t, gRank, n, first);
        std::memcpy(hostSrc.p, mine.data(), bytes);
        EXPECT_CUDA(cudaMemcpyAsync(src.p, hostSrc.p, bytes, cudaMemcpyHostToDevice, s));
        EXPECT_CUDA(cudaMemsetAsync(out.p, kPoison, bytes, s));
        EXPECT_CUDA(cudaMemsetAsync(gathered.p, kPoison, bytes * gRanks, s));
        EXPECT_CUDA(cudaGraphLaunch(exec, s));
        EXPECT_CUDA(cudaMemcpyAsync(hostOut.p, out.p, bytes, cudaMemcpyDeviceToHost, s));
        EXPECT_CUDA(
            cudaMemcpyAsync(hostGathered.p, gathered.p, bytes * gRanks, cudaMemcpyDeviceToHost, s));
        if (!h.settle("replay " + std::to_string(replay) + ", " + what)) break;
        const std::vector<char> sum = reduceReference(t, loomSum, -1, n, first, gRanks);
        const std::vector<char> all = allBlocks(t, n, first);
        if (std::memcmp(sum.data(), hostOut.p, bytes) != 0 ||
            std::memcmp(all.data(), hostGathered.p, bytes * gRanks) != 0) {
          if (wrong++ == 0) {  // keep replaying: every rank makes the same calls
            const std::string at = "replay " + std::to_string(replay) + ", " + what;
            expectHost(h, sum, hostOut.p, t, "allreduce " + at);
            expectHost(h, all, hostGathered.p, t, "allgather " + at);
          }
        }
      }
      EXPECT_EQ(wrong, 0) << what << ": replays with a wrong result";
      cudaGraphExecDestroy(exec);
      cudaGraphDestroy(graph);
      checkAllReduce(h, t, loomSum, n, {});  // eager calls still work after the replays
      checkAllGather(h, t, n, {});
    }
  }
}

// An in-place allreduce graph launched 100 times back to back, with no host synchronization:
// each replay must see the previous one's result. int32 sums wrap, so the result is exact:
// after k replays, S * nranks^(k-1).
TEST_P(Graphs, BackToBackReplaysAreOrdered) {
  if (cpuReferenceMode()) GTEST_SKIP() << "CUDA only";
  Harness h(GetParam());
  ASSERT_TRUE(h.ok());
  const loomDataType_t t = loomInt32;
  const size_t n = 4096 + 1, first = h.nextFirst();
  const int kReplays = 100;
  cudaStream_t s = h.stream();
  h.upload(h.a(), values(t, gRank, n, first));
  ASSERT_TRUE(h.settle("upload"));
  cudaGraph_t graph = nullptr;
  ASSERT_CUDA(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
  loomResult_t r = loomAllReduce(h.a(), h.a(), n, t, loomSum, h.comm(), h.loomStream());
  cudaError_t ended = cudaStreamEndCapture(s, &graph);
  ASSERT_TRUE(h.call(r, "allreduce captured"));
  ASSERT_CUDA(ended);
  cudaGraphExec_t exec = nullptr;
  ASSERT_CUDA(cudaGraphInstantiate(&exec, graph, 0));
  for (int replay = 0; replay < kReplays; ++replay) EXPECT_CUDA(cudaGraphLaunch(exec, s));
  if (h.settle("100 replays back to back")) {
    std::vector<char> want = reduceReference(t, loomSum, -1, n, first, gRanks);
    for (size_t i = 0; i < n; ++i) {
      uint32_t v;
      std::memcpy(&v, want.data() + i * 4, 4);
      for (int k = 1; k < kReplays; ++k) v *= static_cast<uint32_t>(gRanks);
      std::memcpy(want.data() + i * 4, &v, 4);
    }
    h.expectData(want, h.a(), t, "after 100 replays back to back");
  }
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
}

INSTANTIATE_TEST_SUITE_P(Configs, Graphs, ::testing::ValuesIn(sweepConfigs()),
                         [](const auto& info) { return configTestName(info.param); });

}  // namespace
}  // namespace loom::gputest
