// NativeEp on CUDA GPUs of one host, one process per GPU: each rank's region (cudaMalloc,
// the host paths' layout) shared with CUDA IPC and mapped into every rank's process, a
// host-mapped status word the kernels report through, and the launches of ep_normal.cu and
// ep_low_latency.cu on the caller's stream.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "device/cuda/cuda_device.hpp"
#include "device/cuda/ep/ep_kernels.hpp"
#include "device/cuda/mapped_host_memory.hpp"
#include "device/native_ep.hpp"

namespace loom {

class CudaEp final : public NativeEp {
 public:
  // Collective. Throws loomUnhandledCudaError, the same on every rank, when some rank cannot
  // map a peer's region (the caller then uses the host paths).
  CudaEp(CudaDevice& device, const NativeEpSetup& setup);
  ~CudaEp() override;
  CudaEp(const CudaEp&) = delete;
  CudaEp& operator=(const CudaEp&) = delete;

  void layout(const int64_t* topkIdx, int numTokens, int topk, int32_t* perRank, int32_t* perExpert,
              uint8_t* inRank, loomStream_t stream) override;
  void dispatchCounts(const loomEpDispatchArgs_t& a, int status, loomStream_t stream) override;
  void dispatch(const loomEpDispatchArgs_t& a, int status, loomStream_t stream) override;
  void combine(const loomEpCombineArgs_t& a, int status, loomStream_t stream) override;
  void lowLatencyDispatch(const loomEpLowLatencyDispatchArgs_t& a, int status, int slot, bool send,
                          bool receive, loomStream_t stream) override;
  void lowLatencyCombine(const loomEpLowLatencyCombineArgs_t& a, int status, int slot, bool send,
                         bool receive, loomStream_t stream) override;
  void* lowLatencyCombineBuffer(int slot, int hidden) override;
  std::pair<loomResult_t, std::string> errors() override;
  std::string describe() const override;

 private:
  cuda::ep::DispatchArgs dispatchArgs(const loomEpDispatchArgs_t& a) const;
  void release() noexcept;
  cuda::ep::EpStatus* status() const {
    return static_cast<cuda::ep::EpStatus*>(statusMemory_.host());
  }

  CudaDevice& device_;
  NativeEpSetup setup_;
  cuda::ep::EpRegions regions_{};
  char* mine_ = nullptr;      // this rank's region (cudaMalloc)
  std::vector<char*> peers_;  // the peers' regions as mapped here (closed at destruction)
  MappedHostMemory statusMemory_;
  uint64_t normalStep_ = 0;
};

std::unique_ptr<NativeEp> makeCudaEp(CudaDevice& device, const NativeEpSetup& setup);

}  // namespace loom
