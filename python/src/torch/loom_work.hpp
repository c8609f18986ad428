// The Work of ProcessGroupLoom's CPU half: an op that runs on the group's worker thread (a
// collective) or on Loom's point-to-point progress thread (a send or receive, loomIsend/loomIrecv),
// and a coalesced Work that completes when every op of a coalesced batch has.
//
// A Work completes with a completed future holding its outputs (DDP comm hooks need a real one).
// wait() without a timeout returns when the op ended (each op is bounded by the communicator's
// timeout); with one, it raises torch's "Timed out waiting ..." if the op has not ended by then.
#pragma once

#include <atomic>
#include <chrono>
#include <exception>
#include <optional>
#include <string>
#include <torch/csrc/distributed/c10d/Work.hpp>
#include <vector>

#include "loom/loom.h"

namespace loom::torchbackend {

class LoomWork : public c10d::Work {
 public:
  // profilingTitle ("loom:all_reduce", may be null): the op's event in torch's profiler, with the
  // shapes of `inputs`, as torch's own backends record theirs.
  LoomWork(int rank, c10d::OpType type, const char* name, std::vector<at::Tensor> outputs,
           const char* profilingTitle = nullptr,
           const std::optional<std::vector<at::Tensor>>& inputs = std::nullopt);
  ~LoomWork() override;
  bool wait(std::chrono::milliseconds timeout) override;
  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override;
  std::vector<at::Tensor> result() override { return outputs_; }
  // A receive from any source: the rank the message came from (once completed).
  int sourceRank() const override;
  // Called once the op ran (error: null on success).
  void complete(std::exception_ptr error);
  // Point-to-point: takes the request of the posted op; completes when Loom finishes it.
  void watch(loomRequest_t request, std::string group);

 private:
  static void onFinished(loomResult_t result, void* self);

  std::string name_;
  std::string group_;
  std::vector<at::Tensor> outputs_;
  c10::intrusive_ptr<c10::ivalue::Future> future_;
  loomRequest_t request_ = nullptr;
  std::atomic<int> source_{-1};
};

// The profiler's name of an op of type (null: not recorded), as torch's backends name theirs.
const char* profilingName(c10d::OpType type);

// The Work of a coalesced batch (startCoalescing .. endCoalescing) on CPU tensors: its ops were
// posted as they came (sends and receives progress together, collectives run in issue order);
// this completes when all of them have, with the first error among them.
class LoomCoalescedWork : public c10d::Work {
 public:
  static c10::intrusive_ptr<LoomCoalescedWork> create(
      int rank, std::vector<c10::intrusive_ptr<c10d::Work>> works);
  LoomCoalescedWork(int rank, std::vector<c10::intrusive_ptr<c10d::Work>> works);
  bool wait(std::chrono::milliseconds timeout) override;
  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override { return future_; }

 private:
  std::vector<c10::intrusive_ptr<c10d::Work>> works_;
  c10::intrusive_ptr<c10::ivalue::Future> future_;
};

}  // namespace loom::torchbackend
