// A rank of a GPU job SIGKILLs itself; every survivor must see an error within a bounded time
// (loomCommGetAsyncError, a failing call or a failing stream), never hang, and then abort its
// communicator.
//
//   gpu_fault_test                         the driver: runs every scenario as a job of 4 ranks (2
//                                          on a host with 2 or 3 GPUs) and checks how each rank
//                                          ends. Exit 0: all passed, 1: a failure, 77: fewer than
//                                          2 GPUs (skipped).
//   gpu_fault_test rank SCENARIO COUNT     one rank, started by the driver.
//
// The driver starts the ranks itself (itself again, with fork and exec): loomrun would stop the
// survivors as soon as the victim died, and the survivors are what is tested. Scenarios (rank 1 is
// the victim; every rank first runs a few checked allreduces of COUNT floats):
//   before   the victim dies without entering the allreduce that the others enter.
//   after    the victim dies right after enqueueing an allreduce (its GPU may still do its part of
//            that one); the others enqueue two, of which the second cannot complete.
// A "-window" suffix registers the buffers as windows first (the zero-copy kernels, or with
// "-window-allgather" and LOOM_ALGO=allgather:ce the copy engines, whose waits are the stream's).
// Plan scenarios force an example plan (LOOM_PLAN_DIR from LOOM_TEST_PLAN_DIR, which ctest sets):
// the plan-interpreting kernel's waits, in LL packets and in bulk chunks.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iterator>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "gpu_env.hpp"
#include "loom/loom.h"

extern char** environ;

