// The GPU side of a communicator whose ranks own CUDA devices: the peer windows
// (peer_windows.hpp), the kernels' sequence counters and status words, the launches of every
// collective on the caller's stream, and a watchdog thread that turns a dead peer or a host-side
// abort into kernels that stop, and a kernel's timeout into the communicator's error. Calls on
// buffers in registered windows (user_windows.hpp) or registered on every rank
// (local_registrations.hpp) run zero-copy kernels or copy-engine transfers instead
// (cuda_engine_windows.cpp).
#pragma once

#include <atomic>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "base/error.hpp"
#include "device/cuda/collectives/dev_comm.hpp"
#include "device/cuda/collectives/exchange.hpp"
#include "device/cuda/collectives/zero_copy.hpp"
#include "device/cuda/cuda_device.hpp"
#include "device/cuda/cuda_driver.hpp"
#include "device/cuda/cuda_plans.hpp"
#include "device/cuda/ipc_imports.hpp"
#include "device/cuda/kernel_timer.hpp"
#include "device/cuda/local_registrations.hpp"
#include "device/cuda/mapped_host_memory.hpp"
#include "device/cuda/memory_exports.hpp"
#include "device/cuda/peer_windows.hpp"
#include "device/cuda/user_windows.hpp"
#include "device/native.hpp"

namespace loom {

// The CUDA backend's native collectives: for every collective "ll" (LL packets, one network
// step; allreduce is one-shot) and "simple" (bulk chunks with flags; allreduce is two-shot
// reduce-scatter + all-gather), with the selector rows measured for them; for allgather and
// alltoall also "ce" (copy engines, no kernel; only on registered windows).
class CudaEngine final : public NativeCollectives {
 public:
  enum class Protocol { kLL, kSimple, kCopyEngine };

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
  bool registerWindow(uint64_t id, void* ptr, size_t bytes, std::string& why) override;
  void deregisterWindow(uint64_t id) override;
  bool registerBuffer(uint64_t id, void* ptr, size_t bytes, std::string& why) override;
  void deregisterBuffer(uint64_t id) override;
  std::string describeCall(int algorithm, const CollArgs& args) const override;
  void setTimeline(DeviceTimeline* timeline) override;
  void setCallNumber(uint64_t call) override { callNumber_.store(call); }
  // Execution plans, run by the plan-interpreting kernel (cuda_engine_plans.cpp).
  bool runsPlans() const override { return true; }
  int loadPlan(const NativePlan& plan, std::string& why) override;
  void runPlan(int plan, const CollArgs& args, const NativePlanCall& call) override;

 private:
  struct Placement;
  Placement place(const void* ptr, size_t bytes) const;
  // A call's zero-copy kernel arguments, for calls whose buffers lie in registered windows or
  // buffers; none when they do not (all) lie there. `what`, where given: the plan in words.
  struct WindowPlan {
    cuda::ZeroCopyArgs args{};
    bool reduce = false;
  };
  std::optional<WindowPlan> planOnWindows(const CollArgs& call, std::string* what) const;
  // planOnWindows' parts: the draft it fills, and one planner per collective family; each is
  // false when the call's buffers do not allow a plan.
  struct WindowDraft;
  bool planCopyOnWindows(WindowDraft& d) const;  // allgather, alltoall
  bool planReduceScatterOnWindows(WindowDraft& d) const;
  bool planAllReduceOnWindows(WindowDraft& d) const;
  // Runs planOnWindows' plan: zero-copy kernels, or the copy engines where the selector chose
  // "ce". False when there is none.
  bool runOnWindows(Protocol protocol, const CollArgs& call, cudaStream_t stream);
  // Whether a window plan runs on the copy engines: "ce" chosen, a copy (not a reduction) between
  // windows (the host knows no peer's buffer registered alone), and an eager call (the copy
  // engines' host-side sequence numbers cannot replay in a graph). Part of describeCall: ranks
  // that decide differently would wait for each other for ever.
  bool onCopyEngines(Protocol protocol, const WindowPlan& plan, cudaStream_t stream) const;
  void runCopyEngine(const cuda::ZeroCopyArgs& args, cudaStream_t stream);
  // The copy-engine handshake word of rank `owner`'s window for `phase` (0 arrive, 1 depart)
  // and source rank `source`, as mapped here.
  uint64_t* ceFlag(int owner, int phase, int source) const;
  // Watchdog: a copy-engine call's stream waits that can no longer end (dead peer, timeout,
  // abort) are released, so that the stream drains and the error reaches the caller.
  void watchCopyEngine();
  // Watchdog: maps the peers' new registrations (a kernel may be waiting for one) and unmaps
  // those they withdrew.
  void watchRegistrations();
  void releaseCopyEngineWaits();
  // Collectives of one communicator run in issue order even across streams, as NCCL's do: a
  // call on another stream than the last one's first waits for the last call's end (beginCall),
  // which every call records on its stream (endCall). An event carries the order, not the last
  // stream: the caller may destroy a stream between calls. Calls into a graph being captured
  // take no part (see beginCall).
  struct CallStream {
    cudaStream_t stream;
    bool captured;
  };
  CallStream beginCall(loomStream_t stream);
  void endCall(const CallStream& call);
  // body(call) between beginCall and endCall; a body that fails after launching keeps what it
  // launched in the order.
  // `name` (static): the call's device span when traced (LOOM_TRACE, kernel_timer.hpp).
  template <typename Body>
  void inCallOrder(loomStream_t stream, const char* name, Body&& body) {
    const CallStream call = beginCall(stream);
    const int timed = !call.captured && timer_.active() ? timer_.begin(call.stream) : -1;
    try {
      body(call);
    } catch (...) {
      timer_.end(timed, name, callNumber_.load(), call.stream);
      endCall(call);
      throw;
    }
    timer_.end(timed, name, callNumber_.load(), call.stream);
    endCall(call);
  }
  // run()'s and pointToPoint()'s work, between beginCall and endCall.
  void enqueue(int algorithm, const CollArgs& call, cudaStream_t stream);
  void enqueuePointToPoint(const std::vector<DeviceP2POp>& ops, cudaStream_t stream);
  void launchExchange(const cuda::ExchangeArgs& args, bool reduce, const CollArgs& call,
                      Protocol protocol, cudaStream_t stream);
  void barrier(cudaStream_t stream);
  void enqueuePlan(CudaPlan& plan, const CollArgs& args, const NativePlanCall& call,
                   const CallStream& on);
  // How a plan call runs (protocol, blocks): from the call and plan-wide figures alone, so the
  // same on every rank.
  struct PlanCallShape {
    bool ll = false;
    uint32_t payload = 0;
    int groups = 1, slices = 1, threads = cuda::kThreads;
  };
  PlanCallShape planCallShape(const NativePlan& plan, const CollArgs& args, uint32_t parts) const;
  void fitSharedGpus();
  // The constructor's steps, in its order: the algorithms offered; the windows every rank maps;
  // device counters, status and events; the LOOM_CUDA_WINDOW* options; the sharing of registered
  // buffers; whether the copy engines are usable (the same answer on every rank); the table the
  // kernels read.
  void listAlgorithms();
  void setUpPeerWindows();
  void allocateDeviceState(size_t counterWords);
  void readWindowOptions();
  void setUpBufferSharing();
  void probeCopyEngines();
  void fillDevComm(size_t counterWords);
  void watch();
  // False, from then on, once the device's CUDA context is gone (cudaDeviceReset, the runtime's
  // teardown at exit): the watchdog stops and calls fail instead of using stale resources.
  bool watchContext(uint64_t tick);
  void checkContext() const;
  int blocksFor(size_t bytes, Protocol protocol) const;
  // The block size of an LL kernel whose largest transfer of `bytes` is split over `blocks`.
  static int llThreads(size_t bytes, int blocks);

