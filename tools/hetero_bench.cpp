// loom-hetero-bench: allreduce on a heterogeneous communicator against what a user does without
// Loom (copy the device rank's data to the host, a host collective, copy back, one after the
// other), with the two parts of the bound measured in the same run: the device ranks' own
// device<->host copies of their bytes, and the CPU ranks' own allreduce over the same bytes.
//
//   loomrun -n 4 -- loom-hetero-bench --placement GCCC [-b 8] [-e 256M] [-f 4] [-n 20] [-w 5]
//
// One letter per rank: G a CUDA rank (device memory, a stream of its own), E an emulated-device
// rank (the plug-in named by LOOM_DEVICE_PLUGIN), C a CPU rank. Times are the slowest rank's
// mean per call. Every size's result is checked once on every rank.
#include <dlfcn.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "loom/loom.h"
#include "loom/loom_device_plugin.h"
#include "tool_cli.hpp"

#ifdef LOOM_HAVE_CUDA
#include <cuda_runtime.h>
#endif

namespace {

using Clock = std::chrono::steady_clock;

constexpr const char* kTool = "loom-hetero-bench";
[[noreturn]] void die(const std::string& why) { loom::tool::die(kTool, why); }
void ok(loomResult_t r, const char* what) { loom::tool::ok(kTool, r, what); }
size_t parseSize(const char* text) { return loom::tool::sizeArg(kTool, text); }

// This rank's memory: device memory with copies to and from the host, or host memory.
class Memory {
 public:
  virtual ~Memory() = default;
  virtual void* allocate(size_t bytes) = 0;
  virtual void* allocateHost(size_t bytes) { return std::malloc(bytes); }
  virtual void toHost(void* host, const void* dev, size_t bytes) { std::memcpy(host, dev, bytes); }
  virtual void toDevice(void* dev, const void* host, size_t bytes) {
    std::memcpy(dev, host, bytes);
  }
  // The same, only enqueued on stream() (the host does not wait): the check's upload, so that
  // the allreduce must order itself after user work still running on the stream.
  virtual void toDeviceQueued(void* dev, const void* host, size_t bytes) {
    toDevice(dev, host, bytes);
  }
  virtual void synchronize() {}
  virtual loomStream_t stream() { return nullptr; }
  virtual const char* device() const = 0;
};

class HostMemory : public Memory {
 public:
  void* allocate(size_t bytes) override { return std::malloc(bytes); }
  const char* device() const override { return "cpu"; }
};

class EmuMemory : public Memory {
 public:
  EmuMemory() {
    const char* path = std::getenv("LOOM_DEVICE_PLUGIN");
    void* lib = path != nullptr ? dlopen(path, RTLD_NOW | RTLD_LOCAL) : nullptr;
    if (lib != nullptr)
      p_ = static_cast<const loomDevicePlugin_v1*>(dlsym(lib, LOOM_DEVICE_PLUGIN_SYMBOL));
    if (p_ == nullptr) die("E ranks need LOOM_DEVICE_PLUGIN naming the emulated-device plug-in");
  }
  void* allocate(size_t bytes) override {
    void* ptr = nullptr;
    ok(p_->memAlloc(0, bytes, &ptr), "emu memAlloc");
    return ptr;
  }
  void* allocateHost(size_t bytes) override {
    void* ptr = nullptr;
    if (p_->hostAlloc == nullptr) return std::malloc(bytes);
    ok(p_->hostAlloc(0, bytes, &ptr), "emu hostAlloc");
    return ptr;
  }
  void toHost(void* host, const void* dev, size_t bytes) override {
    ok(p_->memcpyAsync(0, host, dev, bytes, loomMemcpyDeviceToHost, nullptr), "emu copy");
    synchronize();
  }
  void toDevice(void* dev, const void* host, size_t bytes) override {
    ok(p_->memcpyAsync(0, dev, host, bytes, loomMemcpyHostToDevice, nullptr), "emu copy");
    synchronize();
  }
  void synchronize() override { ok(p_->streamSynchronize(0, nullptr), "emu sync"); }
  const char* device() const override { return "loom-emu:0"; }

