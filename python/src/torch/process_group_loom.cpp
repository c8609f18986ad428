#include "process_group_loom.hpp"

#include <ATen/ATen.h>

#include <cstring>
#include <numeric>
#include <stdexcept>
#include <utility>

namespace loom::torchbackend {

namespace {

constexpr const char* kUniqueIdKey = "loom_unique_id";

[[noreturn]] void unsupported(const std::string& what) {
  TORCH_CHECK(false, "ProcessGroupLoom does not support ", what);
}

loomDataType_t loomType(at::ScalarType t) {
  switch (t) {
    case at::kChar:
      return loomInt8;
    case at::kByte:
      return loomUint8;
    case at::kInt:
      return loomInt32;
    case at::kUInt32:
      return loomUint32;
    case at::kLong:
      return loomInt64;
    case at::kUInt64:
      return loomUint64;
    case at::kHalf:
      return loomFloat16;
    case at::kFloat:
      return loomFloat32;
    case at::kDouble:
      return loomFloat64;
    case at::kBFloat16:
      return loomBfloat16;
    case at::kFloat8_e4m3fn:
      return loomFloat8e4m3;
    case at::kFloat8_e5m2:
      return loomFloat8e5m2;
    default:
      unsupported(std::string("dtype ") + c10::toString(t));
  }
}

// Loom's op for a torch ReduceOp; PREMUL_SUM runs as a sum of pre-scaled inputs.
loomRedOp_t loomOp(const c10d::ReduceOp& op) {
  switch (op.op_) {
    case c10d::ReduceOp::SUM:
    case c10d::ReduceOp::PREMUL_SUM:
      return loomSum;
    case c10d::ReduceOp::AVG:
      return loomAvg;
    case c10d::ReduceOp::PRODUCT:
      return loomProd;
    case c10d::ReduceOp::MIN:
      return loomMin;
    case c10d::ReduceOp::MAX:
      return loomMax;
    default:
      unsupported("the bitwise reductions (BAND, BOR, BXOR)");
  }
}

void premultiply(at::Tensor& t, const c10d::ReduceOp& op) {
  if (op.op_ != c10d::ReduceOp::PREMUL_SUM) return;
  auto* factor = dynamic_cast<c10d::NCCLPreMulSumSupplement*>(op.supplement_.get());
  TORCH_CHECK(factor != nullptr, "PREMUL_SUM without a factor");
  if (factor->tensor_factor.defined()) {
    t.mul_(factor->tensor_factor);
  } else {
    t.mul_(factor->double_factor);
  }
}

void checkTensor(const at::Tensor& t, const char* what) {
  TORCH_CHECK(t.device().is_cpu(), "ProcessGroupLoom: ", what,
              " must be a CPU tensor (CUDA tensors are not supported by this build yet)");
  TORCH_CHECK(t.is_contiguous(), "ProcessGroupLoom: ", what, " must be contiguous");
  TORCH_CHECK(!t.is_sparse(), "ProcessGroupLoom does not support sparse tensors");
  loomType(t.scalar_type());
}

void checkOne(const std::vector<at::Tensor>& tensors, const char* what) {
  TORCH_CHECK(tensors.size() == 1, "ProcessGroupLoom: ", what, " takes one tensor, got ",
              tensors.size());
  checkTensor(tensors[0], what);
}

// Runs a Loom call; failures become exceptions naming the op, the group and Loom's message.
void call(loomResult_t result, const char* op, loomComm_t comm, const std::string& group = "") {
  if (result == loomSuccess) return;
  throw std::runtime_error(std::string("ProcessGroupLoom ") + op +
                           (group.empty() ? "" : " on group '" + group + "'") + " failed (" +
                           loomGetErrorString(result) + "): " + loomGetLastError(comm));
}

}  // namespace

LoomWork::LoomWork(int rank, c10d::OpType type, const char* name, std::vector<at::Tensor> outputs)
    : Work(rank, type), name_(name), outputs_(std::move(outputs)) {
  future_ = c10::make_intrusive<at::ivalue::Future>(c10::ListType::create(c10::TensorType::get()));
}

void LoomWork::complete(std::exception_ptr error) {
  finish(error);
  if (error) {
    future_->setError(error);
  } else {
    future_->markCompleted(c10::IValue(outputs_));
  }
}

bool LoomWork::wait(std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(mutex_);
  if (timeout.count() <= 0) {  // kNoTimeout (-1) or unset: wait for completion
    cv_.wait(lock, [&] { return completed_; });
  } else if (!cv_.wait_for(lock, timeout, [&] { return completed_; })) {
    TORCH_CHECK(false, "ProcessGroupLoom ", name_, ": wait timed out after ", timeout.count(),
                " ms");
  }
  if (exception_) std::rethrow_exception(exception_);
  return true;
}

c10::intrusive_ptr<c10::ivalue::Future> LoomWork::getFuture() { return future_; }

ProcessGroupLoom::ProcessGroupLoom(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
                                   std::chrono::milliseconds timeout)
    : Backend(rank, size) {
  // Rank 0 makes the unique id; the store torch hands us is already prefixed per group.
  loomUniqueId id;
  if (rank == 0) {
    call(loomGetUniqueId(&id), "init", nullptr);
    store->set(kUniqueIdKey, std::vector<uint8_t>(id.internal, id.internal + sizeof(id.internal)));
  } else {
    std::vector<uint8_t> bytes = store->get(kUniqueIdKey);
    TORCH_CHECK(bytes.size() == sizeof(id.internal), "ProcessGroupLoom: malformed unique id");
    std::memcpy(id.internal, bytes.data(), sizeof(id.internal));
  }
  loomConfig_t config = LOOM_CONFIG_INITIALIZER;
  config.timeoutMs =
      timeout.count() > 0 && timeout.count() < INT32_MAX ? static_cast<int>(timeout.count()) : 0;
  config.name = "torch";
  call(loomCommInitRankConfig(&comm_, size, id, rank, &config), "init", nullptr);
  worker_ = std::thread([this] { work(); });
}

ProcessGroupLoom::~ProcessGroupLoom() { shutdown(); }

void ProcessGroupLoom::shutdown() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (stopping_) return;
    stopping_ = true;
  }
  wake_.notify_all();
  if (worker_.joinable()) worker_.join();
  // After an abort the handle is a tombstone that Loom keeps: nothing left to destroy.
  if (comm_ != nullptr && !aborted_.load()) loomCommDestroy(comm_);
  comm_ = nullptr;
}