  CudaDevice& device_;
  NativeSetup setup_;
  std::vector<NativeAlgorithm> algorithms_;
  std::vector<Protocol> protocols_;  // of algorithms_
  cuda::WindowLayout layout_;
  PeerWindows windows_;
  cuda::DevComm dev_{};
  uint64_t* counters_ = nullptr;  // device memory: sent and received sequence numbers
  MappedHostMemory statusMemory_;
  cuda::DevStatus* status_ = nullptr;   // in statusMemory_: host view
  char* barrierScratch_ = nullptr;      // device memory for loomBarrier's token allreduce
  int maxBlocks_ = cuda::kMaxBlocks;    // grid of a collective kernel, at most
  int p2pBlocks_ = cuda::kP2PChannels;  // grid of a send/recv kernel
  int planMaxBlocks_ = 1;               // grid of the plan kernel, all resident at once

  std::vector<char> p2pTaken_;                    // pointToPoint's scratch
  std::vector<std::unique_ptr<CudaPlan>> plans_;  // loadPlan's, by index

  CudaDriver driver_;
  // Outlive both users below: how this rank shares its buffers, and the peers' it mapped.
  std::unique_ptr<MemoryExports> exports_;
  std::unique_ptr<IpcImports> imports_;
  std::unique_ptr<UserWindows> userWindows_;
  std::unique_ptr<LocalRegistrations> registrations_;
  bool windowsEnabled_ = true;   // LOOM_CUDA_WINDOWS
  size_t windowMinBytes_ = 0;    // LOOM_CUDA_WINDOW_MIN_BYTES
  size_t oneShotMaxBytes_ = 0;   // LOOM_CUDA_ONESHOT_MAX_BYTES (-1: SIZE_MAX)
  uint64_t planLLMaxBytes_ = 0;  // LOOM_CUDA_PLAN_LL_MAX_BYTES
  uint64_t planSliceBytes_ = 0;  // LOOM_CUDA_PLAN_SLICE_BYTES
  int planPartGroups_ = 0;       // LOOM_CUDA_PLAN_PART_GROUPS (0: as many as parts)
  bool ceUsable_ = false;        // stream memory operations on peer windows
  uint64_t ceSeq_ = 0;           // copy-engine calls so far (the same count on every rank)
  cudaEvent_t ceDone_ = nullptr;
  cudaStream_t rescueStream_ = nullptr;
  std::atomic<uint64_t> ceIssuedNs_{0};  // when the last copy-engine call was enqueued; 0: none
  std::atomic<bool> ceReleased_{false};

  // cudaStreamGetId's: unique for the process's life, where a destroyed stream's handle may come
  // back for a new stream whose work must still wait.
  unsigned long long lastStreamId_ = 0;
  cudaEvent_t lastEnd_ = nullptr;  // recorded at the end of the last eager call
  bool lastEndRecorded_ = false;   // false: no eager call yet

  KernelTimer timer_;                    // LOOM_TRACE: the calls' device spans
  std::atomic<uint64_t> callNumber_{0};  // the communicator's number of the next call
  std::atomic<bool> contextLost_{false};
  std::mutex watchMutex_;
  std::condition_variable watchWake_;
  bool stopWatch_ = false;
  std::thread watchdog_;
};

}  // namespace loom
