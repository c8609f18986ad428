// Collectives on registered windows (loomCommWindowRegister) and on buffers every rank registered
// alone (loomCommRegister), in cudaMalloc'd and in cuMem memory: the harness's two buffers are
// registered on every rank, so the usual checks (reference results, guards around outputs, inputs
// unchanged, in place, misaligned offsets; with registrations, offsets that differ between ranks)
// run through the zero-copy kernels and, with "ce", the copy engines; also CUDA graph capture,
// deregistration, a peer that registers late, and calls the ranks do not agree on (an error on
// every rank, not wrong data). More on cuMem memory in gpu_cumem_test.cpp.
#include <cuda_runtime.h>
#include <unistd.h>

#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "gpu_checks.hpp"

namespace loom::gputest {
namespace {

enum class Kind { kWindows, kAlone };

// The harness's buffers registered (as windows, collectively, or each rank alone) for the life
// of the object.
class Registered {
 public:
  Registered(Harness& h, Kind kind) : h_(h) {
    const size_t bytes = h.capacity() + kGuardBytes + 64;
    for (char* base : {h.a(), h.b()}) {
      if (kind == Kind::kWindows) {
        loomWindow_t w = nullptr;
        if (!h.call(loomCommWindowRegister(h.comm(), base, bytes, &w, LOOM_WIN_COLL_SYMMETRIC),
                    "loomCommWindowRegister"))
          return;
        windows_.push_back(w);
      } else {
        loomRegistration_t r = nullptr;
        if (!h.call(loomCommRegister(h.comm(), base, bytes, &r), "loomCommRegister")) return;
        registrations_.push_back(r);
      }
    }
  }
  ~Registered() {
    cudaStreamSynchronize(h_.stream());
    for (loomWindow_t w : windows_)
      if (h_.ok()) h_.call(loomCommWindowDeregister(h_.comm(), w), "loomCommWindowDeregister");
    for (loomRegistration_t r : registrations_)
      if (h_.ok()) h_.call(loomCommDeregister(h_.comm(), r), "loomCommDeregister");
  }
  Registered(const Registered&) = delete;
  Registered& operator=(const Registered&) = delete;
  bool registered() const { return windows_.size() + registrations_.size() == 2; }
  // Every buffer is used directly.
  bool direct() {
    int all = 1;
    for (loomWindow_t w : windows_) {
      int d = 0;
      h_.call(loomCommWindowIsDirect(h_.comm(), w, &d), "loomCommWindowIsDirect");
      all &= d;
    }
    for (loomRegistration_t r : registrations_) {
      int d = 0;
      h_.call(loomCommRegistrationIsDirect(h_.comm(), r, &d), "loomCommRegistrationIsDirect");
      all &= d;
    }
    return all == 1;
  }

