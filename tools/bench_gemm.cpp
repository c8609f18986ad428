#include "bench_gemm.hpp"

#if LOOM_HAVE_CUDA

#include <dlfcn.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <random>
#include <vector>

namespace loom::bench {

// The few cuBLAS entry points and values the load uses, with cuBLAS's ABI (cublas_api.h,
// library_types.h), so that the build needs no cuBLAS header.
struct CublasApi {
  void* lib = nullptr;
  std::string path;
  int (*create)(void** handle) = nullptr;
  int (*destroy)(void* handle) = nullptr;
  int (*setStream)(void* handle, cudaStream_t stream) = nullptr;
  int (*gemmEx)(void* handle, int transa, int transb, int m, int n, int k, const void* alpha,
                const void* a, int aType, int lda, const void* b, int bType, int ldb,
                const void* beta, void* c, int cType, int ldc, int computeType, int algo) = nullptr;
  static constexpr int kOpN = 0;           // CUBLAS_OP_N
  static constexpr int kBf16 = 14;         // CUDA_R_16BF
  static constexpr int kCompute32F = 68;   // CUBLAS_COMPUTE_32F
  static constexpr int kDefaultAlgo = -1;  // CUBLAS_GEMM_DEFAULT
};

namespace {

[[noreturn]] void fail(const std::string& what) {
  std::fprintf(stderr, "loom-bench: --overlap-gemm: %s\n", what.c_str());
  std::exit(1);
}

void check(cudaError_t err, const char* call) {
  if (err != cudaSuccess) fail(std::string(call) + " failed: " + cudaGetErrorString(err));
}

template <typename Fn>
void resolve(CublasApi& api, const char* symbol, Fn* fn) {
  void* address = dlsym(api.lib, symbol);
  if (address == nullptr) fail(api.path + " has no " + symbol);
  *fn = reinterpret_cast<Fn>(address);
}

std::unique_ptr<CublasApi> loadCublas() {
  auto api = std::make_unique<CublasApi>();
  std::string reasons;
  const char* override = std::getenv("LOOM_BENCH_CUBLAS");
  for (const char* candidate : {override, "libcublas.so.13", "libcublas.so.12", "libcublas.so"}) {
    if (candidate == nullptr || *candidate == '\0') continue;
    api->lib = dlopen(candidate, RTLD_NOW | RTLD_LOCAL);
    if (api->lib != nullptr) {
      api->path = candidate;
      break;
    }
    const char* why = dlerror();
    reasons += std::string("\n  ") + candidate + ": " + (why != nullptr ? why : "not found");
  }
  if (api->lib == nullptr)
    fail(
        "cannot load cuBLAS (add its directory to LD_LIBRARY_PATH, or set LOOM_BENCH_CUBLAS to "
        "the library's path):" +
        reasons);
  resolve(*api, "cublasCreate_v2", &api->create);
  resolve(*api, "cublasDestroy_v2", &api->destroy);
  resolve(*api, "cublasSetStream_v2", &api->setStream);
  resolve(*api, "cublasGemmEx", &api->gemmEx);
  return api;
}

}  // namespace

GemmLoad::GemmLoad(int n) : n_(n), api_(loadCublas()) {
  check(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "cudaStreamCreate");
  check(cudaEventCreate(&start_), "cudaEventCreate");
  check(cudaEventCreate(&stop_), "cudaEventCreate");
  const size_t elements = static_cast<size_t>(n) * static_cast<size_t>(n);
  // Random inputs: a GEMM of constant matrices draws less power than real ones, so the GPU keeps
  // higher clocks than it would in training. Values in [-1/64, 1/64): the sums stay finite.
  std::vector<uint16_t> host(elements);
  std::mt19937 rng(12345);
  std::uniform_real_distribution<float> value(-1.0f / 64, 1.0f / 64);
  for (uint16_t& h : host) {
    const float f = value(rng);
    uint32_t bits;
    std::memcpy(&bits, &f, sizeof(bits));
    h = static_cast<uint16_t>(bits >> 16);  // bf16: the float's upper half
  }
  for (void** m : {&a_, &b_, &c_}) {
    check(cudaMalloc(m, elements * 2), "cudaMalloc (the GEMM's matrices)");
    check(cudaMemcpy(*m, host.data(), elements * 2, cudaMemcpyHostToDevice), "cudaMemcpy");
  }
  if (api_->create(&handle_) != 0) fail("cublasCreate failed");
  if (api_->setStream(handle_, stream_) != 0) fail("cublasSetStream failed");
  start(2);  // cuBLAS picks and loads its kernel on the first calls
  finish();
}

GemmLoad::~GemmLoad() {
  cudaStreamSynchronize(stream_);
  if (handle_ != nullptr) api_->destroy(handle_);
  for (void* m : {a_, b_, c_}) cudaFree(m);
  cudaEventDestroy(stop_);
  cudaEventDestroy(start_);
  cudaStreamDestroy(stream_);
  // cuBLAS stays loaded (no dlclose): unloading it while the CUDA runtime runs is not worth it.
}

void GemmLoad::start(int count) {
  const float alpha = 1.0f, beta = 0.0f;
  check(cudaEventRecord(start_, stream_), "cudaEventRecord");
  for (int i = 0; i < count; ++i) {
    if (api_->gemmEx(handle_, CublasApi::kOpN, CublasApi::kOpN, n_, n_, n_, &alpha, a_,
                     CublasApi::kBf16, n_, b_, CublasApi::kBf16, n_, &beta, c_, CublasApi::kBf16,
                     n_, CublasApi::kCompute32F, CublasApi::kDefaultAlgo) != 0)
      fail("cublasGemmEx failed");
  }
  check(cudaEventRecord(stop_, stream_), "cudaEventRecord");
}

double GemmLoad::finish() {
  check(cudaEventSynchronize(stop_), "cudaEventSynchronize");
  float ms = 0;
  check(cudaEventElapsedTime(&ms, start_, stop_), "cudaEventElapsedTime");
  return ms * 1e-3;
}

double GemmLoad::endsAfter(cudaEvent_t other) const {
  float ms = 0;
  check(cudaEventElapsedTime(&ms, other, stop_), "cudaEventElapsedTime");
  return ms * 1e-3;
}

}  // namespace loom::bench

#endif  // LOOM_HAVE_CUDA
