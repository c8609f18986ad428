#include "gpu_harness.hpp"

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <sstream>
#include <thread>
#include <tuple>

#include "base/dtype.hpp"
#include "base/reduce.hpp"

namespace loom::gputest {

loomComm_t gWorld = nullptr;
int gRank = 0;
int gRanks = 1;

namespace {

// How long settle() waits for a stream before it calls the call hung.
constexpr double kSettleSeconds = 90.0;
// Failure messages per harness; further failures are counted only.
constexpr int kMaxReports = 20;

uint64_t mix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// One period of a source's sequence, built on first use.
const std::vector<char>& period(loomDataType_t t, int id) {
  static std::map<std::pair<int, int>, std::vector<char>> cache;
  auto [it, inserted] = cache.try_emplace({static_cast<int>(t), id});
  if (inserted) {
    const size_t esize = dtypeSize(t);
    std::vector<char>& p = it->second;
    p.resize(kPeriod * esize);
    const uint64_t seed = mix64((static_cast<uint64_t>(t) << 32) ^ static_cast<uint32_t>(id));
    for (size_t k = 0; k < kPeriod; ++k) {
      const uint64_t h = mix64(seed + k);
      if (dtypeIsFloat(t)) {
        storeFromDouble(p.data(), k, t, static_cast<double>(h >> 11) * 0x1p-53 * 4.0 - 2.0);
      } else {
        std::memcpy(p.data() + k * esize, &h, esize);
      }
    }
  }
  return it->second;
}

}  // namespace

std::vector<char> values(loomDataType_t t, int id, size_t count, size_t first) {
  const size_t esize = dtypeSize(t);
  const std::vector<char>& p = period(t, id);
  std::vector<char> out(count * esize);
  for (size_t i = 0; i < count;) {
    const size_t k = (first + i) % kPeriod;
    const size_t n = std::min(count - i, kPeriod - k);
    std::memcpy(out.data() + i * esize, p.data() + k * esize, n * esize);
    i += n;
  }
  return out;
}

std::vector<char> reduceReference(loomDataType_t t, loomRedOp_t op, int accum, size_t count,
                                  size_t first, int nranks) {
  std::vector<std::vector<char>> inputs;
  std::vector<const void*> srcs;
  for (int r = 0; r < nranks; ++r) inputs.push_back(values(t, r, count, first));
  for (const auto& in : inputs) srcs.push_back(in.data());
  std::vector<char> out(count * dtypeSize(t));
  if (count > 0) {
    reduceManyAndScale(out.data(), srcs.data(), nranks, count, t, op == loomAvg ? loomSum : op,
                       accum, op == loomAvg ? nranks : 1);
  }
  return out;
}

std::string elementText(const void* buf, size_t i, loomDataType_t t) {
  const size_t esize = dtypeSize(t);
  const auto* bytes = static_cast<const unsigned char*>(buf) + i * esize;
  char text[64];
  std::snprintf(text, sizeof(text), "%.17g (0x", loadAsDouble(buf, i, t));
  std::string out = text;
  for (size_t k = esize; k-- > 0;) {  // little endian: most significant byte last in memory
    std::snprintf(text, sizeof(text), "%02x", bytes[k]);
    out += text;
  }
  return out + ")";
}

std::vector<loomDataType_t> allTypes() {
  std::vector<loomDataType_t> out;
  for (int t = 0; t < loomNumTypes; ++t) out.push_back(static_cast<loomDataType_t>(t));
  return out;
}

size_t largeCount(loomDataType_t t) { return (size_t{1} << 20) / dtypeSize(t) + 3; }

bool runsLargeCount(loomDataType_t t) {
  return t == loomFloat32 || t == loomBfloat16 || t == loomInt32 || t == loomFloat8e4m3;
}

std::vector<size_t> sweepSizes(loomDataType_t t) {
  std::vector<size_t> sizes = {0, 1, 7, 4096 + 1};
  if (runsLargeCount(t)) sizes.push_back(largeCount(t));
  return sizes;
}

// ---------------------------------------------------------------------------------------------

const char* const kAlgoKeys[9] = {"allreduce", "broadcast", "reduce", "allgather", "reducescatter",
                                  "alltoall",  "alltoallv", "gather", "scatter"};

std::string algoSpec(const char* algo) {
  std::string spec;
  if (algo == nullptr || algo[0] == '\0') return spec;
  if (std::strchr(algo, ':') != nullptr) return algo;  // already "collective:algorithm,..."
  for (const char* key : kAlgoKeys) {
    if (!spec.empty()) spec += ',';
    spec.append(key).append(":").append(algo);
  }
  return spec;
}

namespace {

std::vector<GpuConfig> selected(std::vector<GpuConfig> all) {
  const char* only = std::getenv("GPUTEST_CONFIGS");
  if (only == nullptr || only[0] == '\0') return all;
  std::string list = std::string(",") + only + ",";
  std::vector<GpuConfig> out;
  for (const GpuConfig& c : all) {
    std::string needle = ",";
    needle.append(c.name).append(",");
    if (list.find(needle) != std::string::npos) out.push_back(c);
  }
  return out;
}

}  // namespace

std::vector<GpuConfig> sweepConfigs() {
  return selected({
      {"auto", "", "", ""},
      {"ll", "ll", "", ""},
      {"simple", "simple", "", ""},
      {"tiny-ll", "ll", "4096", ""},
      {"tiny-simple", "simple", "4096", ""},
      {"host", "", "", "host"},
      {"host-tiny-ll", "ll", "4096", "host"},
      {"host-tiny-simple", "simple", "4096", "host"},
  });
}

std::vector<GpuConfig> accumConfigs() {
  return selected({
      {"ll-accum32", "ll", "", "", loomFloat32},
      {"simple-accum32", "simple", "", "", loomFloat32},
      {"tiny-simple-accum32", "simple", "4096", "", loomFloat32},
  });
}

std::string configTestName(const GpuConfig& c) {
  std::string name = c.name;
  std::replace(name.begin(), name.end(), '-', '_');
  return name;
}

// ---------------------------------------------------------------------------------------------

ScopedEnv::~ScopedEnv() {
  for (auto it = saved_.rbegin(); it != saved_.rend(); ++it) {
    if (it->second.first) {
      setenv(it->first.c_str(), it->second.second.c_str(), 1);
    } else {
      unsetenv(it->first.c_str());
    }
  }
}

void ScopedEnv::set(const char* name, const std::string& value) {
  const char* prior = std::getenv(name);
  saved_.push_back({name, {prior != nullptr, prior != nullptr ? prior : ""}});
  if (value.empty()) {
    unsetenv(name);
  } else {
    setenv(name, value.c_str(), 1);
  }
}

Harness::Harness(const GpuConfig& config, size_t capacityBytes) : config_(config) {
  capacity_ = capacityBytes != 0
                  ? capacityBytes
                  : static_cast<size_t>(std::max(gRanks, 2)) * ((size_t{1} << 20) + 64 * 1024);
  {
    // The environment is read when the communicator is created.
    ScopedEnv env;
    // CPU reference mode: 'direct' reduces in rank order, like the reference.
    env.set("LOOM_ALGO", algoSpec(cpuReferenceMode() ? "direct" : config.algo));
    env.set("LOOM_CUDA_SLOT_BYTES", config.slotBytes);
    env.set("LOOM_CUDA_TRANSPORT", config.transport);
    env.set("LOOM_ACCUM_TYPE", "");  // the reference assumes config.accumType, nothing else
    loomConfig_t cfg = LOOM_CONFIG_INITIALIZER;
    cfg.device = cpuReferenceMode() ? "cpu" : "cuda";
    cfg.accumType = config.accumType;
    cfg.name = config.name;
    if (loomCommSplit(gWorld, 0, gRank, &comm_, &cfg) != loomSuccess) {
      ADD_FAILURE() << "split for config " << config.name << ": " << loomGetLastError(nullptr);
      comm_ = nullptr;
      return;
    }
  }
  if (cpuReferenceMode()) {
    a_ = new char[capacity_ + kGuardBytes + 64];
    b_ = new char[capacity_ + kGuardBytes + 64];
    return;
  }
  cudaError_t e = cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking);
  if (e == cudaSuccess && config.cuMem) {
    int device = 0;
    e = cudaGetDevice(&device);
    for (auto* buffer : {&cuMemA_, &cuMemB_}) {
      if (e != cudaSuccess) break;
      *buffer = std::make_unique<CuMemBuffer>(device, capacity_ + kGuardBytes + 64);
      if (!(*buffer)->ok()) {
        ADD_FAILURE() << "config " << config.name << ": " << (*buffer)->error();
        markBroken();
        return;
      }
    }
    a_ = cuMemA_->data();
    b_ = cuMemB_->data();
  } else {
    if (e == cudaSuccess) e = cudaMalloc(&a_, capacity_ + kGuardBytes + 64);
    if (e == cudaSuccess) e = cudaMalloc(&b_, capacity_ + kGuardBytes + 64);
  }
  if (e != cudaSuccess) {
    ADD_FAILURE() << "config " << config.name << ": " << cudaErrorText(e);
    markBroken();
  }
}

