// ProcessGroupLoom: Loom as a torch.distributed backend (c10d::Backend), CPU and CUDA tensors.
//
// Communicators bootstrap through the c10d store torch gives the backend (the lowest rank puts a
// Loom unique id). CPU tensors: the group's host communicator, made at construction; every op is
// queued to one worker thread and runs there in issue order, Gloo style; its Work completes (with
// a completed future holding the outputs) when the op has run. CUDA tensors: a communicator on the
// rank's device, made at the first CUDA op (or eagerly when torch binds the group to a device);
// ops are enqueued on its stream from the calling thread, NCCL style (cuda_work.hpp). A failed op
// raises from wait() naming the op, the group and the cause, and leaves the communicator aborted:
// later ops fail at once instead of hanging.
#pragma once

#include <atomic>
#include <condition_variable>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <torch/csrc/distributed/c10d/Backend.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>
#include <vector>

#include "cuda_work.hpp"
#include "loom/loom.h"

namespace loom::torchbackend {

class LoomWork : public c10d::Work {
 public:
  LoomWork(int rank, c10d::OpType type, const char* name, std::vector<at::Tensor> outputs);
  bool wait(std::chrono::milliseconds timeout) override;
  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override;
  // Called by the worker once the op ran (error: null on success).
  void complete(std::exception_ptr error);

 private:
  std::string name_;
  std::vector<at::Tensor> outputs_;
  c10::intrusive_ptr<c10::ivalue::Future> future_;
};

// The group's options. Copyable from Python (__deepcopy__): torch 2.11's split_group deep-copies
// the parent's options, which the base Options binding cannot do.
struct LoomOptions : c10d::Backend::Options {
  explicit LoomOptions(std::chrono::milliseconds timeout) : Options("loom", timeout) {}
};

class ProcessGroupLoom : public c10d::Backend {
 public:
  ProcessGroupLoom(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
                   std::chrono::milliseconds timeout);
  // A split's child: adopts the communicators loomCommSplit made (cudaComm may be null).
  struct SplitChild {
    loomComm_t hostComm = nullptr;
    loomComm_t cudaComm = nullptr;
    at::Device cudaDevice{at::kCPU};
  };
  ProcessGroupLoom(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
                   std::chrono::milliseconds timeout, const SplitChild& child);
  ~ProcessGroupLoom() override;

  const std::string getBackendName() const override { return "loom"; }
  c10::intrusive_ptr<Options> getBackendOptions() override;
  // Sub-groups split the parent's communicators (loomCommSplit): no new rendezvous.
  bool supportsSplitting() const override { return true; }
  c10::intrusive_ptr<c10d::Backend> split(const c10::intrusive_ptr<c10d::Store>& store,
                                          const std::vector<int>& ranks,
                                          const c10::intrusive_ptr<Options>& opts) override;
  void eagerConnectSingleDevice(at::Device device) override;
  void setSequenceNumberForGroup() override {}
  uint64_t getSequenceNumberForGroup() override { return sequence_.load(); }

  c10::intrusive_ptr<c10d::Work> broadcast(std::vector<at::Tensor>& tensors,
                                           const c10d::BroadcastOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allreduce(std::vector<at::Tensor>& tensors,
                                           const c10d::AllreduceOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allreduce_coalesced(
      std::vector<at::Tensor>& tensors, const c10d::AllreduceCoalescedOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> reduce(std::vector<at::Tensor>& tensors,
                                        const c10d::ReduceOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allgather(std::vector<std::vector<at::Tensor>>& outputs,
                                           std::vector<at::Tensor>& inputs,
                                           const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> _allgather_base(at::Tensor& output, at::Tensor& input,
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
  c10::intrusive_ptr<c10d::Work> barrier(const c10d::BarrierOptions& opts) override;

  void shutdown() override;
  // Stops the communicator now (ops in flight and queued fail instead of waiting for peers).
  void abort() override;

 private:
  // A Loom call (or several) of one op, given the communicator and stream (null: host) to use.
  using Body = std::function<void(loomComm_t comm, void* stream)>;
  // Runs body for the device of `tensors`: CPU on the worker, CUDA on Loom's stream.
  c10::intrusive_ptr<c10d::Work> launch(c10d::OpType type, const char* name,
                                        const std::vector<at::Tensor>& tensors,
                                        std::vector<at::Tensor> outputs, Body body);
  c10::intrusive_ptr<c10d::Work> enqueue(c10d::OpType type, const char* name,
                                         std::vector<at::Tensor> outputs,
                                         std::function<void()> body);
  void work();
  // A unique id shared through the store under key (made by the group's rank 0).
  loomUniqueId sharedId(const std::string& key);
#ifdef LOOM_TORCH_CUDA
  const CudaComm& cudaComm(at::Device device);
  std::mutex cudaMutex_;
  std::unique_ptr<CudaComm> cuda_;
#endif

  c10::intrusive_ptr<c10d::Store> store_;
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
};

}  // namespace loom::torchbackend
