// One rank of a chaos-soak job (tests/soak/soak.py starts every rank itself).
//
//   soak_rank SEED CALLS FAULT VICTIM AT
//
// Rank, size and rendezvous from LOOM_RANK, LOOM_WORLD_SIZE, LOOM_COMM_ID, LOOM_JOB_SECRET; the
// timeout from LOOM_TIMEOUT. SOAK_EMU=1: this rank's buffers are the emulated device's memory
// (LOOM_DEVICE=loom-emu, the plug-in LOOM_DEVICE_PLUGIN names), filled and read through the
// plug-in; its calls complete in stream order, so each is followed by a read back and the
// communicator's asynchronous error. Every rank draws the same CALLS collectives from SEED (op,
// count, dtype, root) and checks every result that returned success bit for bit: the data are small
// integers, exact in every type used. Before its call AT, rank VICTIM injects FAULT:
//   none      nothing
//   kill      SIGKILL from a thread 0-2 ms later (mid-call)
//   stop      SIGSTOP (the driver kills it after the others are done)
//   compute   spins for 2 x LOOM_TIMEOUT instead of calling, then exits without a result
//   abort     loomCommAbort from another thread 0-2 ms later, the calls go on (and fail)
//   drop      shuts down one of its TCP connections (a dropped connection), the calls go on
//   destroy   destroys its communicator and exits 0 without the remaining calls
// Lines printed (stdout, one each):
//   fault t_ms=T              when the victim injected it (CLOCK_REALTIME ms)
//   wrong call=K ...          a call that returned success with a wrong result (never expected)
//   failed call=K code=C t_ms=T msg=M   the first call that failed; then the communicator is
//                             aborted
//   ok calls=N                every call succeeded
//   leaks fds=F threads=T     after the release: descriptors and threads beyond those before init
//                             (0 0 expected)
#include <dirent.h>
#include <dlfcn.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "loom/loom.h"
#include "loom/loom_device_plugin.h"
#include "process_counts.hpp"

namespace {

using loom::soak::countEntries;

int64_t wallMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

struct Call {
  loomFunc_t func;
  loomDataType_t dtype;
  size_t count;
  int root;
};

Call draw(std::mt19937_64& rng, int nranks) {
  static const loomFunc_t funcs[] = {loomFuncAllReduce, loomFuncBroadcast,     loomFuncReduce,
                                     loomFuncAllGather, loomFuncReduceScatter, loomFuncAllToAll,
                                     loomFuncBarrier};
  static const loomDataType_t types[] = {loomInt32, loomInt64, loomFloat32, loomFloat64};
  static const size_t sizes[] = {0, 1, 7, 64, 1000, 4096, 65536 + 3, 262144};
  Call c;
  c.func = funcs[rng() % 7];
  c.dtype = types[rng() % 4];
  c.count = sizes[rng() % 8];
  c.root = static_cast<int>(rng() % static_cast<uint64_t>(nranks));
  return c;
}

// Small integers (exact in every type and in sums over up to 64 ranks).
double value(int rank, size_t i, int call) {
  return static_cast<double>((rank * 7 + static_cast<int>(i % 97) + call) % 50);
}

size_t esize(loomDataType_t t) { return t == loomInt32 || t == loomFloat32 ? 4 : 8; }

const loomDevicePlugin_v1* gEmu = nullptr;  // SOAK_EMU: the plug-in Loom loaded

// A call's buffer in this rank's memory: host memory, or the emulated device's.
class Buffer {
 public:
  explicit Buffer(size_t bytes) : host_(bytes) {
    if (gEmu != nullptr && gEmu->memAlloc(0, bytes, &device_) != loomSuccess) device_ = nullptr;
  }
  ~Buffer() {
    if (device_ != nullptr) gEmu->memFree(0, device_);
  }
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
  std::vector<char>& host() { return host_; }
  void* get() { return device_ != nullptr ? device_ : host_.data(); }
  void upload() {
    if (device_ == nullptr) return;
    gEmu->memcpyAsync(0, device_, host_.data(), host_.size(), loomMemcpyHostToDevice, nullptr);
    gEmu->streamSynchronize(0, nullptr);
  }
  void download() {
    if (device_ == nullptr) return;
    gEmu->memcpyAsync(0, host_.data(), device_, host_.size(), loomMemcpyDeviceToHost, nullptr);
    gEmu->streamSynchronize(0, nullptr);
  }