Harness::~Harness() {
  if (stream_ != nullptr && !broken_) cudaStreamSynchronize(stream_);
  if (comm_ != nullptr) {  // (a broken harness aborted its communicator already)
    EXPECT_LOOM(loomCommDestroy(comm_));
  }
  if (cpuReferenceMode()) {
    delete[] a_;
    delete[] b_;
  } else {
    if (a_ != nullptr && cuMemA_ == nullptr) cudaFree(a_);
    if (b_ != nullptr && cuMemB_ == nullptr) cudaFree(b_);
    cuMemA_.reset();
    cuMemB_.reset();
  }
  if (stream_ != nullptr) cudaStreamDestroy(stream_);
  if (suppressed_ > 0)
    ADD_FAILURE() << "config " << config_.name << ": " << suppressed_ << " more failures not shown";
}

void Harness::markBroken() {
  if (broken_) return;
  broken_ = true;
  // Tell the peers: they may be waiting for this rank inside a call.
  if (comm_ != nullptr) loomCommAbort(comm_);
  comm_ = nullptr;
}

void Harness::fail(const std::string& message) {
  if (reported_ >= kMaxReports) {
    ++suppressed_;
    return;
  }
  ++reported_;
  ADD_FAILURE() << "[" << config_.name << ", rank " << gRank << "/" << gRanks << "] " << message;
}