 private:
  const loomDevicePlugin_v1* p_ = nullptr;
};

#ifdef LOOM_HAVE_CUDA
void cudaOk(cudaError_t e, const char* what) {
  if (e != cudaSuccess) die(std::string(what) + ": " + cudaGetErrorString(e));
}

class CudaMemory : public Memory {
 public:
  CudaMemory() { cudaOk(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "stream"); }
  void* allocate(size_t bytes) override {
    void* ptr = nullptr;
    cudaOk(cudaMalloc(&ptr, bytes), "cudaMalloc");
    return ptr;
  }
  void* allocateHost(size_t bytes) override {
    void* ptr = nullptr;
    cudaOk(cudaMallocHost(&ptr, bytes), "cudaMallocHost");
    return ptr;
  }
  void toHost(void* host, const void* dev, size_t bytes) override {
    cudaOk(cudaMemcpyAsync(host, dev, bytes, cudaMemcpyDeviceToHost, stream_), "copy");
    synchronize();
  }
  void toDevice(void* dev, const void* host, size_t bytes) override {
    cudaOk(cudaMemcpyAsync(dev, host, bytes, cudaMemcpyHostToDevice, stream_), "copy");
    synchronize();
  }
  void toDeviceQueued(void* dev, const void* host, size_t bytes) override {
    cudaOk(cudaMemcpyAsync(dev, host, bytes, cudaMemcpyHostToDevice, stream_), "copy");
  }
  void synchronize() override { cudaOk(cudaStreamSynchronize(stream_), "sync"); }
  loomStream_t stream() override { return stream_; }
  const char* device() const override { return "cuda"; }

 private:
  cudaStream_t stream_ = nullptr;
};
#endif

std::unique_ptr<Memory> memoryFor(char letter) {
  if (letter == 'C') return std::make_unique<HostMemory>();
  if (letter == 'E') return std::make_unique<EmuMemory>();
#ifdef LOOM_HAVE_CUDA
  if (letter == 'G') return std::make_unique<CudaMemory>();
  die("placement letter G needs a build with CUDA");
#else
  die(std::string("placement letter ") + letter + " is not G, E or C (G needs a CUDA build)");
#endif
}

// The slowest rank's value.
double slowest(double mine, loomComm_t world) {
  double v = mine;
  ok(loomAllReduce(&v, &v, 1, loomFloat64, loomMax, world, nullptr), "max");
  return v;
}

template <typename Body>
double timed(int warmup, int iters, loomComm_t world, Body body) {
  for (int i = 0; i < warmup; ++i) body();
  ok(loomBarrier(world, nullptr), "barrier");
  Clock::time_point start = Clock::now();
  for (int i = 0; i < iters; ++i) body();
  double us = std::chrono::duration<double, std::micro>(Clock::now() - start).count() / iters;
  return slowest(us, world);
}

}  // namespace