namespace loom::gputest {
namespace {

using Clock = std::chrono::steady_clock;

constexpr int kVictim = 1;
constexpr int kTimeoutMs = 10000;        // config.timeoutMs of every rank
constexpr double kDetectSeconds = 30.0;  // a survivor that saw no error by then reports a hang
constexpr double kJobSeconds = 90.0;     // the driver kills whatever still runs by then

// Exit codes of a rank.
constexpr int kRankPassed = 0;
constexpr int kRankHung = 1;         // no error within kDetectSeconds
constexpr int kRankSetupFailed = 2;  // init or the checked allreduces before the fault failed
constexpr int kRankCompleted = 3;    // an allreduce without the victim completed without error

double secondsSince(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

int gRankId = -1;

void say(const std::string& text) {
  std::printf("[gpu_fault_test rank %d] %s\n", gRankId, text.c_str());
  std::fflush(stdout);
}

// ---------------------------------------------------------------------------------------------
// One rank

// A rank's buffers of count floats: device memory and a stream, or, in CPU reference mode, host
// memory and no stream (CPU collectives are blocking).
struct RankBuffers {
  const bool cpu = cpuReferenceMode();
  bool gather = false;  // allgather of count / nranks floats per rank instead of allreduce
  int nranks = 1;
  size_t count = 0;
  cudaStream_t stream = nullptr;
  float* send = nullptr;
  float* recv = nullptr;
  std::vector<float> hostSend, hostRecv;

  bool allocate(size_t n) {
    count = n;
    hostSend.assign(n, 1.0f);
    hostRecv.assign(n, 0.0f);
    if (cpu) {
      send = hostSend.data();
      recv = hostRecv.data();
      return true;
    }
    return cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking) == cudaSuccess &&
           cudaMalloc(&send, n * sizeof(float)) == cudaSuccess &&
           cudaMalloc(&recv, n * sizeof(float)) == cudaSuccess &&
           cudaMemcpy(send, hostSend.data(), n * sizeof(float), cudaMemcpyHostToDevice) ==
               cudaSuccess;
  }
  loomResult_t allReduce(loomComm_t comm) {
    if (gather) return loomAllGather(send, recv, count / nranks, loomFloat32, comm, stream);
    return loomAllReduce(send, recv, count, loomFloat32, loomSum, comm, stream);
  }
  // Both buffers as windows (collective).
  bool registerWindows(loomComm_t comm) {
    loomWindow_t w = nullptr;
    return loomCommWindowRegister(comm, send, count * sizeof(float), &w, LOOM_WIN_COLL_SYMMETRIC) ==
               loomSuccess &&
           loomCommWindowRegister(comm, recv, count * sizeof(float), &w, LOOM_WIN_COLL_SYMMETRIC) ==
               loomSuccess;
  }
  cudaError_t query() const { return cpu ? cudaSuccess : cudaStreamQuery(stream); }
  // Waits for the stream; the result on the host.
  bool result(std::vector<float>& out) {
    if (cpu) {
      out = hostRecv;
      return true;
    }
    out.resize(count);
    return cudaStreamSynchronize(stream) == cudaSuccess &&
           cudaMemcpy(out.data(), recv, count * sizeof(float), cudaMemcpyDeviceToHost) ==
               cudaSuccess;
  }
};

// An allreduce of ones: every element must be nranks (an allgather of ones: 1).
bool checkedAllReduce(loomComm_t comm, RankBuffers& buffers, int nranks) {
  if (buffers.allReduce(comm) != loomSuccess) {
    say(std::string("warm-up allreduce failed: ") + loomGetLastError(nullptr));
    return false;
  }
  std::vector<float> got;
  if (!buffers.result(got)) {
    say("warm-up allreduce: the stream failed");
    return false;
  }
  const float want = buffers.gather ? 1.0f : static_cast<float>(nranks);
  for (size_t i = 0; i < got.size(); ++i) {
    if (got[i] != want) {
      say("warm-up allreduce: wrong element " + std::to_string(i));
      return false;
    }
  }
  return true;
}

int runRank(const std::string& scenario, size_t count) {
  gRankId = envInt({"LOOM_RANK"}, -1);
  const bool after = scenario.rfind("after", 0) == 0;
  const bool cpu = cpuReferenceMode();
  int device = -1;
  if (cudaError_t e = cpu ? cudaSuccess : selectRankDevice(&device); e != cudaSuccess) {
    say("cudaSetDevice: " + cudaErrorText(e));
    return kRankSetupFailed;
  }
  loomConfig_t config = LOOM_CONFIG_INITIALIZER;
  config.device = cpu ? "cpu" : "cuda";
  config.timeoutMs = kTimeoutMs;
  loomComm_t comm = nullptr;
  int nranks = 0;
  if (loomCommInitFromEnv(&comm, &config) != loomSuccess) {
    say(std::string("init failed: ") + loomGetLastError(nullptr));
    return kRankSetupFailed;
  }
  loomCommCount(comm, &nranks);
  RankBuffers buffers;
  buffers.gather = scenario.find("-allgather") != std::string::npos;
  buffers.nranks = nranks;
  if (!buffers.allocate(count)) {
    say("no device memory or stream");
    return kRankSetupFailed;
  }
  if (scenario.find("-window") != std::string::npos && !buffers.registerWindows(comm)) {
    say(std::string("loomCommWindowRegister failed: ") + loomGetLastError(nullptr));
    return kRankSetupFailed;
  }
  for (int i = 0; i < 3; ++i)
    if (!checkedAllReduce(comm, buffers, nranks)) return kRankSetupFailed;
  say("ready");

  if (gRankId == kVictim) {
    // Late enough that every survivor finished the checked calls and waits in the next one.
    std::this_thread::sleep_for(std::chrono::seconds(1));
    if (after) buffers.allReduce(comm);
    raise(SIGKILL);
  }

  const Clock::time_point start = Clock::now();
  std::string how;
  const int calls = after ? 2 : 1;
  for (int i = 0; i < calls && how.empty(); ++i) {
    loomResult_t r = buffers.allReduce(comm);
    if (r != loomSuccess)
      how = std::string("allreduce returned ") + loomGetErrorString(r) + ": " +
            loomGetLastError(nullptr);
  }
  while (how.empty()) {
    loomResult_t async = loomSuccess;
    loomResult_t r = loomCommGetAsyncError(comm, &async);
    if (r != loomSuccess || (async != loomSuccess && async != loomInProgress)) {
      how = std::string("loomCommGetAsyncError: ") +
            loomGetErrorString(r != loomSuccess ? r : async) + ": " + loomGetLastError(comm);
      break;
    }
    cudaError_t q = buffers.query();
    if (q != cudaSuccess && q != cudaErrorNotReady) {
      how = "stream: " + cudaErrorText(q);
      break;
    }
    if (q == cudaSuccess) {
      // Done on the device: fine only if the communicator reports the failure now.
      r = loomCommGetAsyncError(comm, &async);
      if (r == loomSuccess && (async == loomSuccess || async == loomInProgress)) {
        say("the allreduce without the victim completed and no error was reported");
        std::_Exit(kRankCompleted);
      }
      continue;
    }
    if (secondsSince(start) > kDetectSeconds) {
      say("no error " + std::to_string(static_cast<int>(kDetectSeconds)) +
          " s after the victim died: hang");
      std::_Exit(kRankHung);  // leave at once: the device may hold a kernel that never ends
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  char line[128];
  std::snprintf(line, sizeof(line), "detected after %.0f ms (timeout %d ms) by ",
                secondsSince(start) * 1000, kTimeoutMs);
  say(line + how);
  const Clock::time_point abortStart = Clock::now();
  loomCommAbort(comm);
  std::snprintf(line, sizeof(line), "loomCommAbort took %.0f ms", secondsSince(abortStart) * 1000);
  say(line);
  // Whether the stream drains after the abort is reported, not required.
  const Clock::time_point drainStart = Clock::now();
  cudaError_t q = cudaErrorNotReady;
  while ((q = buffers.query()) == cudaErrorNotReady && secondsSince(drainStart) < 5)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  say("stream after abort: " +
      (q == cudaErrorNotReady ? std::string("still busy after 5 s") : cudaErrorText(q)));
  return kRankPassed;
}

// ---------------------------------------------------------------------------------------------
// The driver

struct Scenario {
  const char* name;       // before | after, optionally -window[-allgather]
  size_t count;           // floats per allreduce
  const char* algo;       // LOOM_ALGO
  const char* transport;  // LOOM_CUDA_TRANSPORT
  bool plan = false;      // algo names an example plan, completed by the rank count
};

uint16_t freePort() {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(addr);
  uint16_t port = 0;
  if (fd >= 0 && bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0 &&
      getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0)
    port = ntohs(addr.sin_port);
  if (fd >= 0) close(fd);
  return port;
}

std::string randomHex(size_t chars) {
  std::random_device device;
  std::string out;
  for (size_t i = 0; i < chars; ++i) out += "0123456789abcdef"[device() % 16];
  return out;
}

bool isJobVariable(const std::string& name) {
  for (const char* owned :
       {"LOOM_RANK", "LOOM_WORLD_SIZE", "LOOM_COMM_ID", "LOOM_JOB_SECRET", "LOOM_ALGO",
        "LOOM_CUDA_TRANSPORT", "LOOM_PLAN_DIR", "RANK", "WORLD_SIZE", "LOCAL_RANK",
        "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"})
    if (name == owned) return true;
  return false;
}

// Runs one job; true if the victim died by SIGKILL and every survivor passed.
bool runJob(const std::string& self, const Scenario& s, int nranks) {
  // A plan runs on CPU communicators too: the CPU reference mode keeps it.
  const std::string algo = s.plan ? s.algo + std::to_string(nranks) : s.algo;
  const char* plans = std::getenv("LOOM_TEST_PLAN_DIR");
  if (s.plan && plans == nullptr) {
    // Not a skip: run by hand without it, the plan kernel would look tested when it was not.
    std::printf("=== scenario %s, LOOM_ALGO=%s: FAILED: LOOM_TEST_PLAN_DIR is not set (ctest sets "
                "it to the example plans: BUILD/tests/plan_examples)\n",
                s.name, algo.c_str());
    return false;
  }
  std::printf("=== scenario %s, %zu floats, LOOM_ALGO=%s LOOM_CUDA_TRANSPORT=%s, %d ranks%s\n",
              s.name, s.count, algo.c_str(), s.transport, nranks,
              !cpuReferenceMode() ? ""
              : s.plan            ? " (CPU reference mode: on CPU, the plan kept)"
                                  : " (CPU reference mode: on CPU, without those)");
  std::fflush(stdout);
  const std::string commId = "127.0.0.1:" + std::to_string(freePort());
  const std::string secret = randomHex(32);
  std::vector<pid_t> pids(nranks, -1);
  for (int rank = 0; rank < nranks; ++rank) {
    // Everything the child needs is built before fork: after it only exec may run.
    std::vector<std::string> envText;
    for (char** e = environ; *e != nullptr; ++e) {
      std::string entry = *e;
      if (!isJobVariable(entry.substr(0, entry.find('=')))) envText.push_back(entry);
    }
    envText.push_back("LOOM_RANK=" + std::to_string(rank));
    envText.push_back("LOCAL_RANK=" + std::to_string(rank));
    envText.push_back("LOOM_WORLD_SIZE=" + std::to_string(nranks));
    envText.push_back("LOCAL_WORLD_SIZE=" + std::to_string(nranks));
    envText.push_back("LOOM_COMM_ID=" + commId);
    envText.push_back("LOOM_JOB_SECRET=" + secret);
    if (!algo.empty() && (s.plan || !cpuReferenceMode())) envText.push_back("LOOM_ALGO=" + algo);
    if (s.plan) envText.push_back(std::string("LOOM_PLAN_DIR=") + plans + "/fused");
    if (s.transport[0] != '\0' && !cpuReferenceMode())
      envText.push_back(std::string("LOOM_CUDA_TRANSPORT=") + s.transport);
    std::vector<std::string> argText = {self, "rank", s.name, std::to_string(s.count)};
    std::vector<char*> argv, envp;
    for (auto& a : argText) argv.push_back(a.data());
    argv.push_back(nullptr);
    for (auto& e : envText) envp.push_back(e.data());
    envp.push_back(nullptr);
    pids[rank] = fork();
    if (pids[rank] == 0) {
      execve(argv[0], argv.data(), envp.data());
      _exit(127);
    }
    if (pids[rank] < 0) std::perror("fork");
  }
  std::vector<int> status(nranks, 0);
  std::vector<bool> exited(nranks, false);
  const Clock::time_point start = Clock::now();
  for (int left = nranks; left > 0 && secondsSince(start) < kJobSeconds;) {
    for (int rank = 0; rank < nranks; ++rank) {
      if (exited[rank]) continue;
      if (pids[rank] < 0 || waitpid(pids[rank], &status[rank], WNOHANG) == pids[rank]) {
        exited[rank] = true;
        --left;
      }
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  bool passed = true;
  for (int rank = 0; rank < nranks; ++rank) {
    std::string verdict;
    if (!exited[rank]) {
      kill(pids[rank], SIGKILL);
      waitpid(pids[rank], &status[rank], 0);
      verdict = "FAIL: still running after " + std::to_string(static_cast<int>(kJobSeconds)) +
                " s (killed)";
    } else if (pids[rank] < 0) {
      verdict = "FAIL: not started";
    } else if (rank == kVictim) {
      const bool killed = WIFSIGNALED(status[rank]) && WTERMSIG(status[rank]) == SIGKILL;
      const std::string how = WIFEXITED(status[rank])
                                  ? "exit code " + std::to_string(WEXITSTATUS(status[rank]))
                                  : "signal " + std::to_string(WTERMSIG(status[rank]));
      verdict = killed
                    ? "ok (victim, killed itself)"
                    : "FAIL: the victim ended with " + how + " before its fault (see its output)";
    } else if (WIFEXITED(status[rank]) && WEXITSTATUS(status[rank]) == kRankPassed) {
      verdict = "ok (saw the error, aborted, exited)";
    } else if (WIFEXITED(status[rank])) {
      const int code = WEXITSTATUS(status[rank]);
      verdict = code == kRankHung          ? "FAIL: no error reported (hang)"
                : code == kRankSetupFailed ? "FAIL: setup before the fault failed"
                : code == kRankCompleted   ? "FAIL: a collective without the victim completed"
                                           : "FAIL: exit code " + std::to_string(code);
    } else {
      verdict = "FAIL: killed by signal " + std::to_string(WTERMSIG(status[rank]));
    }
    passed &= verdict.rfind("ok", 0) == 0;
    std::printf("  rank %d: %s\n", rank, verdict.c_str());
  }
  std::printf("=== scenario %s, %zu floats: %s in %.1f s\n", s.name, s.count,
              passed ? "PASSED" : "FAILED", secondsSince(start));
  std::fflush(stdout);
  return passed;
}

int runDriver() {
  const int gpus = cpuReferenceMode() ? 4 : cudaDeviceCount();
  if (gpus < 2 && !(shareGpus() && gpus >= 1)) {
    std::printf(
        "SKIPPED: the GPU fault test needs 2 GPUs, found %d (LOOM_TEST_SHARE_GPU=1 lets "
        "ranks share them)\n",
        gpus);
    return kSkipExitCode;
  }
  // Sharing: GPU_FAULT_RANKS ranks (default 2) on the GPUs there are.
  const int nranks = shareGpus() && gpus < 4 ? envInt({"GPU_FAULT_RANKS"}, 2) : gpus >= 4 ? 4 : 2;
  char self[4096];
  const ssize_t len = readlink("/proc/self/exe", self, sizeof(self) - 1);
  if (len <= 0) {
    std::perror("readlink /proc/self/exe");
    return 1;
  }
  self[len] = '\0';
  const Scenario scenarios[] = {
      {"before", 1024, "allreduce:ll", ""},
      {"after", 1024, "allreduce:ll", ""},
      {"before", size_t{4} << 20, "allreduce:simple", ""},
      {"after", size_t{4} << 20, "allreduce:simple", ""},
      {"before", size_t{1} << 20, "", "host"},
      {"before-window", size_t{4} << 20, "", ""},
      {"before-window-allgather", size_t{4} << 20, "allgather:ce", ""},
      {"after-window-allgather", size_t{4} << 20, "allgather:ce", ""},
      {"before", 1024, "allreduce:plan:one_shot_allreduce_", "", true},
      {"after", size_t{4} << 20, "allreduce:plan:ring_allreduce_", "", true},
  };
  int failed = 0;
  for (const Scenario& s : scenarios) failed += runJob(self, s, nranks) ? 0 : 1;
  std::printf("%d of %zu fault scenarios failed\n", failed, std::size(scenarios));
  return failed == 0 ? 0 : 1;
}

}  // namespace
}  // namespace loom::gputest

int main(int argc, char** argv) {
  if (argc == 4 && std::string(argv[1]) == "rank")
    return loom::gputest::runRank(argv[2], std::strtoull(argv[3], nullptr, 10));
  if (argc != 1) {
    std::fprintf(stderr, "usage: %s [rank before|after COUNT]\n", argv[0]);
    return 2;
  }
  return loom::gputest::runDriver();
}
