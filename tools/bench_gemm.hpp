// loom-bench --overlap-gemm: bf16 GEMMs (cuBLAS) on a stream of their own, the compute that
// collectives compete with during training. cuBLAS is found at run time with dlopen, as NCCL is
// (nccl_loader.hpp): the build never needs it, and only runs that ask for the overlap load it.
#pragma once

#include <memory>
#include <string>

#if LOOM_HAVE_CUDA
#include <cuda_runtime_api.h>
#endif

namespace loom::bench {

#if LOOM_HAVE_CUDA

struct CublasApi;

class GemmLoad {
 public:
  // N x N bf16 matrices on the current device and a non-blocking stream; exits the process with
  // a message when cuBLAS cannot be loaded or the memory is not there.
  explicit GemmLoad(int n);
  ~GemmLoad();
  GemmLoad(const GemmLoad&) = delete;
  GemmLoad& operator=(const GemmLoad&) = delete;

  // Enqueues `count` GEMMs between two events on the GEMM stream; returns at once.
  void start(int count);
  // Waits for the last start() and returns the seconds its GEMMs took on the device.
  double finish();
  // The started chain's end relative to another event of the same device (seconds; positive when
  // the chain ended later).
  double endsAfter(cudaEvent_t other) const;
  double flopsPerGemm() const { return 2.0 * n_ * n_ * n_; }
  int n() const { return n_; }

 private:
  int n_;
  std::unique_ptr<CublasApi> api_;
  void* handle_ = nullptr;  // cublasHandle_t
  cudaStream_t stream_ = nullptr;
  cudaEvent_t start_ = nullptr, stop_ = nullptr;
  void* a_ = nullptr;
  void* b_ = nullptr;
  void* c_ = nullptr;
};

#endif  // LOOM_HAVE_CUDA

}  // namespace loom::bench
