// The GPU side of a communicator whose ranks own CUDA devices: the peer windows (cuda_ipc
// transport), the kernels' sequence counters and status words, the launches of every collective
// on the caller's stream, and a watchdog thread that turns a dead peer or a host-side abort into
// kernels that stop, and a kernel's timeout into the communicator's error.
#pragma once

#include <atomic>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "algorithms/context.hpp"
#include "base/error.hpp"
#include "device/cuda/collectives/dev_comm.hpp"
#include "device/cuda/collectives/exchange.hpp"
#include "device/cuda/cuda_device.hpp"
#include "transport/cuda_ipc/peer_windows.hpp"

namespace loom {

struct CudaEngineSetup {
  int rank = 0;
  int nranks = 1;
  int64_t timeoutMs = 0;
  std::function<std::vector<std::string>(const std::string&)> allGather;
  // Thread-safe: the reason this rank must stop (a dead peer, a peer's abort), if any.
  std::function<std::optional<Error>()> peerFailure;
  // Thread-safe: records a failure as the communicator's (aborts it, tells the peers).
  std::function<void(const Error&)> fail;
  const std::atomic<bool>* aborted = nullptr;  // the communicator's abort flag
};

class CudaEngine {
 public:
  enum class Protocol { kLL, kSimple };

  CudaEngine(CudaDevice& device, const CudaEngineSetup& setup);
  ~CudaEngine();
  CudaEngine(const CudaEngine&) = delete;
  CudaEngine& operator=(const CudaEngine&) = delete;

  // Throws loomInvalidArgument when a buffer the call would touch is not memory this GPU's
  // kernels can use.
  void validateBuffers(const CollArgs& args) const;
  void validateBuffer(const void* ptr, size_t bytes, const char* name) const;
  // Enqueues the collective on args.stream (returns before it ran).
  void run(const CollArgs& args, Protocol protocol);
  // Enqueues a group's sends and receives (already validated) on `stream`.
  void pointToPoint(const std::vector<DeviceP2POp>& ops, void* stream);
  // Makes every kernel of this communicator stop (waits give up) and keeps them stopping.
  void stopKernels();
  const char* transportName() const { return windows_.transportName(); }
  size_t slotBytes() const { return layout_.slotBytes; }

 private:
  cudaStream_t orderStream(void* stream);
  void launchExchange(const cuda::ExchangeArgs& args, bool reduce, const CollArgs& call,
                      Protocol protocol, cudaStream_t stream);
  void watch();
  int blocksFor(size_t bytes, Protocol protocol) const;

  CudaDevice& device_;
  CudaEngineSetup setup_;
  cuda::WindowLayout layout_;
  PeerWindows windows_;
  cuda::DevComm dev_{};
  uint64_t* counters_ = nullptr;       // device memory: sent and received sequence numbers
  cuda::DevStatus* status_ = nullptr;  // pinned, mapped: host view
  char* barrierScratch_ = nullptr;     // device memory for loomBarrier's token allreduce
  int maxBlocks_ = cuda::kMaxBlocks;

  static constexpr size_t kValidatedCache = 16;
  mutable const void* validated_[kValidatedCache] = {};

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
