// Host memory for loom-bench: the buffers are plain host allocations, the check works on them
// directly, and a batch of calls is timed with the CPU clock between a barrier and the last
// call's return.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "bench_backend.hpp"

namespace loom::bench {

void failCall(const char* call, loomResult_t result, loomComm_t comm) {
  std::fprintf(stderr, "loom-bench: %s failed: %s: %s\n", call, loomGetErrorString(result),
               loomGetLastError(comm));
  std::exit(1);
}

namespace {

struct FreeDeleter {
  void operator()(void* p) const { std::free(p); }
};
using Buffer = std::unique_ptr<unsigned char, FreeDeleter>;

Buffer allocTouched(size_t bytes) {
  const size_t rounded = (bytes + 63) / 64 * 64 + 64;
  auto* p = static_cast<unsigned char*>(std::aligned_alloc(64, rounded));
  if (p == nullptr) {
    std::fprintf(stderr, "loom-bench: cannot allocate %zu bytes\n", rounded);
    std::exit(1);
  }
  // Fault every page in now, so the first timed size does not pay for it. Zeros are a valid
  // value of every type, and far from the denormals that would slow reductions down.
  std::memset(p, 0, rounded);
  return Buffer(p);
}

class HostBackend final : public Backend {
 public:
  HostBackend(const BenchOptions& options, loomComm_t comm)
      : opts_(options),
        comm_(comm),
        send_(allocTouched(options.maxBytes)),
        recv_(allocTouched(options.maxBytes)) {}

  loomStream_t stream() const override { return nullptr; }
  unsigned char* sendBuffer() override { return send_.get(); }
  unsigned char* recvBuffer() override { return recv_.get(); }
  unsigned char* hostView(unsigned char* buf) override { return buf; }
  void upload(unsigned char*, size_t) override {}
  void download(unsigned char*, size_t) override {}
  void synchronize() override {}
  bool warmUpFirst() const override { return false; }

  double secondsPerCall(const std::function<void()>& launch) override {
    for (int i = 0; i < opts_.warmupIters; ++i) launch();
    checkCall(loomBarrier(comm_, nullptr), "loomBarrier", comm_);
    const auto start = std::chrono::steady_clock::now();
    for (int i = 0; i < opts_.iters; ++i) launch();
    const std::chrono::duration<double> elapsed = std::chrono::steady_clock::now() - start;
    return elapsed.count() / opts_.iters;
  }

  double maxOverRanks(double value) override {
    checkCall(loomAllReduce(&value, &value, 1, loomDouble, loomMax, comm_, nullptr),
              "loomAllReduce", comm_);
    return value;
  }

  int64_t sumOverRanks(int64_t value) override {
    checkCall(loomAllReduce(&value, &value, 1, loomInt64, loomSum, comm_, nullptr), "loomAllReduce",
              comm_);
    return value;
  }

 private:
  const BenchOptions& opts_;
  loomComm_t comm_;
  Buffer send_;
  Buffer recv_;
};

}  // namespace

std::unique_ptr<Backend> makeHostBackend(const BenchOptions& options, loomComm_t comm) {
  return std::make_unique<HostBackend>(options, comm);
}

}  // namespace loom::bench
