// loom-bench on a rank of any device (--device KIND of a plug-in, --placement): its buffers in
// that device's memory (bench_memory.hpp), the check through host copies of them, a batch of
// calls timed with the CPU clock from a host barrier to the end of the rank's stream, and every
// rank's scalars over a host communicator of all ranks, which ranks of any device call alike
// (the device communicator may hold ranks of several kinds, each passing its own memory).
#include <chrono>
#include <cstring>
#include <memory>

#include "bench_backend.hpp"
#include "bench_memory.hpp"

namespace loom::bench {
namespace {

class PlacedBackend final : public Backend {
 public:
  PlacedBackend(const BenchOptions& options, loomComm_t hostComm, tool::Memory& memory)
      : opts_(options), hostComm_(hostComm), mem_(memory), host_(memory.device() == "cpu") {
    capacity_ = (options.maxBytes + 63) / 64 * 64 + 64;
    send_ = static_cast<unsigned char*>(mem_.allocate(capacity_));
    recv_ = static_cast<unsigned char*>(mem_.allocate(capacity_));
    // Host memory is its own host view; a device's buffers get host copies for the check.
    hostSend_ = host_ ? send_ : static_cast<unsigned char*>(mem_.allocateHost(capacity_));
    hostRecv_ = host_ ? recv_ : static_cast<unsigned char*>(mem_.allocateHost(capacity_));
    // Zeros, as on the host backend: a valid value of every type, no denormals to slow reductions
    // (and every page touched before the first timed size).
    std::memset(hostSend_, 0, capacity_);
    std::memset(hostRecv_, 0, capacity_);
    if (!host_) {
      mem_.toDevice(send_, hostSend_, capacity_);
      mem_.toDevice(recv_, hostRecv_, capacity_);
    }
  }

  loomStream_t stream() const override { return mem_.stream(); }
  unsigned char* sendBuffer() override { return send_; }
  unsigned char* recvBuffer() override { return recv_; }

  unsigned char* hostView(unsigned char* buf) override {
    if (buf >= recv_ && buf < recv_ + capacity_) return hostRecv_ + (buf - recv_);
    return hostSend_ + (buf - send_);
  }
  void upload(unsigned char* buf, size_t bytes) override {
    if (!host_) mem_.toDevice(buf, hostView(buf), bytes);
  }
  void download(unsigned char* buf, size_t bytes) override {
    if (!host_) mem_.toHost(hostView(buf), buf, bytes);
  }
  void synchronize() override { mem_.synchronize(); }
  bool warmUpFirst() const override { return false; }

  double secondsPerCall(const std::function<void()>& launch) override {
    for (int i = 0; i < opts_.warmupIters; ++i) launch();
    mem_.synchronize();
    checkCall(loomBarrier(hostComm_, nullptr), "loomBarrier", hostComm_);
    const auto start = std::chrono::steady_clock::now();
    for (int i = 0; i < opts_.iters; ++i) launch();
    mem_.synchronize();
    const std::chrono::duration<double> elapsed = std::chrono::steady_clock::now() - start;
    return elapsed.count() / opts_.iters;
  }

  double maxOverRanks(double value) override {
    checkCall(loomAllReduce(&value, &value, 1, loomDouble, loomMax, hostComm_, nullptr),
              "loomAllReduce", hostComm_);
    return value;
  }

  int64_t sumOverRanks(int64_t value) override {
    checkCall(loomAllReduce(&value, &value, 1, loomInt64, loomSum, hostComm_, nullptr),
              "loomAllReduce", hostComm_);
    return value;
  }

 private:
  const BenchOptions& opts_;
  loomComm_t hostComm_;
  tool::Memory& mem_;
  const bool host_;
  size_t capacity_ = 0;
  unsigned char* send_ = nullptr;
  unsigned char* recv_ = nullptr;
  unsigned char* hostSend_ = nullptr;
  unsigned char* hostRecv_ = nullptr;
};

}  // namespace

std::unique_ptr<Backend> makePlacedBackend(const BenchOptions& options, loomComm_t hostComm,
                                           tool::Memory& memory) {
  return std::make_unique<PlacedBackend>(options, hostComm, memory);
}

}  // namespace loom::bench