 private:
  Harness& h_;
  std::vector<loomWindow_t> windows_;
  std::vector<loomRegistration_t> registrations_;
};

// Every planned collective (and broadcast, which has no plan) at every sweep size and type.
void sweepRegistered(Harness& h, const std::vector<Layout>& layouts) {
  // sweepSizes reach past LOOM_CUDA_ONESHOT_MAX_BYTES: allreduce runs one-shot below it and
  // two-shot above it and in place.
  for (loomDataType_t t : {loomFloat32, loomBfloat16, loomInt32, loomFloat64}) {
    for (size_t count : sweepSizes(t)) {
      for (Layout layout : layouts) {
        if (!h.ok()) return;
        checkAllReduce(h, t, loomSum, count, layout);
        checkAllReduce(h, t, loomAvg, count, layout);
        checkReduceScatter(h, t, t == loomInt32 ? loomMax : loomSum, count, layout);
        checkAllGather(h, t, count, layout);
        if (!layout.inPlace) checkAllToAll(h, t, count, layout);
        // Collectives without a window plan still run on registered buffers.
        checkBroadcast(h, t, count, layout);
      }
    }
  }
}

// Windows take calls of every size whatever the protocol; "simple" and "ce" where it matters.
// The cumem configs put the buffers in cuMemCreate memory of several physical allocations, which
// peers map from file descriptors (device/cuda/memory_exports.hpp).
std::vector<GpuConfig> windowConfigs() {
  constexpr const char* kCe = "allreduce:simple,reducescatter:simple,allgather:ce,alltoall:ce";
  return {
      {"windows", "simple", "", ""},       {"windows-ce", kCe, "", ""},
      {"windows-auto", "", "", ""},        {"cumem-auto", "", "", "", -1, true},
      {"cumem-ce", kCe, "", "", -1, true},
  };
}

class WindowSweep : public ::testing::TestWithParam<GpuConfig> {};
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(WindowSweep);

TEST_P(WindowSweep, CollectivesOnWindowsMatchTheReference) {
  if (cpuReferenceMode()) GTEST_SKIP() << "CUDA only";
  Harness h(GetParam());
  ASSERT_TRUE(h.ok());
  Registered w(h, Kind::kWindows);
  ASSERT_TRUE(w.registered());
  // Ranks on GPUs that map each other's memory (one GPU shared, or peers over NVLink/PCIe).
  EXPECT_TRUE(w.direct()) << "windows were registered but are not used directly";
  sweepRegistered(h, {Layout{false, 0}, Layout{true, 0}, Layout{false, 1}});
}

INSTANTIATE_TEST_SUITE_P(Configs, WindowSweep, ::testing::ValuesIn(windowConfigs()),
                         [](const auto& info) { return configTestName(info.param); });

// Buffers registered alone take the same calls at offsets that differ between ranks (a rank's
// buffer starts gRank elements, or 1 + 2 * gRank, into its allocation). "ce" falls back to the
// zero-copy kernel: the host does not know a peer's registered buffer.
class RegistrationSweep : public ::testing::TestWithParam<GpuConfig> {};
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(RegistrationSweep);

TEST_P(RegistrationSweep, CollectivesOnRegisteredBuffersMatchTheReference) {
  if (cpuReferenceMode()) GTEST_SKIP() << "CUDA only";
  Harness h(GetParam());
  ASSERT_TRUE(h.ok());
  Registered r(h, Kind::kAlone);
  ASSERT_TRUE(r.registered());
  EXPECT_TRUE(r.direct()) << "buffers were registered but are not used directly";
  const size_t mine = static_cast<size_t>(gRank);
  sweepRegistered(h, {Layout{false, mine}, Layout{true, mine}, Layout{false, 1 + 2 * mine}});
}

INSTANTIATE_TEST_SUITE_P(Configs, RegistrationSweep, ::testing::ValuesIn(windowConfigs()),
                         [](const auto& info) { return configTestName(info.param); });

// Captured into a graph, replayed with fresh inputs; then eager calls again. `lead`: bytes of the
// buffers before the calls' data (different on every rank for buffers registered alone).
void replayCapturedCalls(Harness& h, size_t lead) {
  const loomDataType_t t = loomFloat32;
  const size_t n = 4096 + 3, bytes = n * sizeof(float);
  cudaStream_t s = h.stream();
  char* in = h.a() + lead;
  char* sum = h.b() + lead;
  char* gathered = h.b() + lead + bytes + 256;
  ASSERT_LE(lead + 256 + bytes + bytes * gRanks, h.capacity());
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

// The copy engines' host-side sequence numbers cannot replay, so "ce" runs the zero-copy kernel
// in a graph.
TEST(WindowGraphs, CapturedCallsOnWindowsReplay) {
  if (cpuReferenceMode()) GTEST_SKIP() << "CUDA only";
  Harness h(windowConfigs()[1]);
  ASSERT_TRUE(h.ok());
  Registered w(h, Kind::kWindows);
  ASSERT_TRUE(w.registered());
  replayCapturedCalls(h, 0);
}

TEST(RegistrationGraphs, CapturedCallsOnRegisteredBuffersReplay) {
  if (cpuReferenceMode()) GTEST_SKIP() << "CUDA only";
  Harness h(windowConfigs()[0]);
  ASSERT_TRUE(h.ok());
  Registered r(h, Kind::kAlone);
  ASSERT_TRUE(r.registered());
  replayCapturedCalls(h, 64 * static_cast<size_t>(gRank));
}

// Deregistered buffers are ordinary buffers again; registering anew works (a registration
// alone takes its slot back with a new generation, which peers map afresh).
TEST(RegistrationLifetime, DeregisteredBuffersKeepWorking) {
  if (cpuReferenceMode()) GTEST_SKIP() << "CUDA only";
  Harness h(windowConfigs()[0]);
  ASSERT_TRUE(h.ok());
  for (int round = 0; round < 4 && h.ok(); ++round) {
    {
      Registered r(h, round % 2 == 0 ? Kind::kWindows : Kind::kAlone);
      ASSERT_TRUE(r.registered());
      checkAllReduce(h, loomFloat32, loomSum, 70001, {});
      checkAllGather(h, loomFloat32, 70001, {});
    }
    checkAllReduce(h, loomFloat32, loomSum, 70001, {});
    checkAllGather(h, loomFloat32, 70001, {});
  }
}

// The last rank registers a quarter second after the others have enqueued their calls: their
// kernels wait until it arrives and until their watchdog has mapped its registration.
TEST(RegistrationLifetime, APeerThatRegistersLateIsWaitedFor) {
  if (cpuReferenceMode()) GTEST_SKIP() << "CUDA only";
  ScopedEnv shortTimeout;  // a stall fails within a minute, not at the default 600 s
  shortTimeout.set("LOOM_TIMEOUT", "60");
  Harness h(windowConfigs()[0]);
  ASSERT_TRUE(h.ok());
  if (gRank == gRanks - 1) usleep(250 * 1000);
  Registered r(h, Kind::kAlone);
  ASSERT_TRUE(r.registered());
  checkAllGather(h, loomFloat32, 70001, {});
  checkReduceScatter(h, loomFloat32, loomSum, 70001, {});
}

// The last rank renews its registrations (deregisters, registers again: the same slots, new
// generations) a quarter second after the others did and called: their kernels wait while their
// watchdogs see the old registrations withdrawn and the new ones published. Unmapping the old
// ones there would wait for those very kernels (cudaIpcCloseMemHandle does), so the watchdog only
// drops them from the table (first seen with torch's allocator segments on an H100: the kernel
// waited until the timeout).
TEST(RegistrationLifetime, APeerThatRenewsItsRegistrationsWhileOthersWaitIsMapped) {
  if (cpuReferenceMode()) GTEST_SKIP() << "CUDA only";
  ScopedEnv shortTimeout;  // a stall fails within a minute, not at the default 600 s
  shortTimeout.set("LOOM_TIMEOUT", "60");
  Harness h(windowConfigs()[0]);
  ASSERT_TRUE(h.ok());
  {
    Registered first(h, Kind::kAlone);
    ASSERT_TRUE(first.registered());
    checkAllGather(h, loomFloat32, 70001, {});  // every rank maps every peer's registrations
    if (gRank == gRanks - 1) usleep(250 * 1000);
  }
  Registered renewed(h, Kind::kAlone);
  ASSERT_TRUE(renewed.registered());
  checkAllGather(h, loomFloat32, 70001, {});
  checkReduceScatter(h, loomFloat32, loomSum, 70001, {});
}

// A communicator of its own for a call the ranks disagree on, with a short timeout.
// cudaMalloc'd bytes, freed at the end of the scope: declared before the communicator that
// registers them, they are freed after it is gone (a registered buffer must not be freed first).
struct DeviceBytes {
  char* ptr = nullptr;
  explicit DeviceBytes(size_t bytes) { EXPECT_CUDA(cudaMalloc(&ptr, bytes)); }
  ~DeviceBytes() { cudaFree(ptr); }
  DeviceBytes(const DeviceBytes&) = delete;
  DeviceBytes& operator=(const DeviceBytes&) = delete;
};

struct MisuseComm {
  loomComm_t comm = nullptr;
  cudaStream_t stream = nullptr;
  MisuseComm() {
    loomConfig_t cfg = LOOM_CONFIG_INITIALIZER;
    cfg.device = "cuda";
    cfg.timeoutMs = 5000;
    EXPECT_LOOM(loomCommSplit(gWorld, 0, gRank, &comm, &cfg));
    EXPECT_CUDA(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  }
  ~MisuseComm() {
    if (comm != nullptr) loomCommAbort(comm);
    if (stream != nullptr) cudaStreamDestroy(stream);
  }
  // The call's error as this rank sees it, once its stream is done (never loomSuccess here).
  loomResult_t outcome(loomResult_t enqueued) {
    if (enqueued != loomSuccess) return enqueued;
    EXPECT_CUDA(cudaStreamSynchronize(stream));
    loomResult_t async = loomSuccess;
    for (int i = 0; i < 20000 && async == loomSuccess; ++i) {
      EXPECT_LOOM(loomCommGetAsyncError(comm, &async));
      if (async == loomSuccess) usleep(1000);
    }
    return async;
  }
};

// Rank 0 passes an output it registered, the others one they did not: rank 0 plans a two-shot
// allreduce, the others one-shot. Every rank fails with loomInvalidUsage.
TEST(RegistrationMisuse, RanksThatPlanDifferentlyFailEveryRank) {
  if (cpuReferenceMode()) GTEST_SKIP() << "CUDA only";
  const size_t count = 1 << 20, bytes = count * sizeof(float);  // above the one-shot limit
  DeviceBytes in(bytes), out(bytes);
  MisuseComm m;
  ASSERT_NE(m.comm, nullptr);
  loomRegistration_t regIn = nullptr, regOut = nullptr;
  ASSERT_LOOM(loomCommRegister(m.comm, in.ptr, bytes, &regIn));
  if (gRank == 0) {
    ASSERT_LOOM(loomCommRegister(m.comm, out.ptr, bytes, &regOut));
  }
  loomResult_t r =
      m.outcome(loomAllReduce(in.ptr, out.ptr, count, loomFloat32, loomSum, m.comm, m.stream));
  EXPECT_EQ(r, loomInvalidUsage) << loomGetLastError(m.comm);
}

// Rank 0 gathers into an output it registered, the others into outputs they did not register:
// the call's error on this rank and the communicator's last error message.
std::pair<loomResult_t, std::string> gatherWithOnlyRankZeroRegistered() {
  const size_t count = 1 << 16, bytes = count * sizeof(float);
  DeviceBytes in(bytes), out(bytes * gRanks);
  MisuseComm m;
  EXPECT_NE(m.comm, nullptr);
  if (m.comm == nullptr) return {loomInternalError, "no communicator"};
  loomRegistration_t regOut = nullptr;
  if (gRank == 0) {
    EXPECT_LOOM(loomCommRegister(m.comm, out.ptr, bytes * gRanks, &regOut));
  }
  loomResult_t r = m.outcome(loomAllGather(in.ptr, out.ptr, count, loomFloat32, m.comm, m.stream));
  return {r, loomGetLastError(m.comm)};
}

// Every rank's call fails (at the timeout), none waits for ever.
TEST(RegistrationMisuse, OneRankAloneRegisteredFailsEveryRank) {
  if (cpuReferenceMode()) GTEST_SKIP() << "CUDA only";
  const loomResult_t r = gatherWithOnlyRankZeroRegistered().first;
  EXPECT_TRUE(r == loomTimeout || r == loomRemoteError) << loomGetErrorString(r);
}

// Under LOOM_CHECK=2 the ranks compare what each would run before the call, so every rank fails
// at once with loomInvalidUsage and a message that names the registered buffer.
TEST(RegistrationMisuse, OneRankAloneRegisteredFailsEveryRankAtOnceUnderCheck2) {
  if (cpuReferenceMode()) GTEST_SKIP() << "CUDA only";
  ScopedEnv check;
  check.set("LOOM_CHECK", "2");
  const auto [r, message] = gatherWithOnlyRankZeroRegistered();
  EXPECT_EQ(r, loomInvalidUsage) << loomGetErrorString(r);
  EXPECT_NE(message.find("output registered alone"), std::string::npos) << message;
}

// With "ce" an eager call on windows runs on the copy engines and a captured one as a kernel, so
// a rank capturing a call its peers make eagerly would wait for ever. Under LOOM_CHECK=2 the
// ranks' descriptions differ ("on the copy engines"): every rank fails at once.
TEST(WindowMisuse, ACapturedCallBesideEagerOnesFailsEveryRankAtOnceUnderCheck2) {
  if (cpuReferenceMode()) GTEST_SKIP() << "CUDA only";
  ScopedEnv env;
  env.set("LOOM_CHECK", "2");
  env.set("LOOM_ALGO", "allgather:ce");
  MisuseComm m;
  ASSERT_NE(m.comm, nullptr);
  const size_t count = 1024, bytes = count * sizeof(float), total = bytes * (gRanks + 1);
  char* buf = nullptr;
  ASSERT_LOOM(loomMemAlloc(m.comm, reinterpret_cast<void**>(&buf), total));
  loomWindow_t win = nullptr;
  ASSERT_LOOM(loomCommWindowRegister(m.comm, buf, total, &win, LOOM_WIN_COLL_SYMMETRIC));
  int direct = 0;
  ASSERT_LOOM(loomCommWindowIsDirect(m.comm, win, &direct));
  ASSERT_EQ(direct, 1) << "ranks on GPUs that map each other's memory use windows directly";
  char* out = buf;
  char* in = buf + bytes * gRanks;
  loomResult_t r = loomSuccess;
  if (gRank == 0) {
    cudaGraph_t graph = nullptr;
    ASSERT_CUDA(cudaStreamBeginCapture(m.stream, cudaStreamCaptureModeThreadLocal));
    r = loomAllGather(in, out, count, loomFloat32, m.comm, m.stream);
    cudaStreamEndCapture(m.stream, &graph);
    if (graph != nullptr) cudaGraphDestroy(graph);
    cudaGetLastError();
  } else {
    r = m.outcome(loomAllGather(in, out, count, loomFloat32, m.comm, m.stream));
  }
  EXPECT_EQ(r, loomInvalidUsage) << loomGetErrorString(r);
  const std::string message = loomGetLastError(m.comm);
  EXPECT_NE(message.find("on the copy engines"), std::string::npos) << message;
  loomCommAbort(m.comm);
  m.comm = nullptr;
  cudaFree(buf);
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
