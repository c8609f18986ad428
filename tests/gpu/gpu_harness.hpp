// Shared pieces of the GPU collective tests: deterministic inputs that every rank can regenerate
// for every other rank, the reference reduction (the CPU library's own, in rank order), the
// configurations the sweeps run under, and a harness that owns one communicator with its stream
// and buffers and checks one call after another.
#pragma once

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <chrono>
#include <cstddef>
#include <memory>
#include <ostream>
#include <string>
#include <utility>
#include <vector>

#include "../api/expect_loom.hpp"
#include "gpu_cumem.hpp"
#include "gpu_env.hpp"
#include "loom/loom.h"

namespace loom::gputest {

// The world communicator (device "cuda") and this rank's place in it; set up by gpu_main.cpp.
extern loomComm_t gWorld;
extern int gRank;
extern int gRanks;

#define EXPECT_CUDA(call) EXPECT_EQ((call), cudaSuccess) << #call
#define ASSERT_CUDA(call) ASSERT_EQ((call), cudaSuccess) << #call

// ---------------------------------------------------------------------------------------------
// Inputs and references

// Every source's values repeat with this period (prime: no chunk, slot or block boundary lines up
// with it), so that a sequence is generated once and then copied.
constexpr size_t kPeriod = 8191;

// Elements [first, first + count) of the sequence of source `id` for type t. Integers are random
// bit patterns (sums and products wrap); floats are uniform in [-2, 2], rounded once to the type,
// so that a sum rounds differently in every order and only the reference order matches bit for
// bit. Ids: a rank's input is its rank; the tests add offsets for other roles.
std::vector<char> values(loomDataType_t t, int id, size_t count, size_t first);

// Every rank's values(t, rank, count, first), in rank order (what a gather of them gives).
inline std::vector<char> allBlocks(loomDataType_t t, size_t count, size_t first) {
  std::vector<char> out;
  for (int r = 0; r < gRanks; ++r) {
    std::vector<char> block = values(t, r, count, first);
    out.insert(out.end(), block.begin(), block.end());
  }
  return out;
}

inline double secondsSince(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// What a reduction of every rank's values(t, rank, count, first) must give: the CPU library's
// reduceManyAndScale over the ranks in order 0..nranks-1 (avg: sum, then divide by nranks).
std::vector<char> reduceReference(loomDataType_t t, loomRedOp_t op, int accum, size_t count,
                                  size_t first, int nranks);

// Element i of a buffer of type t, for messages: its value and its bytes in hex.
std::string elementText(const void* buf, size_t i, loomDataType_t t);

std::vector<loomDataType_t> allTypes();
constexpr loomRedOp_t kOps[] = {loomSum, loomProd, loomMax, loomMin, loomAvg};
// The "1 MiB plus three elements" size of the sweeps, and the types that run it.
size_t largeCount(loomDataType_t t);
bool runsLargeCount(loomDataType_t t);
// {0, 1, 7, 4097} plus largeCount(t) for the types that run it.
std::vector<size_t> sweepSizes(loomDataType_t t);

// ---------------------------------------------------------------------------------------------
// Configurations: the environment a communicator is created with

struct GpuConfig {
  const char* name;
  const char* algo;       // "ll" or "simple" for all nine collectives; "" = the selector
  const char* slotBytes;  // LOOM_CUDA_SLOT_BYTES; "" = default
  const char* transport;  // LOOM_CUDA_TRANSPORT (p2p|host); "" = default
  int accumType = -1;     // loomConfig_t.accumType
  bool cuMem = false;     // the harness's buffers from cuMemCreate (gpu_cumem.hpp), not cudaMalloc
};

// How GoogleTest shows a config in test names' parameters.
inline void PrintTo(const GpuConfig& c, std::ostream* os) { *os << c.name; }

// The nine collective keys of LOOM_ALGO.
extern const char* const kAlgoKeys[9];
// "allreduce:ALGO,broadcast:ALGO,..." for all nine keys, "" for an empty algo, and an algo that
// already names collectives ("allgather:ce,...") as it is.
std::string algoSpec(const char* algo);
// The sweep configs: auto, ll, simple, tiny-slot ll and simple, host transport (auto and tiny).
// GPUTEST_CONFIGS=name,name,... (the same on every rank) runs only those.
std::vector<GpuConfig> sweepConfigs();
// ll and simple (one of them with tiny slots) with fp32 accumulation.
std::vector<GpuConfig> accumConfigs();
// For INSTANTIATE_TEST_SUITE_P: the config's name as a test name ('-' becomes '_').
std::string configTestName(const GpuConfig& c);

// ---------------------------------------------------------------------------------------------
// The harness

constexpr unsigned char kPoison = 0xA5;
constexpr size_t kGuardBytes = 256;  // poisoned bytes after every output, checked untouched

// Where a call puts its buffers: in place (nccl-tests conventions) and how many elements past the
// start of the allocation (1 element: pointers of 2-byte types that are not 4-byte aligned).
struct Layout {
  bool inPlace = false;
  size_t offset = 0;
};

// A region of a device allocation: `lead` bytes before the data (left poisoned), the data, and
// kGuardBytes after it (left poisoned).
struct Span {
  char* base = nullptr;
  size_t lead = 0;
  size_t bytes = 0;
  char* data() const { return base + lead; }
  size_t total() const { return lead + bytes + kGuardBytes; }
};

// One communicator split off the world with a config's environment, a non-blocking stream, two
// device buffers (a, b) and the checks of the calls made through it. A failed call or stream
// leaves the harness broken (its communicator aborted, and so the peers' too): every later
// check is skipped, so that one fault yields one failure, not thousands.
class Harness {
 public:
  explicit Harness(const GpuConfig& config, size_t capacityBytes = 0);
  ~Harness();
  Harness(const Harness&) = delete;
  Harness& operator=(const Harness&) = delete;

  bool ok() const { return comm_ != nullptr && !broken_; }
  const GpuConfig& config() const { return config_; }
  loomComm_t comm() const { return comm_; }
  cudaStream_t stream() const { return stream_; }
  loomStream_t loomStream() const { return static_cast<loomStream_t>(stream_); }
  int accum() const { return config_.accumType; }
  char* a() const { return a_; }
  char* b() const { return b_; }
  size_t capacity() const { return capacity_; }
  // The start of the input sequences of the next call: it moves on every call (the same way on
  // every rank), so that stale data from an earlier call never passes for a result.
  size_t nextFirst() { return (calls_++ * 2749) % kPeriod; }

  // A span of a or b; one that does not fit is a test bug that breaks the harness.
  Span span(char* base, const Layout& layout, loomDataType_t t, size_t bytes);
  // Enqueued on the stream.
  void poison(const Span& s);
  void upload(void* dev, const std::vector<char>& host);
  // Records a Loom call's result: false (and broken) if it failed.
  bool call(loomResult_t result, const std::string& what);
  // Waits for the stream (bounded), then asks the communicator for an asynchronous error: false
  // (and broken) on any error or on a stream that does not finish. `other`: that stream instead.
  bool settle(const std::string& what, cudaStream_t other = nullptr);
  std::vector<char> fetch(const void* dev, size_t bytes);
  // Compares device memory (after settle) with the expected elements.
  void expectData(const std::vector<char>& want, const void* dev, loomDataType_t t,
                  const std::string& what);
  // The lead and guard bytes of a span are still poison.
  void expectGuards(const Span& s, const std::string& what);
  std::string describe(const char* collective, loomDataType_t t, const char* op, size_t count,
                       const Layout& layout) const;
  void fail(const std::string& message);

 private:
  void markBroken();

  GpuConfig config_;
  loomComm_t comm_ = nullptr;
  cudaStream_t stream_ = nullptr;
  char* a_ = nullptr;
  char* b_ = nullptr;
  std::unique_ptr<CuMemBuffer> cuMemA_, cuMemB_;  // config.cuMem: what a_ and b_ point into
  size_t capacity_ = 0;
  size_t calls_ = 0;
  bool broken_ = false;
  int reported_ = 0;
  int suppressed_ = 0;
};

// Sets environment variables for the life of the object ("" unsets) and then restores them.
class ScopedEnv {
 public:
  ScopedEnv() = default;
  ~ScopedEnv();
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;
  void set(const char* name, const std::string& value);

 private:
  std::vector<std::pair<std::string, std::pair<bool, std::string>>> saved_;
};

}  // namespace loom::gputest
