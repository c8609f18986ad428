#include "loom_work.hpp"

#include <ATen/core/ivalue.h>

#include <memory>
#include <mutex>
#include <stdexcept>

#include "tensor_args.hpp"

namespace loom::torchbackend {

const char* profilingName(c10d::OpType type) {
  switch (type) {
    case c10d::OpType::BROADCAST:
      return "broadcast";
    case c10d::OpType::ALLREDUCE:
    case c10d::OpType::ALLREDUCE_COALESCED:
      return "all_reduce";
    case c10d::OpType::REDUCE:
      return "reduce";
    case c10d::OpType::ALLGATHER:
    case c10d::OpType::ALLGATHER_COALESCED:  // Gloo names it all_gather too
      return "all_gather";
    case c10d::OpType::_ALLGATHER_BASE:
      return "all_gather_into_tensor";
    case c10d::OpType::GATHER:
      return "gather";
    case c10d::OpType::SCATTER:
      return "scatter";
    case c10d::OpType::REDUCE_SCATTER:
      return "reduce_scatter";
    case c10d::OpType::_REDUCE_SCATTER_BASE:
      return "reduce_scatter_tensor";
    case c10d::OpType::ALLTOALL_BASE:
    case c10d::OpType::ALLTOALL:
      return "all_to_all";
    case c10d::OpType::SEND:
      return "send";
    case c10d::OpType::RECV:
      return "recv";
    case c10d::OpType::RECVANYSOURCE:
      return "recvAnySource";
    case c10d::OpType::BARRIER:
      return "barrier";
    default:
      return nullptr;
  }
}

LoomWork::LoomWork(int rank, c10d::OpType type, const char* name, std::vector<at::Tensor> outputs,
                   const char* profilingTitle, const std::optional<std::vector<at::Tensor>>& inputs)
    : Work(rank, type, profilingTitle, inputs), name_(name), outputs_(std::move(outputs)) {
  future_ = c10::make_intrusive<at::ivalue::Future>(c10::ListType::create(c10::TensorType::get()));
}

LoomWork::~LoomWork() {
  if (request_ != nullptr) loomRequestFree(request_);
}

void LoomWork::complete(std::exception_ptr error) {
  finish(error);
  if (error) {
    future_->setError(error);
  } else {
    future_->markCompleted(c10::IValue(outputs_));
  }
}

void LoomWork::watch(loomRequest_t request, std::string group) {
  request_ = request;
  group_ = std::move(group);
  // The callback holds a reference: the Work outlives the op even if the caller drops it.
  c10::intrusive_ptr<LoomWork> self = c10::intrusive_ptr<LoomWork>::reclaim_copy(this);
  loomResult_t result = loomRequestSetCallback(request, &LoomWork::onFinished, self.release());
  if (result != loomSuccess) {  // a bad request: cannot happen for one loomIsend/loomIrecv made
    c10::intrusive_ptr<LoomWork>::reclaim(this);
    call(result, name_.c_str(), nullptr, group_);
  }
}

void LoomWork::onFinished(loomResult_t, void* raw) {
  c10::intrusive_ptr<LoomWork> self =
      c10::intrusive_ptr<LoomWork>::reclaim(static_cast<LoomWork*>(raw));
  std::exception_ptr error;
  int done = 0;
  // loomTest gives the result and keeps its message for loomGetLastError on this thread.
  try {
    call(loomTest(self->request_, &done), self->name_.c_str(), nullptr, self->group_);
    int source = -1;
    if (self->opType_ == c10d::OpType::RECVANYSOURCE &&
        loomRequestGetSource(self->request_, &source) == loomSuccess)
      self->source_.store(source);
  } catch (...) {
    error = std::current_exception();
  }
  self->complete(error);
}

int LoomWork::sourceRank() const {
  TORCH_CHECK(opType_ == c10d::OpType::RECVANYSOURCE || opType_ == c10d::OpType::RECV,
              "sourceRank() may only be called on a receive's Work");
  const int source = source_.load();
  TORCH_CHECK(opType_ == c10d::OpType::RECV || source >= 0,
              "sourceRank(): the receive has not completed");
  return source;
}

bool LoomWork::wait(std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(mutex_);
  if (timeout.count() <= 0) {  // kNoTimeout (-1) or unset: the op is bounded by Loom's timeout
    cv_.wait(lock, [&] { return completed_; });
  } else if (!cv_.wait_for(lock, timeout, [&] { return completed_; })) {
    TORCH_CHECK(false, "ProcessGroupLoom ", name_, ": Timed out waiting ", timeout.count(),
                "ms for the operation to complete (timeout)");
  }
  if (exception_) std::rethrow_exception(exception_);
  return true;
}

c10::intrusive_ptr<c10::ivalue::Future> LoomWork::getFuture() { return future_; }

LoomCoalescedWork::LoomCoalescedWork(int rank, std::vector<c10::intrusive_ptr<c10d::Work>> works)
    : Work(rank, c10d::OpType::COALESCED), works_(std::move(works)) {
  future_ = c10::make_intrusive<at::ivalue::Future>(c10::ListType::create(c10::TensorType::get()));
}

c10::intrusive_ptr<LoomCoalescedWork> LoomCoalescedWork::create(
    int rank, std::vector<c10::intrusive_ptr<c10d::Work>> works) {
  auto self = c10::make_intrusive<LoomCoalescedWork>(rank, std::move(works));
  struct Countdown {
    std::mutex mutex;
    size_t left;
    std::exception_ptr error;
    std::vector<at::Tensor> outputs;
  };
  auto countdown = std::make_shared<Countdown>();
  countdown->left = self->works_.size();
  if (self->works_.empty()) {
    self->finish();
    self->future_->markCompleted(c10::IValue(std::vector<at::Tensor>{}));
    return self;
  }
  // Completes from the last op's completion (any thread). The ops' futures drop their callbacks
  // (and so their references to this Work) once they have run.
  for (auto& work : self->works_) {
    work->getFuture()->addCallback([self, countdown](c10::ivalue::Future& f) {
      std::exception_ptr error;
      bool last = false;
      {
        std::lock_guard<std::mutex> lock(countdown->mutex);
        if (f.hasError() && !countdown->error) countdown->error = f.exception_ptr();
        if (!f.hasError() && f.value().isTensorList())
          for (const at::Tensor& t : f.value().toTensorVector()) countdown->outputs.push_back(t);
        last = --countdown->left == 0;
        error = countdown->error;
      }
      if (!last) return;
      self->finish(error);
      if (error) {
        self->future_->setError(error);
      } else {
        self->future_->markCompleted(c10::IValue(countdown->outputs));
      }
    });
  }
  return self;
}

bool LoomCoalescedWork::wait(std::chrono::milliseconds timeout) {
  for (auto& work : works_) work->wait(timeout);
  std::unique_lock<std::mutex> lock(mutex_);
  cv_.wait(lock, [&] { return completed_; });  // the last callback runs right after
  if (exception_) std::rethrow_exception(exception_);
  return true;
}

}  // namespace loom::torchbackend