Span Harness::span(char* base, const Layout& layout, loomDataType_t t, size_t bytes) {
  Span s{base, layout.offset * dtypeSize(t), bytes};
  if (s.total() > capacity_ + kGuardBytes + 64) {
    fail("test bug: a span of " + std::to_string(s.total()) + " bytes exceeds the buffers");
    markBroken();  // every later step is skipped
    s.bytes = 0;
  }
  return s;
}

void Harness::poison(const Span& s) {
  if (!ok()) return;
  if (cpuReferenceMode()) {
    std::memset(s.base, kPoison, s.total());
    return;
  }
  cudaError_t e = cudaMemsetAsync(s.base, kPoison, s.total(), stream_);
  if (e != cudaSuccess) {
    fail("cudaMemsetAsync: " + cudaErrorText(e));
    markBroken();
  }
}

void Harness::upload(void* dev, const std::vector<char>& host) {
  if (!ok() || host.empty()) return;
  if (cpuReferenceMode()) {
    std::memcpy(dev, host.data(), host.size());
    return;
  }
  cudaError_t e = cudaMemcpyAsync(dev, host.data(), host.size(), cudaMemcpyHostToDevice, stream_);
  if (e != cudaSuccess) {
    fail("cudaMemcpyAsync to device: " + cudaErrorText(e));
    markBroken();
  }
}

bool Harness::call(loomResult_t result, const std::string& what) {
  if (result == loomSuccess) return true;
  fail(what + ": " + loomGetErrorString(result) + ": " + loomGetLastError(nullptr));
  markBroken();
  return false;
}

