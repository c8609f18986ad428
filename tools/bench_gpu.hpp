// CUDA device memory for loom-bench: buffers from cudaMalloc, one non-blocking stream per rank,
// and nccl-tests' timing (events around back-to-back launches, or around one CUDA graph that
// holds them). Everything but cudaDeviceVisible exists only in builds with CUDA.
#pragma once

#include <memory>
#include <string>

#include "bench_backend.hpp"
#include "bench_gemm.hpp"

#if LOOM_HAVE_CUDA
#include <cuda_runtime_api.h>
#endif

namespace loom::bench {

// True when this build has CUDA and the process sees a device this run may use: any, when asked
// for (--device cuda, --graph, --vs) or with LOOM_TEST_SHARE_GPU=1, else one per local rank.
bool cudaDeviceVisible(bool asked);

#if LOOM_HAVE_CUDA

// Makes device LOCAL_RANK % deviceCount current on this thread, as a GPU communicator uses the
// current device; must run before the communicator is created. Returns e.g.
// "device 1 of 4 (NVIDIA H200)".
std::string selectCudaDevice();

// Free memory of the current device (cudaMemGetInfo) and how many of this host's localRanks
// share it (ranks go to devices round-robin by local rank); 0 bytes when unknown.
size_t cudaFreeMemory(int localRanks, int* sharing);

class CudaBackend final : public Backend {
 public:
  CudaBackend(const BenchOptions& options, loomComm_t comm);
  ~CudaBackend() override;
  CudaBackend(const CudaBackend&) = delete;
  CudaBackend& operator=(const CudaBackend&) = delete;

  loomStream_t stream() const override { return stream_; }
  cudaStream_t cudaStream() const { return stream_; }
  unsigned char* sendBuffer() override { return send_; }
  unsigned char* recvBuffer() override { return recv_; }
  size_t capacity() const { return capacity_; }
  unsigned char* hostView(unsigned char* buf) override;
  void upload(unsigned char* buf, size_t bytes) override;
  void download(unsigned char* buf, size_t bytes) override;
  void synchronize() override;
  bool warmUpFirst() const override { return true; }
  double secondsPerCall(const std::function<void()>& launch) override;
  void sizeOfNextCalls(size_t bytes) override { nextBytes_ = bytes; }
  double maxOverRanks(double value) override;
  int64_t sumOverRanks(int64_t value) override;

  // Gives every rank root's `bytes` bytes at `data` (host memory), through a Loom broadcast.
  void broadcastBytes(void* data, size_t bytes, int root);

 private:
  // Returns once every rank has finished what it issued so far, so timed batches start together.
  void syncRanks();
  double timeEager(const std::function<void()>& launch);
  double timeGraph(const std::function<void()>& launch);
  // --overlap-gemm: the calls again while GEMMs run beside them; prints what each side lost.
  double timeUnderGemm(const std::function<void()>& launch, double alone);
  void checkAsyncError();
  template <typename T>
  T reduceScalar(T value, loomDataType_t dtype, loomRedOp_t redop);

  const BenchOptions& opts_;
  loomComm_t comm_;
  size_t capacity_ = 0;  // bytes of each buffer
  cudaStream_t stream_ = nullptr;
  cudaEvent_t start_ = nullptr;
  cudaEvent_t stop_ = nullptr;
  unsigned char* send_ = nullptr;
  unsigned char* recv_ = nullptr;
  loomWindow_t windows_[2] = {nullptr, nullptr};              // --window: send_ and recv_
  loomRegistration_t registrations_[2] = {nullptr, nullptr};  // --register: send_ and recv_
  unsigned char* scratch_ = nullptr;  // barrier word, reduced scalars, broadcast bytes
  // Staging for the check, allocated on its first use (runs with -c 0 never need it).
  std::unique_ptr<unsigned char[]> hostSend_;
  std::unique_ptr<unsigned char[]> hostRecv_;
  std::unique_ptr<GemmLoad> gemm_;  // --overlap-gemm
  size_t nextBytes_ = 0;
  int rank_ = 0;
};

// Loads NCCL and creates its communicator over the same ranks and devices, sharing the unique
// id through Loom; exits the process with a message when NCCL is missing or fails on any rank.
// window: NCCL gets buffers of its own, from ncclMemAlloc and registered as symmetric windows
// (its symmetric kernels' conditions), at the same offsets as Loom's. registerBuffers: NCCL
// registers Loom's buffers (ncclCommRegister).
std::unique_ptr<PeerLibrary> makeNcclPeer(CudaBackend& backend, int rank, int nranks, bool window,
                                          bool registerBuffers);

#endif  // LOOM_HAVE_CUDA

}  // namespace loom::bench