int main(int argc, char** argv) {
  std::string placement;
  size_t minBytes = 8, maxBytes = 256u << 20;
  int factor = 4, iters = 20, warmup = 5;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto next = [&]() -> const char* {
      if (i + 1 >= argc) die(a + " needs a value");
      return argv[++i];
    };
    if (a == "--placement")
      placement = next();
    else if (a == "-b")
      minBytes = parseSize(next());
    else if (a == "-e")
      maxBytes = parseSize(next());
    else if (a == "-f")
      factor = std::atoi(next());
    else if (a == "-n")
      iters = std::atoi(next());
    else if (a == "-w")
      warmup = std::atoi(next());
    else
      die("usage: loom-hetero-bench --placement LETTERS [-b MIN] [-e MAX] [-f F] [-n N] [-w W]");
  }
  loomComm_t world = nullptr;
  ok(loomCommInitFromEnv(&world, nullptr), "init");
  int rank = 0, nranks = 0;
  loomCommUserRank(world, &rank);
  loomCommCount(world, &nranks);
  if (static_cast<int>(placement.size()) != nranks)
    die("--placement needs one letter per rank (" + std::to_string(nranks) + ")");
  const char me = placement[rank];
  std::unique_ptr<Memory> mem = memoryFor(me);
  if (me == 'E') ok(loomDevicePluginLoad(std::getenv("LOOM_DEVICE_PLUGIN")), "plug-in load");

  loomConfig_t config = LOOM_CONFIG_INITIALIZER;
  config.device = mem->device();
  loomComm_t hetero = nullptr, cpus = nullptr;
  ok(loomCommSplit(world, 0, rank, &hetero, &config), "heterogeneous communicator");
  ok(loomCommSplit(world, me == 'C' ? 0 : LOOM_SPLIT_NOCOLOR, rank, &cpus, nullptr), "cpu split");

  void* data = mem->allocate(maxBytes);
  float* staged = static_cast<float*>(mem->allocateHost(maxBytes));
  if (rank == 0) {
    std::printf("# loom-hetero-bench: allreduce float32 sum, placement %s, %d iterations\n",
                placement.c_str(), iters);
    std::printf(
        "# time per call (us), slowest rank; loom-q4 = four calls back to back, one "
        "synchronization; staged = copy to host, Loom's CPU allreduce "
        "over all ranks, copy back; copies = a device rank's D2H+H2D of its bytes; "
        "cpu = the CPU ranks' own allreduce\n");
    std::printf("%12s %12s %12s %12s %12s %12s %10s %10s %s\n", "bytes", "loom", "loom-q4",
                "staged", "copies", "cpu", "staged/x", "x/bound", "check");
  }
  for (size_t bytes = minBytes; bytes <= maxBytes; bytes *= factor) {
    const size_t count = bytes / sizeof(float);
    // Check first: rank r holds r + 1 everywhere; the sum is exact in float32.
    // On a CUDA rank the upload is still queued on the stream when the allreduce is called, and
    // the download is queued behind it: both orders are the stream's.
    std::vector<float> host(count, static_cast<float>(rank + 1));
    float* pinned = staged;
    std::copy(host.begin(), host.end(), pinned);
    mem->toDeviceQueued(data, pinned, count * sizeof(float));
    ok(loomAllReduce(data, data, count, loomFloat32, loomSum, hetero, mem->stream()), "allreduce");
    mem->toHost(host.data(), data, count * sizeof(float));
    const float want = static_cast<float>(nranks) * (nranks + 1) / 2;
    long bad = std::count_if(host.begin(), host.end(), [&](float v) { return v != want; });
    double anyBad = slowest(static_cast<double>(bad), world);

    const int n = bytes >= (64u << 20) ? std::max(3, iters / 4) : iters;
    double loomUs = timed(warmup, n, world, [&] {
      ok(loomAllReduce(data, data, count, loomFloat32, loomSum, hetero, mem->stream()), "ar");
      mem->synchronize();
    });
    // Back to back: kQueued calls, one synchronization. A device rank whose calls return once
    // enqueued overlaps the next call's copies and exchange with the previous one's.
    constexpr int kQueued = 4;
    double queuedUs =
        timed(warmup, std::max(1, n / kQueued), world,
              [&] {
                for (int q = 0; q < kQueued; ++q)
                  ok(loomAllReduce(data, data, count, loomFloat32, loomSum, hetero, mem->stream()),
                     "ar");
                mem->synchronize();
              }) /
        kQueued;
    double stagedUs = timed(warmup, n, world, [&] {
      void* buf = me == 'C' ? data : staged;
      if (me != 'C') mem->toHost(staged, data, bytes);
      ok(loomAllReduce(buf, buf, count, loomFloat32, loomSum, world, nullptr), "host ar");
      if (me != 'C') mem->toDevice(data, staged, bytes);
    });
    double copiesUs = timed(warmup, n, world, [&] {
      if (me == 'C') return;
      mem->toHost(staged, data, bytes);
      mem->toDevice(data, staged, bytes);
    });
    double cpuUs = timed(warmup, n, world, [&] {
      if (cpus != nullptr)
        ok(loomAllReduce(data, data, count, loomFloat32, loomSum, cpus, nullptr), "cpu ar");
    });
    double bound = std::max(copiesUs, cpuUs);
    if (rank == 0)
      std::printf("%12zu %12.1f %12.1f %12.1f %12.1f %12.1f %10.2f %10.2f %s\n", bytes, loomUs,
                  queuedUs, stagedUs, copiesUs, cpuUs, stagedUs / loomUs, loomUs / bound,
                  anyBad == 0 ? "ok" : "WRONG");
    if (anyBad != 0) return 1;
    if (bytes > maxBytes / factor) break;
  }
  if (cpus != nullptr) loomCommDestroy(cpus);
  loomCommDestroy(hetero);
  loomCommDestroy(world);
  return 0;
}