 private:
  std::vector<char> host_;
  void* device_ = nullptr;
};

void put(std::vector<char>& buf, size_t i, loomDataType_t t, double v) {
  switch (t) {
    case loomInt32:
      reinterpret_cast<int32_t*>(buf.data())[i] = static_cast<int32_t>(v);
      break;
    case loomInt64:
      reinterpret_cast<int64_t*>(buf.data())[i] = static_cast<int64_t>(v);
      break;
    case loomFloat32:
      reinterpret_cast<float*>(buf.data())[i] = static_cast<float>(v);
      break;
    default:
      reinterpret_cast<double*>(buf.data())[i] = v;
  }
}

double get(const std::vector<char>& buf, size_t i, loomDataType_t t) {
  switch (t) {
    case loomInt32:
      return reinterpret_cast<const int32_t*>(buf.data())[i];
    case loomInt64:
      return static_cast<double>(reinterpret_cast<const int64_t*>(buf.data())[i]);
    case loomFloat32:
      return reinterpret_cast<const float*>(buf.data())[i];
    default:
      return reinterpret_cast<const double*>(buf.data())[i];
  }
}

// Runs call k; on success, checks it. Returns the call's result (loomInternalError: wrong data).
loomResult_t runAndCheck(loomComm_t comm, const Call& c, int k, int rank, int n) {
  const size_t es = esize(c.dtype);
  const bool perRankIn = c.func == loomFuncReduceScatter || c.func == loomFuncAllToAll;
  const bool perRankOut = c.func == loomFuncAllGather || c.func == loomFuncAllToAll;
  const size_t inCount = c.count * (perRankIn ? n : 1), outCount = c.count * (perRankOut ? n : 1);
  Buffer inBuffer(inCount * es + 8), outBuffer(outCount * es + 8);
  std::vector<char>& in = inBuffer.host();
  std::vector<char>& out = outBuffer.host();
  for (size_t i = 0; i < inCount; ++i) put(in, i, c.dtype, value(rank, i, k));
  inBuffer.upload();
  void* send = inBuffer.get();
  void* recv = outBuffer.get();
  loomResult_t r = loomSuccess;
  switch (c.func) {
    case loomFuncAllReduce:
      r = loomAllReduce(send, recv, c.count, c.dtype, loomSum, comm, nullptr);
      break;
    case loomFuncBroadcast:
      r = loomBroadcast(send, recv, c.count, c.dtype, c.root, comm, nullptr);
      break;
    case loomFuncReduce:
      r = loomReduce(send, recv, c.count, c.dtype, loomSum, c.root, comm, nullptr);
      break;
    case loomFuncAllGather:
      r = loomAllGather(send, recv, c.count, c.dtype, comm, nullptr);
      break;
    case loomFuncReduceScatter:
      r = loomReduceScatter(send, recv, c.count, c.dtype, loomSum, comm, nullptr);
      break;
    case loomFuncAllToAll:
      r = loomAllToAll(send, recv, c.count, c.dtype, comm, nullptr);
      break;
    default:
      r = loomBarrier(comm, nullptr);
  }
  if (r != loomSuccess) return r;
  if (gEmu != nullptr) {  // stream order: the result is known once the stream got there
    outBuffer.download();
    // A communicator released meanwhile (an abort from another thread) cannot say: the outcome
    // is unknown, not a success.
    loomResult_t async = loomSuccess;
    const loomResult_t asked = loomCommGetAsyncError(comm, &async);
    if (asked != loomSuccess) return asked;
    if (async != loomSuccess) return async;
  }
  for (size_t i = 0; i < outCount; ++i) {
    double want = 0;
    switch (c.func) {
      case loomFuncAllReduce:
        for (int p = 0; p < n; ++p) want += value(p, i, k);
        break;
      case loomFuncReduce:
        if (rank != c.root) continue;
        for (int p = 0; p < n; ++p) want += value(p, i, k);
        break;
      case loomFuncBroadcast:
        want = value(c.root, i, k);
        break;
      case loomFuncAllGather:
        want = value(static_cast<int>(i / c.count), i % c.count, k);
        break;
      case loomFuncReduceScatter:
        for (int p = 0; p < n; ++p) want += value(p, rank * c.count + i, k);
        break;
      case loomFuncAllToAll:  // block p of my output is block `rank` of p's input
        want = value(static_cast<int>(i / c.count), rank * c.count + i % c.count, k);
        break;
      default:
        continue;
    }
    if (get(out, i, c.dtype) != want) {
      std::printf("wrong call=%d func=%d count=%zu dtype=%d index=%zu got=%g want=%g\n", k,
                  static_cast<int>(c.func), c.count, static_cast<int>(c.dtype), i,
                  get(out, i, c.dtype), want);
      return loomInternalError;
    }
  }
  return loomSuccess;
}

void dropConnection() {
  // The first TCP socket of this process (a channel, the control plane), shut down both ways.
  DIR* d = opendir("/proc/self/fd");
  if (d == nullptr) return;
  while (dirent* e = readdir(d)) {
    const int fd = std::atoi(e->d_name);
    int type = 0;
    socklen_t len = sizeof(type);
    sockaddr_storage addr{};
    socklen_t alen = sizeof(addr);
    if (fd <= 2 || getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &len) != 0 || type != SOCK_STREAM ||
        getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &alen) != 0 ||
        (addr.ss_family != AF_INET && addr.ss_family != AF_INET6))
      continue;
    sockaddr_storage peer{};
    socklen_t plen = sizeof(peer);
    if (getpeername(fd, reinterpret_cast<sockaddr*>(&peer), &plen) != 0) continue;  // a listener
    shutdown(fd, SHUT_RDWR);
    break;
  }
  closedir(d);
}

