// The GPU side of a communicator whose ranks own CUDA devices: the peer windows (cuda_ipc
// transport), the kernels' sequence counters and status words, the launches of every collective
// on the caller's stream, and a watchdog thread that turns a dead peer or a host-side abort into
// kernels that stop, and a kernel's timeout into the communicator's error.
#pragma once

#include <condition_variable>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "base/error.hpp"
#include "device/cuda/collectives/dev_comm.hpp"
#include "device/cuda/collectives/exchange.hpp"
#include "device/cuda/cuda_device.hpp"
#include "device/cuda/peer_windows.hpp"
#include "device/native.hpp"

namespace loom {

// The CUDA backend's native collectives: for every collective "ll" (LL packets, one network
// step; allreduce is one-shot) and "simple" (bulk chunks with flags; allreduce is two-shot
// reduce-scatter + all-gather), with the selector rows measured for them.
class CudaEngine final : public NativeCollectives {
 public:
  enum class Protocol { kLL, kSimple };

  CudaEngine(CudaDevice& device, const NativeSetup& setup);
  ~CudaEngine() override;
  CudaEngine(const CudaEngine&) = delete;
  CudaEngine& operator=(const CudaEngine&) = delete;

  const std::vector<NativeAlgorithm>& algorithms() const override { return algorithms_; }
  std::vector<NativeSelectorRow> selectorRows() const override;
  void run(int algorithm, const CollArgs& args) override;
  void pointToPoint(const std::vector<DeviceP2POp>& ops, loomStream_t stream) override;
  void stop() override;
  std::string describe() const override;

 private:
  cudaStream_t orderStream(loomStream_t stream);
  void launchExchange(const cuda::ExchangeArgs& args, bool reduce, const CollArgs& call,
                      Protocol protocol, cudaStream_t stream);
  void barrier(cudaStream_t stream);
  void fitSharedGpus();
  void watch();
  int blocksFor(size_t bytes, Protocol protocol) const;

  CudaDevice& device_;
  NativeSetup setup_;
  std::vector<NativeAlgorithm> algorithms_;
  std::vector<Protocol> protocols_;  // of algorithms_
  cuda::WindowLayout layout_;
  PeerWindows windows_;
  cuda::DevComm dev_{};
  uint64_t* counters_ = nullptr;        // device memory: sent and received sequence numbers
  cuda::DevStatus* status_ = nullptr;   // pinned, mapped: host view
  char* barrierScratch_ = nullptr;      // device memory for loomBarrier's token allreduce
  int maxBlocks_ = cuda::kMaxBlocks;    // grid of a collective kernel, at most
  int p2pBlocks_ = cuda::kP2PChannels;  // grid of a send/recv kernel

  std::vector<char> p2pTaken_;  // pointToPoint's scratch

  cudaStream_t lastStream_ = nullptr;
  bool haveLastStream_ = false;
  cudaEvent_t streamSwitch_ = nullptr;

  std::mutex watchMutex_;
  std::condition_variable watchWake_;
  bool stopWatch_ = false;
  std::thread watchdog_;
};

}  // namespace loom