bool Harness::settle(const std::string& what, cudaStream_t other) {
  if (!ok()) return false;
  cudaStream_t stream = other != nullptr ? other : stream_;
  using Clock = std::chrono::steady_clock;
  const Clock::time_point start = Clock::now();
  for (long polls = 0;; ++polls) {
    cudaError_t e = cpuReferenceMode() ? cudaSuccess : cudaStreamQuery(stream);
    loomResult_t async = loomSuccess;
    if (e == cudaSuccess || polls % 64 == 0) {
      loomResult_t r = loomCommGetAsyncError(comm_, &async);
      // loomInProgress: work of the communicator is still under way, not an error.
      if (r != loomSuccess || (async != loomSuccess && async != loomInProgress)) {
        fail(what + ": loomCommGetAsyncError: " + loomGetErrorString(r != loomSuccess ? r : async) +
             ": " + loomGetLastError(comm_));
        markBroken();
        return false;
      }
    }
    if (e == cudaSuccess) return true;
    if (e != cudaErrorNotReady) {
      fail(what + ": stream: " + cudaErrorText(e));
      markBroken();
      return false;
    }
    if (std::chrono::duration<double>(Clock::now() - start).count() > kSettleSeconds) {
      fail(what + ": the stream did not finish within " + std::to_string(kSettleSeconds) +
           " s and no error was reported (hang)");
      markBroken();
      return false;
    }
    if (polls > 1000) std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
}

std::vector<char> Harness::fetch(const void* dev, size_t bytes) {
  std::vector<char> out(bytes);
  if (bytes == 0 || !ok()) return out;
  if (cpuReferenceMode()) {
    std::memcpy(out.data(), dev, bytes);
    return out;
  }
  cudaError_t e = cudaMemcpyAsync(out.data(), dev, bytes, cudaMemcpyDeviceToHost, stream_);
  if (e == cudaSuccess) e = cudaStreamSynchronize(stream_);
  if (e != cudaSuccess) {
    fail("cudaMemcpyAsync to host: " + cudaErrorText(e));
    markBroken();
  }
  return out;
}

void Harness::expectData(const std::vector<char>& want, const void* dev, loomDataType_t t,
                         const std::string& what) {
  if (!ok() || want.empty()) return;
  std::vector<char> got = fetch(dev, want.size());
  if (!ok() || std::memcmp(got.data(), want.data(), want.size()) == 0) return;
  const size_t esize = dtypeSize(t), count = want.size() / esize;
  size_t wrong = 0, firstWrong = count;
  for (size_t i = 0; i < count; ++i) {
    if (std::memcmp(got.data() + i * esize, want.data() + i * esize, esize) != 0) {
      ++wrong;
      firstWrong = std::min(firstWrong, i);
    }
  }
  fail(what + ": " + std::to_string(wrong) + " of " + std::to_string(count) +
       " elements wrong; first at " + std::to_string(firstWrong) + ": got " +
       elementText(got.data(), firstWrong, t) + ", want " +
       elementText(want.data(), firstWrong, t));
}

void Harness::expectGuards(const Span& s, const std::string& what) {
  if (!ok()) return;
  for (auto [offset, bytes, where] : {std::tuple{size_t{0}, s.lead, "before"},
                                      std::tuple{s.lead + s.bytes, kGuardBytes, "after"}}) {
    if (bytes == 0) continue;
    std::vector<char> got = fetch(s.base + offset, bytes);
    for (size_t i = 0; i < got.size() && ok(); ++i) {
      if (static_cast<unsigned char>(got[i]) != kPoison) {
        fail(what + ": wrote " + where + " its output (byte " + std::to_string(i) + " of " +
             std::to_string(bytes) + ")");
        break;
      }
    }
  }
}

std::string Harness::describe(const char* collective, loomDataType_t t, const char* op,
                              size_t count, const Layout& layout) const {
  std::ostringstream out;
  out << collective << " " << dtypeName(t);
  if (op != nullptr) out << " " << op;
  out << (layout.inPlace ? " in-place" : " out-of-place");
  if (layout.offset != 0) out << " offset " << layout.offset;
  out << " count " << count;
  return out.str();
}

}  // namespace loom::gputest