void ProcessGroupLoom::abort() {
  // Safe from any thread, also while the worker is inside a call on the communicator: that call
  // and every later one fail at once, and the peers learn of the abort.
  if (comm_ != nullptr && !aborted_.exchange(true)) loomCommAbort(comm_);
  shutdown();
}

void ProcessGroupLoom::work() {
  for (;;) {
    std::function<void()> op;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      wake_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
      if (queue_.empty()) return;  // stopping, nothing left
      op = std::move(queue_.front());
      queue_.pop_front();
    }
    op();
  }
}

c10::intrusive_ptr<c10d::Work> ProcessGroupLoom::enqueue(c10d::OpType type, const char* name,
                                                         std::vector<at::Tensor> outputs,
                                                         std::function<void()> body) {
  auto work = c10::make_intrusive<LoomWork>(rank_, type, name, std::move(outputs));
  std::lock_guard<std::mutex> lock(mutex_);
  TORCH_CHECK(!stopping_, "ProcessGroupLoom ", name, ": the process group was shut down");
  queue_.push_back([work, body = std::move(body)] {
    try {
      body();
      work->complete(nullptr);
    } catch (...) {
      work->complete(std::current_exception());
    }
  });
  wake_.notify_one();
  return work;
}

c10::intrusive_ptr<c10d::Work> ProcessGroupLoom::broadcast(std::vector<at::Tensor>& tensors,
                                                           const c10d::BroadcastOptions& opts) {
  checkOne(tensors, "broadcast");
  at::Tensor t = tensors[0];
  int root = static_cast<int>(opts.rootRank);
  return enqueue(c10d::OpType::BROADCAST, "broadcast", tensors, [this, t, root] {
    call(loomBroadcast(t.data_ptr(), t.data_ptr(), t.numel(), loomType(t.scalar_type()), root,
                       comm_, nullptr),
         "broadcast", comm_, getGroupDesc());
  });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupLoom::allreduce(std::vector<at::Tensor>& tensors,
                                                           const c10d::AllreduceOptions& opts) {
  for (const at::Tensor& t : tensors) checkTensor(t, "allreduce");
  loomRedOp_t op = loomOp(opts.reduceOp);
  c10d::ReduceOp reduceOp = opts.reduceOp;
  std::vector<at::Tensor> ts = tensors;
  return enqueue(c10d::OpType::ALLREDUCE, "allreduce", tensors, [this, ts, op, reduceOp]() mutable {
    for (at::Tensor& t : ts) {
      premultiply(t, reduceOp);
      call(loomAllReduce(t.data_ptr(), t.data_ptr(), t.numel(), loomType(t.scalar_type()), op,
                         comm_, nullptr),
           "allreduce", comm_, getGroupDesc());
    }
  });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupLoom::allreduce_coalesced(
    std::vector<at::Tensor>& tensors, const c10d::AllreduceCoalescedOptions& opts) {
  return allreduce(tensors, opts);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupLoom::reduce(std::vector<at::Tensor>& tensors,
                                                        const c10d::ReduceOptions& opts) {
  checkOne(tensors, "reduce");
  at::Tensor t = tensors[0];
  loomRedOp_t op = loomOp(opts.reduceOp);
  c10d::ReduceOp reduceOp = opts.reduceOp;
  int root = static_cast<int>(opts.rootRank);
  return enqueue(c10d::OpType::REDUCE, "reduce", tensors, [this, t, op, reduceOp, root]() mutable {
    premultiply(t, reduceOp);
    call(loomReduce(t.data_ptr(), t.data_ptr(), t.numel(), loomType(t.scalar_type()), op, root,
                    comm_, nullptr),
         "reduce", comm_, getGroupDesc());
  });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupLoom::_allgather_base(at::Tensor& output,
                                                                 at::Tensor& input,
                                                                 const c10d::AllgatherOptions&) {
  checkTensor(input, "allgather input");
  checkTensor(output, "allgather output");
  TORCH_CHECK(output.scalar_type() == input.scalar_type(), "allgather: dtypes differ");
  TORCH_CHECK(output.numel() == input.numel() * size_, "allgather: output must hold ", size_,
              " x input's ", input.numel(), " elements, has ", output.numel());
  at::Tensor in = input, out = output;
  return enqueue(c10d::OpType::_ALLGATHER_BASE, "allgather", {output}, [this, in, out] {
    call(loomAllGather(in.data_ptr(), out.data_ptr(), in.numel(), loomType(in.scalar_type()), comm_,
                       nullptr),
         "allgather", comm_, getGroupDesc());
  });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupLoom::allgather(
    std::vector<std::vector<at::Tensor>>& outputs, std::vector<at::Tensor>& inputs,
    const c10d::AllgatherOptions&) {
  checkOne(inputs, "allgather");
  TORCH_CHECK(outputs.size() == 1 && static_cast<int>(outputs[0].size()) == size_,
              "allgather: expected one list of ", size_, " output tensors");
  at::Tensor in = inputs[0];
  for (const at::Tensor& o : outputs[0]) {
    TORCH_CHECK(o.numel() == in.numel() && o.scalar_type() == in.scalar_type(),
                "allgather: every output must match the input's size and dtype");
  }
  std::vector<at::Tensor> outs = outputs[0];
  return enqueue(c10d::OpType::ALLGATHER, "allgather", outs, [this, in, outs]() mutable {
    at::Tensor flat = at::empty({static_cast<int64_t>(outs.size()) * in.numel()}, in.options());
    call(loomAllGather(in.data_ptr(), flat.data_ptr(), in.numel(), loomType(in.scalar_type()),
                       comm_, nullptr),
         "allgather", comm_, getGroupDesc());
    for (size_t r = 0; r < outs.size(); ++r)
      outs[r].copy_(
          flat.narrow(0, static_cast<int64_t>(r) * in.numel(), in.numel()).view_as(outs[r]));
  });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupLoom::allgather_into_tensor_coalesced(
    std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
    const c10d::AllgatherOptions& opts) {
  TORCH_CHECK(outputs.size() == inputs.size(), "allgather_into_tensor_coalesced: ", outputs.size(),
              " outputs for ", inputs.size(), " inputs");
  c10::intrusive_ptr<c10d::Work> last;
  for (size_t i = 0; i < inputs.size(); ++i) last = _allgather_base(outputs[i], inputs[i], opts);
  // Ops run in order on one worker: the last one finishing means all did.
  return last ? last : barrier(c10d::BarrierOptions());
}

c10::intrusive_ptr<c10d::Work> ProcessGroupLoom::gather(
    std::vector<std::vector<at::Tensor>>& outputs, std::vector<at::Tensor>& inputs,
    const c10d::GatherOptions& opts) {
  checkOne(inputs, "gather");
  const int root = static_cast<int>(opts.rootRank);
  at::Tensor in = inputs[0];
  std::vector<at::Tensor> outs;
  if (rank_ == root) {
    TORCH_CHECK(outputs.size() == 1 && static_cast<int>(outputs[0].size()) == size_,
                "gather: the root needs one list of ", size_, " output tensors");
    outs = outputs[0];
  }
  return enqueue(c10d::OpType::GATHER, "gather", outs, [this, in, outs, root]() mutable {
    at::Tensor flat = rank_ == root ? at::empty({size_ * in.numel()}, in.options()) : in;
    call(loomGather(in.data_ptr(), flat.data_ptr(), in.numel(), loomType(in.scalar_type()), root,
                    comm_, nullptr),
         "gather", comm_, getGroupDesc());
    for (size_t r = 0; r < outs.size(); ++r)
      outs[r].copy_(
          flat.narrow(0, static_cast<int64_t>(r) * in.numel(), in.numel()).view_as(outs[r]));
  });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupLoom::scatter(
    std::vector<at::Tensor>& outputs, std::vector<std::vector<at::Tensor>>& inputs,
    const c10d::ScatterOptions& opts) {
  checkOne(outputs, "scatter");
  const int root = static_cast<int>(opts.rootRank);
  at::Tensor out = outputs[0];
  std::vector<at::Tensor> ins;
  if (rank_ == root) {
    TORCH_CHECK(inputs.size() == 1 && static_cast<int>(inputs[0].size()) == size_,
                "scatter: the root needs one list of ", size_, " input tensors");
    ins = inputs[0];
  }
  return enqueue(c10d::OpType::SCATTER, "scatter", outputs, [this, out, ins, root] {
    at::Tensor flat = out;
    if (rank_ == root) {
      std::vector<at::Tensor> rows;
      for (const at::Tensor& t : ins) rows.push_back(t.reshape({-1}));
      flat = at::cat(rows);
    }
    call(loomScatter(flat.data_ptr(), out.data_ptr(), out.numel(), loomType(out.scalar_type()),
                     root, comm_, nullptr),
         "scatter", comm_, getGroupDesc());
  });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupLoom::_reduce_scatter_base(
    at::Tensor& output, at::Tensor& input, const c10d::ReduceScatterOptions& opts) {
  checkTensor(input, "reduce_scatter input");
  checkTensor(output, "reduce_scatter output");
  TORCH_CHECK(input.numel() == output.numel() * size_, "reduce_scatter: input must hold ", size_,
              " x output's ", output.numel(), " elements, has ", input.numel());
  loomRedOp_t op = loomOp(opts.reduceOp);
  c10d::ReduceOp reduceOp = opts.reduceOp;
  at::Tensor in = input, out = output;
  return enqueue(c10d::OpType::_REDUCE_SCATTER_BASE, "reduce_scatter", {output},
                 [this, in, out, op, reduceOp]() mutable {
                   at::Tensor source = in;
                   if (reduceOp.op_ == c10d::ReduceOp::PREMUL_SUM) {
                     source = in.clone();  // the caller's input stays unscaled
                     premultiply(source, reduceOp);
                   }
                   call(loomReduceScatter(source.data_ptr(), out.data_ptr(), out.numel(),
                                          loomType(out.scalar_type()), op, comm_, nullptr),
                        "reduce_scatter", comm_, getGroupDesc());
                 });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupLoom::reduce_scatter(
    std::vector<at::Tensor>& outputs, std::vector<std::vector<at::Tensor>>& inputs,
    const c10d::ReduceScatterOptions& opts) {
  checkOne(outputs, "reduce_scatter");
  TORCH_CHECK(inputs.size() == 1 && static_cast<int>(inputs[0].size()) == size_,
              "reduce_scatter: expected one list of ", size_, " input tensors");
  std::vector<at::Tensor> rows;
  for (const at::Tensor& t : inputs[0]) rows.push_back(t.reshape({-1}));
  at::Tensor flat = at::cat(rows);
  return _reduce_scatter_base(outputs[0], flat, opts);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupLoom::reduce_scatter_tensor_coalesced(
    std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
    const c10d::ReduceScatterOptions& opts) {
  TORCH_CHECK(outputs.size() == inputs.size(), "reduce_scatter_tensor_coalesced: ", outputs.size(),
              " outputs for ", inputs.size(), " inputs");
  c10::intrusive_ptr<c10d::Work> last;
  for (size_t i = 0; i < inputs.size(); ++i)
    last = _reduce_scatter_base(outputs[i], inputs[i], opts);
  return last ? last : barrier(c10d::BarrierOptions());
}

c10::intrusive_ptr<c10d::Work> ProcessGroupLoom::alltoall_base(at::Tensor& output,
                                                               at::Tensor& input,
                                                               std::vector<int64_t>& outputSplits,
                                                               std::vector<int64_t>& inputSplits,
                                                               const c10d::AllToAllOptions&) {
  checkTensor(input, "alltoall input");
  checkTensor(output, "alltoall output");
  const size_t n = static_cast<size_t>(size_);
  // Splits count rows (dim 0); Loom counts elements.
  auto counts = [n](const at::Tensor& t, const std::vector<int64_t>& splits, const char* what) {
    const int64_t rows = t.dim() == 0 ? 1 : t.size(0);
    const size_t rowElems = rows == 0 ? 0 : static_cast<size_t>(t.numel() / rows);
    std::vector<size_t> c(n);
    if (splits.empty()) {
      TORCH_CHECK(rows % static_cast<int64_t>(n) == 0, "alltoall: ", what, "'s ", rows,
                  " rows do not split evenly over ", n, " ranks");
      std::fill(c.begin(), c.end(), static_cast<size_t>(rows / static_cast<int64_t>(n)) * rowElems);
    } else {
      TORCH_CHECK(splits.size() == n, "alltoall: ", what, " splits need ", n, " entries");
      TORCH_CHECK(std::accumulate(splits.begin(), splits.end(), int64_t{0}) == rows,
                  "alltoall: ", what, " splits do not add up to its ", rows, " rows");
      for (size_t i = 0; i < n; ++i) c[i] = static_cast<size_t>(splits[i]) * rowElems;
    }
    return c;
  };
  std::vector<size_t> sendCounts = counts(input, inputSplits, "input");
  std::vector<size_t> recvCounts = counts(output, outputSplits, "output");
  at::Tensor in = input, out = output;
  return enqueue(
      c10d::OpType::ALLTOALL_BASE, "alltoall", {output}, [this, in, out, sendCounts, recvCounts] {
        std::vector<size_t> sd(sendCounts.size()), rd(recvCounts.size());
        std::exclusive_scan(sendCounts.begin(), sendCounts.end(), sd.begin(), size_t{0});
        std::exclusive_scan(recvCounts.begin(), recvCounts.end(), rd.begin(), size_t{0});
        call(
            loomAllToAllv(in.data_ptr(), sendCounts.data(), sd.data(), out.data_ptr(),
                          recvCounts.data(), rd.data(), loomType(in.scalar_type()), comm_, nullptr),
            "alltoall", comm_, getGroupDesc());
      });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupLoom::alltoall(std::vector<at::Tensor>& outputs,
                                                          std::vector<at::Tensor>& inputs,
                                                          const c10d::AllToAllOptions&) {
  TORCH_CHECK(static_cast<int>(inputs.size()) == size_ && static_cast<int>(outputs.size()) == size_,
              "alltoall: expected ", size_, " input and output tensors");
  for (const at::Tensor& t : inputs) checkTensor(t, "alltoall input");
  std::vector<at::Tensor> ins = inputs, outs = outputs;
  return enqueue(c10d::OpType::ALLTOALL, "alltoall", outputs, [this, ins, outs]() mutable {
    const size_t n = ins.size();
    std::vector<size_t> sc(n), rc(n), sd(n), rd(n);
    std::vector<at::Tensor> rows;
    for (size_t i = 0; i < n; ++i) {
      sc[i] = static_cast<size_t>(ins[i].numel());
      rc[i] = static_cast<size_t>(outs[i].numel());
      rows.push_back(ins[i].reshape({-1}));
    }
    std::exclusive_scan(sc.begin(), sc.end(), sd.begin(), size_t{0});
    std::exclusive_scan(rc.begin(), rc.end(), rd.begin(), size_t{0});
    at::Tensor send = at::cat(rows);
    at::Tensor recv = at::empty({static_cast<int64_t>(rd[n - 1] + rc[n - 1])}, send.options());
    call(loomAllToAllv(send.data_ptr(), sc.data(), sd.data(), recv.data_ptr(), rc.data(), rd.data(),
                       loomType(send.scalar_type()), comm_, nullptr),
         "alltoall", comm_, getGroupDesc());
    for (size_t i = 0; i < n; ++i)
      outs[i].copy_(recv.narrow(0, static_cast<int64_t>(rd[i]), static_cast<int64_t>(rc[i]))
                        .view_as(outs[i]));
  });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupLoom::send(std::vector<at::Tensor>& tensors, int dstRank,
                                                      int tag) {
  checkOne(tensors, "send");
  at::Tensor t = tensors[0];
  return enqueue(c10d::OpType::SEND, "send", tensors, [this, t, dstRank, tag] {
    call(loomSendTag(t.data_ptr(), t.numel(), loomType(t.scalar_type()), dstRank, tag, comm_,
                     nullptr),
         "send", comm_, getGroupDesc());
  });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupLoom::recv(std::vector<at::Tensor>& tensors, int srcRank,
                                                      int tag) {
  checkOne(tensors, "recv");
  at::Tensor t = tensors[0];
  return enqueue(c10d::OpType::RECV, "recv", tensors, [this, t, srcRank, tag] {
    call(loomRecvTag(t.data_ptr(), t.numel(), loomType(t.scalar_type()), srcRank, tag, comm_,
                     nullptr),
         "recv", comm_, getGroupDesc());
  });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupLoom::barrier(const c10d::BarrierOptions&) {
  return enqueue(c10d::OpType::BARRIER, "barrier", {},
                 [this] { call(loomBarrier(comm_, nullptr), "barrier", comm_, getGroupDesc()); });
}

}  // namespace loom::torchbackend
