// ProcessGroupLoom: Loom as a torch.distributed backend (c10d::Backend): CPU and CUDA tensors, and
// tensors of any torch device type a loaded Loom device plug-in serves (device_work.hpp).
//
// Communicators bootstrap through the c10d store torch gives the backend (the lowest rank puts a
// Loom unique id). CPU tensors: the group's host communicator, made at construction; every
// collective is queued to one worker thread and runs there in issue order, Gloo style; sends and
// receives are posted to Loom at once (loomIsend/loomIrecv) and progress together on Loom's
// point-to-point thread in any order of posting, beside the collectives. A Work completes (with a
// completed future holding the outputs) when its op has run (loom_work.hpp). Coalescing
// (startCoalescing .. endCoalescing): on CPU the ops run as they come and one Work covers them; on
// CUDA they are enqueued at the end as one Loom group on the stream. CUDA tensors: a communicator
// on the rank's device, made at the first CUDA op (or eagerly when torch binds the group to a
// device); ops are enqueued on its stream from the calling thread, NCCL style (cuda_work.hpp).
// A plug-in's device (a PrivateUse1 device such as "loomemu", or "xpu"): the same, on a
// communicator of the plug-in's kind, through torch's device-generic streams and events. A
// failed op raises from wait() naming the op, the group and the cause, and leaves the communicator
// aborted: later ops fail at once instead of hanging.
//
// Mixed-device groups: at construction the ranks all-gather their home device (a GPU where this
// build serves CUDA and one is visible, else torch's current accelerator where a loaded plug-in
// serves its type, else the CPU; LOOM_TORCH_HOME_DEVICE overrides). If the homes differ, one
// heterogeneous Loom communicator with each rank's home device (split off the host one) serves
// every op of the group: GPU ranks pass CUDA tensors (on Loom's stream, as above) or CPU tensors
// (run at once on the calling thread, so that the group's ops keep their order; Loom runs them on
// device scratch), plug-in ranks pass their device's tensors (on Loom's stream), CPU ranks pass
// CPU tensors (the worker, as above).
#pragma once

#include <atomic>
#include <condition_variable>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <torch/csrc/distributed/c10d/Backend.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>
#include <vector>

#include "cuda_work.hpp"
#include "device_work.hpp"
#include "loom/loom.h"
#include "loom_work.hpp"

namespace loom::torchbackend {

// The group's options. Copyable from Python (__deepcopy__): torch 2.11's split_group deep-copies
// the parent's options, which the base Options binding cannot do.
struct LoomOptions : c10d::Backend::Options {
  explicit LoomOptions(std::chrono::milliseconds timeout) : Options("loom", timeout) {}
};

class ProcessGroupLoom : public c10d::Backend {
 public:
  // profilingPrefix: the name of the backend in torch's profiler events ("loom:all_reduce").
  ProcessGroupLoom(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
                   std::chrono::milliseconds timeout, std::string profilingPrefix = "loom");
  // A split's child: adopts the communicators loomCommSplit made (cudaComm may be null).
  struct SplitChild {
    loomComm_t hostComm = nullptr;
    loomComm_t cudaComm = nullptr;
    at::Device cudaDevice{at::kCPU};
    loomComm_t deviceComm = nullptr;  // a plug-in device's
    at::Device device{at::kCPU};
    std::string kind;
    std::string profilingPrefix = "loom";
  };
  ProcessGroupLoom(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
                   std::chrono::milliseconds timeout, const SplitChild& child);
  ~ProcessGroupLoom() override;