void reportLeaks(int fds, int threads) {
  // A released communicator's threads may take a moment to be gone from /proc.
  int extraFds = 0, extraThreads = 0;
  for (int i = 0; i < 200; ++i) {
    extraFds = countEntries("/proc/self/fd") - fds;
    extraThreads = countEntries("/proc/self/task") - threads;
    if (extraFds <= 0 && extraThreads <= 0) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  std::printf("leaks fds=%d threads=%d\n", extraFds, extraThreads);
}

// The plug-in stays loaded for the process's life, with its threads: loaded and touched first,
// so that what is counted after is what a communicator leaves behind.
void loadPlugin() {
  const char* emu = std::getenv("SOAK_EMU");
  const char* plugin = std::getenv("LOOM_DEVICE_PLUGIN");
  if (plugin == nullptr || loomDevicePluginLoad(plugin) != loomSuccess) return;
  const loomDevicePlugin_v1* table = nullptr;
  if (void* library = dlopen(plugin, RTLD_NOW | RTLD_NOLOAD))
    table = static_cast<const loomDevicePlugin_v1*>(dlsym(library, LOOM_DEVICE_PLUGIN_SYMBOL));
  void* probe = nullptr;
  if (table != nullptr && table->memAlloc(0, 64, &probe) == loomSuccess) table->memFree(0, probe);
  if (table != nullptr) table->streamSynchronize(0, nullptr);
  if (emu != nullptr && emu[0] == '1') gEmu = table;  // this rank's buffers are the device's
}

// The victim's fault, before its call AT. Returns true when the rank is done (destroy).
bool inject(const std::string& fault, loomComm_t& comm, std::mt19937_64& jitter,
            std::thread& helper) {
  std::printf("fault t_ms=%lld\n", static_cast<long long>(wallMs()));
  const auto delay = std::chrono::microseconds(jitter() % 2000);
  if (fault == "kill") {
    helper = std::thread([delay] {
      std::this_thread::sleep_for(delay);
      kill(getpid(), SIGKILL);
    });
  } else if (fault == "stop") {
    raise(SIGSTOP);
  } else if (fault == "compute") {
    const char* t = std::getenv("LOOM_TIMEOUT");
    const auto until =
        std::chrono::steady_clock::now() +
        std::chrono::milliseconds(static_cast<int64_t>(2000 * (t != nullptr ? std::atof(t) : 1.0)));
    volatile uint64_t spins = 0;
    while (std::chrono::steady_clock::now() < until) spins = spins + 1;
    std::_Exit(0);
  } else if (fault == "abort") {
    helper = std::thread([delay, &comm] {
      std::this_thread::sleep_for(delay);
      loomCommAbort(comm);
    });
  } else if (fault == "drop") {
    dropConnection();
  } else if (fault == "destroy") {
    loomCommDestroy(comm);
    std::printf("destroyed\n");
    return true;
  }
  return false;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 6) {
    std::fprintf(stderr, "usage: soak_rank SEED CALLS FAULT VICTIM AT\n");
    return 2;
  }
  setvbuf(stdout, nullptr, _IOLBF, 0);
  const uint64_t seed = std::strtoull(argv[1], nullptr, 10);
  const int calls = std::atoi(argv[2]);
  const std::string fault = argv[3];
  const int victim = std::atoi(argv[4]), at = std::atoi(argv[5]);
  loadPlugin();
  const int fds = countEntries("/proc/self/fd"), threads = countEntries("/proc/self/task");
  loomComm_t comm = nullptr;
  loomResult_t r = loomCommInitFromEnv(&comm, nullptr);
  int rank = 0, n = 1;
  if (r == loomSuccess) {
    loomCommUserRank(comm, &rank);
    loomCommCount(comm, &n);
  } else {
    std::printf("failed call=-1 code=%d t_ms=%lld msg=%s\n", static_cast<int>(r),
                static_cast<long long>(wallMs()), loomGetLastError(nullptr));
    reportLeaks(fds, threads);
    return 0;
  }
  std::mt19937_64 rng(seed);
  std::mt19937_64 jitter(seed * 31 + static_cast<uint64_t>(rank));
  std::thread helper;
  for (int k = 1; k <= calls; ++k) {
    const Call c = draw(rng, n);
    if (rank == victim && k == at && fault != "none") {
      if (inject(fault, comm, jitter, helper)) {
        reportLeaks(fds, threads);
        return 0;
      }
    }
    r = runAndCheck(comm, c, k, rank, n);
    if (r != loomSuccess) {
      std::string msg = r == loomInternalError ? "wrong result" : loomGetLastError(nullptr);
      for (char& ch : msg)
        if (ch == '\n') ch = ' ';
      std::printf("failed call=%d code=%d t_ms=%lld msg=%s\n", k, static_cast<int>(r),
                  static_cast<long long>(wallMs()), msg.c_str());
      break;
    }
  }
  if (r == loomSuccess) std::printf("ok calls=%d\n", calls);
  if (helper.joinable()) helper.join();
  // An aborted handle is released by the abort itself (fault abort on this rank).
  if (!(fault == "abort" && rank == victim)) {
    if (r == loomSuccess)
      loomCommDestroy(comm);
    else
      loomCommAbort(comm);
  }
  reportLeaks(fds, threads);
  return 0;
}