  const std::string getBackendName() const override { return "loom"; }
  c10::intrusive_ptr<Options> getBackendOptions() override;
  // Sub-groups split the parent's communicators (loomCommSplit): no new rendezvous.
  // Mixed-device groups make sub-groups through the store instead: each new group finds out
  // for itself whether its members' homes differ.
  bool supportsSplitting() const override { return !mixed_; }
  c10::intrusive_ptr<c10d::Backend> split(const c10::intrusive_ptr<c10d::Store>& store,
                                          const std::vector<int>& ranks,
                                          const c10::intrusive_ptr<Options>& opts) override;
  void eagerConnectSingleDevice(at::Device device) override;
  bool supportsCoalescing() const override { return true; }
  void startCoalescing() override;
  c10::intrusive_ptr<c10d::Work> endCoalescing() override;
  // Not marked override: older torch versions lack the hook (it then is never called). Applies to
  // Work.wait() and to groups split off later; a communicator's own deadline is fixed at its init.
  void setTimeout(std::chrono::milliseconds timeout);
  void setSequenceNumberForGroup() override {}
  uint64_t getSequenceNumberForGroup() override { return sequence_.load(); }

  c10::intrusive_ptr<c10d::Work> broadcast(std::vector<at::Tensor>& tensors,
                                           const c10d::BroadcastOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allreduce(std::vector<at::Tensor>& tensors,
                                           const c10d::AllreduceOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allreduce_coalesced(
      std::vector<at::Tensor>& tensors, const c10d::AllreduceCoalescedOptions& opts) override;
  // Sparse COO tensors, CPU, sum: indices and values of every rank gathered and summed, as Gloo.
  c10::intrusive_ptr<c10d::Work> allreduce_sparse(std::vector<at::Tensor>& tensors,
                                                  const c10d::AllreduceOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> reduce(std::vector<at::Tensor>& tensors,
                                        const c10d::ReduceOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allgather(std::vector<std::vector<at::Tensor>>& outputs,
                                           std::vector<at::Tensor>& inputs,
                                           const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> _allgather_base(at::Tensor& output, at::Tensor& input,
                                                 const c10d::AllgatherOptions& opts) override;
  // outputTensorLists[r][i] receives rank r's inputs[i].
  c10::intrusive_ptr<c10d::Work> allgather_coalesced(
      std::vector<std::vector<at::Tensor>>& outputTensorLists, std::vector<at::Tensor>& inputs,
      const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allgather_into_tensor_coalesced(
      std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
      const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> gather(std::vector<std::vector<at::Tensor>>& outputs,
                                        std::vector<at::Tensor>& inputs,
                                        const c10d::GatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> scatter(std::vector<at::Tensor>& outputs,
                                         std::vector<std::vector<at::Tensor>>& inputs,
                                         const c10d::ScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> reduce_scatter(std::vector<at::Tensor>& outputs,
                                                std::vector<std::vector<at::Tensor>>& inputs,
                                                const c10d::ReduceScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> _reduce_scatter_base(
      at::Tensor& output, at::Tensor& input, const c10d::ReduceScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> reduce_scatter_tensor_coalesced(
      std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
      const c10d::ReduceScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> alltoall_base(at::Tensor& output, at::Tensor& input,
                                               std::vector<int64_t>& outputSplits,
                                               std::vector<int64_t>& inputSplits,
                                               const c10d::AllToAllOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> alltoall(std::vector<at::Tensor>& outputs,
                                          std::vector<at::Tensor>& inputs,
                                          const c10d::AllToAllOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> send(std::vector<at::Tensor>& tensors, int dstRank,
                                      int tag) override;
  c10::intrusive_ptr<c10d::Work> recv(std::vector<at::Tensor>& tensors, int srcRank,
                                      int tag) override;
  // CPU tensors: the first message with the tag from any rank (Work.source_rank() tells which).
  c10::intrusive_ptr<c10d::Work> recvAnysource(std::vector<at::Tensor>& tensors, int tag) override;
  c10::intrusive_ptr<c10d::Work> barrier(const c10d::BarrierOptions& opts) override;

  void shutdown() override;
  // Stops the communicator now (ops in flight and queued fail instead of waiting for peers).
  void abort() override;

 private:
  // A Loom call (or several) of one op, given the communicator and stream (null: host) to use.
  using Body = std::function<void(loomComm_t comm, void* stream)>;
  // Runs body for the device of `tensors`: CPU on the worker, CUDA or a plug-in's device on
  // Loom's stream.
  // inputs: what the profiler records (default: tensors).
  c10::intrusive_ptr<c10d::Work> launch(
      c10d::OpType type, const char* name, const std::vector<at::Tensor>& tensors,
      std::vector<at::Tensor> outputs, Body body,
      const std::optional<std::vector<at::Tensor>>& inputs = std::nullopt);
  // CPU sends and receives (peer LOOM_ANY_SOURCE: a receive from any rank).
  c10::intrusive_ptr<c10d::Work> pointToPoint(c10d::OpType type, const char* name,
                                              std::vector<at::Tensor>& tensors, int peer, int tag);
  c10::intrusive_ptr<c10d::Work> sparseAllreduce(const at::Tensor& tensor,
                                                 const c10d::ReduceOp& op);
  // A Work of an op issued while coalescing on CPU: kept for endCoalescing.
  c10::intrusive_ptr<c10d::Work> coalesced(c10::intrusive_ptr<c10d::Work> work);
  c10::intrusive_ptr<c10d::Work> enqueue(
      c10d::OpType type, const char* name, std::vector<at::Tensor> outputs,
      std::function<void()> body,
      const std::optional<std::vector<at::Tensor>>& inputs = std::nullopt);
  // "loom:all_reduce" for type (empty: not recorded).
  std::string profilingTitle(c10d::OpType type) const;
  void work();
  // A unique id shared through the store under key (made by the group's rank 0).
  loomUniqueId sharedId(const std::string& key);
  // The ranks' home devices differ: comm_ becomes the heterogeneous communicator (see above).
  void adoptHomeDevices();
  // Enqueues body on Loom's stream of `device` (CUDA, or a plug-in's device).
  c10::intrusive_ptr<c10d::Work> launchOnStream(at::Device device, c10d::OpType type,
                                                const char* name,
                                                const std::vector<at::Tensor>& tensors,
                                                std::vector<at::Tensor> outputs, const Body& body);
  // The communicator of a plug-in's device, made at its first op (one device per group).
  const DeviceComm& deviceComm(at::Device device);
  bool mixed_ = false;
  bool cudaHome_ = false;    // mixed_: this rank's home is a GPU (cuda_ holds comm_ too)
  bool deviceHome_ = false;  // mixed_: its home is a plug-in's device (device_ holds comm_ too)
  std::mutex deviceMutex_;
  std::unique_ptr<DeviceComm> device_;
#ifdef LOOM_TORCH_CUDA
  const CudaComm& cudaComm(at::Device device);
  std::mutex cudaMutex_;
  std::unique_ptr<CudaComm> cuda_;
#endif

  c10::intrusive_ptr<c10d::Store> store_;
  std::string profilingPrefix_ = "loom";
  std::chrono::milliseconds timeout_;
  std::atomic<uint64_t> sequence_{0};
  std::mutex splitMutex_;
  // Children by group name: torch asks once per device type for the same split.
  std::map<std::string, c10::intrusive_ptr<c10d::Backend>> splits_;
  loomComm_t comm_ = nullptr;
  std::atomic<bool> aborted_{false};
  std::mutex mutex_;
  std::condition_variable wake_;
  std::deque<std::function<void()>> queue_;
  bool stopping_ = false;
  std::thread worker_;
  // Coalescing (one thread issues a coalesced batch, as torch does).
  std::mutex coalesceMutex_;
  bool coalescing_ = false;
  std::vector<c10::intrusive_ptr<c10d::Work>> coalescedWorks_;  // CPU ops
  struct PendingOnStream {
    std::vector<at::Tensor> tensors;
    std::vector<at::Tensor> outputs;
    Body body;
  };
  std::vector<PendingOnStream> coalescedOnStream_;  // device ops, enqueued together at the end
  at::Device coalescedDevice_{at::kCPU};
};

}  // namespace loom::torchbackend
