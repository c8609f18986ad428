// ProcessGroupLoom's sends and receives, coalescing, and the ops built from other collectives
// (allgather_coalesced, sparse allreduce): see process_group_loom.hpp.
//
// CPU sends and receives bypass the worker queue: they are posted to Loom (loomIsend/loomIrecv),
// whose point-to-point engine progresses every posted one together, so any order of posting on
// the ranks completes (irecv before isend on both, batch_isend_irecv in any order, rings), and
// collectives queued meanwhile are not held up by a receive waiting for its sender.
#include <ATen/ATen.h>

#include <algorithm>

#include "process_group_loom.hpp"
#include "tensor_args.hpp"

namespace loom::torchbackend {

c10::intrusive_ptr<c10d::Work> ProcessGroupLoom::coalesced(c10::intrusive_ptr<c10d::Work> work) {
  std::lock_guard<std::mutex> lock(coalesceMutex_);
  if (coalescing_) coalescedWorks_.push_back(work);
  return work;
}

void ProcessGroupLoom::startCoalescing() {
  std::lock_guard<std::mutex> lock(coalesceMutex_);
  TORCH_CHECK(!coalescing_, "ProcessGroupLoom: startCoalescing inside a coalesced batch");
  coalescing_ = true;
  coalescedWorks_.clear();
  coalescedOnStream_.clear();
}

c10::intrusive_ptr<c10d::Work> ProcessGroupLoom::endCoalescing() {
  std::vector<c10::intrusive_ptr<c10d::Work>> works;
  std::vector<PendingOnStream> ops;
  {
    std::lock_guard<std::mutex> lock(coalesceMutex_);
    TORCH_CHECK(coalescing_, "ProcessGroupLoom: endCoalescing without startCoalescing");
    coalescing_ = false;
    works.swap(coalescedWorks_);
    ops.swap(coalescedOnStream_);
  }
  if (!ops.empty()) {
    // One Loom group on the stream: its sends and receives progress together on the device.
    std::vector<at::Tensor> tensors, outputs;
    for (const PendingOnStream& op : ops) {
      tensors.insert(tensors.end(), op.tensors.begin(), op.tensors.end());
      outputs.insert(outputs.end(), op.outputs.begin(), op.outputs.end());
    }
    works.push_back(launchOnStream(coalescedDevice_, c10d::OpType::COALESCED, "coalesced batch",
                                   tensors, outputs, [&](loomComm_t comm, void* stream) {
                                     call(loomGroupStart(), "coalesced batch", comm,
                                          getGroupDesc());
                                     std::exception_ptr error;
                                     try {
                                       for (const PendingOnStream& op : ops) op.body(comm, stream);
                                     } catch (...) {
                                       error = std::current_exception();
                                     }
                                     // The group ends whatever happened inside it (Loom keeps a
                                     // per-thread depth).
                                     loomResult_t ended = loomGroupEnd();
                                     if (error) std::rethrow_exception(error);
                                     call(ended, "coalesced batch", comm, getGroupDesc());
                                   }));
  }
  return LoomCoalescedWork::create(rank_, std::move(works));
}

void ProcessGroupLoom::setTimeout(std::chrono::milliseconds timeout) { timeout_ = timeout; }

c10::intrusive_ptr<c10d::Work> ProcessGroupLoom::pointToPoint(c10d::OpType type, const char* name,
                                                              std::vector<at::Tensor>& tensors,
                                                              int peer, int tag) {
  checkOne(tensors, name);
  at::Tensor t = tensors[0];
  const bool isSend = type == c10d::OpType::SEND;
  if (!t.device().is_cpu()) {
    TORCH_CHECK(peer != LOOM_ANY_SOURCE, "Backend loom does not support recvAnysource on ",
                t.device(), " tensors");
    // CUDA or a plug-in's device: ordered on Loom's stream (in a coalesced batch, one group at
    // its end), as NCCL.
    return launch(type, name, tensors, tensors,
                  [this, t, peer, tag, isSend](loomComm_t comm, void* stream) {
                    call(isSend ? loomSendTag(t.data_ptr(), loomCount(t), loomType(t.scalar_type()),
                                              peer, tag, comm, stream)
                                : loomRecvTag(t.data_ptr(), loomCount(t), loomType(t.scalar_type()),
                                              peer, tag, comm, stream),
                         isSend ? "send" : "recv", comm, getGroupDesc());
                  });
  }
  TORCH_CHECK(!aborted_.load(), "ProcessGroupLoom ", name, ": the process group was aborted");
  {
    std::lock_guard<std::mutex> lock(mutex_);
    TORCH_CHECK(!stopping_, "ProcessGroupLoom ", name, ": the process group was shut down");
  }
  const std::string title = profilingTitle(type);
  auto work = c10::make_intrusive<LoomWork>(rank_, type, name, tensors,
                                            title.empty() ? nullptr : title.c_str(), tensors);
  loomRequest_t request = nullptr;
  call(isSend ? loomIsend(t.data_ptr(), loomCount(t), loomType(t.scalar_type()), peer, tag, comm_,
                          &request)
              : loomIrecv(t.data_ptr(), loomCount(t), loomType(t.scalar_type()), peer, tag, comm_,
                          &request),
       name, comm_, getGroupDesc());
  work->watch(request, getGroupDesc());
  return coalesced(work);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupLoom::send(std::vector<at::Tensor>& tensors, int dstRank,
                                                      int tag) {
  return pointToPoint(c10d::OpType::SEND, "send", tensors, dstRank, tag);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupLoom::recv(std::vector<at::Tensor>& tensors, int srcRank,
                                                      int tag) {
  return pointToPoint(c10d::OpType::RECV, "recv", tensors, srcRank, tag);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupLoom::recvAnysource(std::vector<at::Tensor>& tensors,
                                                               int tag) {
  return pointToPoint(c10d::OpType::RECVANYSOURCE, "recvAnysource", tensors, LOOM_ANY_SOURCE, tag);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupLoom::allgather_coalesced(
    std::vector<std::vector<at::Tensor>>& outputTensorLists, std::vector<at::Tensor>& inputs,
    const c10d::AllgatherOptions&) {
  TORCH_CHECK(static_cast<int>(outputTensorLists.size()) == size_, "allgather_coalesced: expected ",
              size_, " output lists (one per rank), got ", outputTensorLists.size());
  std::vector<at::Tensor> all = inputs, outs;
  for (const at::Tensor& t : inputs) checkTensor(t, "allgather_coalesced input");
  for (const auto& list : outputTensorLists) {
    TORCH_CHECK(list.size() == inputs.size(), "allgather_coalesced: every output list needs ",
                inputs.size(), " tensors (one per input), got ", list.size());
    for (size_t i = 0; i < list.size(); ++i) {
      checkTensor(list[i], "allgather_coalesced output");
      TORCH_CHECK(
          list[i].numel() == inputs[i].numel() && list[i].scalar_type() == inputs[i].scalar_type(),
          "allgather_coalesced: output ", i, " must match input ", i, "'s size and dtype");
      outs.push_back(list[i]);
    }
  }
  all.insert(all.end(), outs.begin(), outs.end());
  std::vector<at::Tensor> ins = inputs;
  std::vector<std::vector<at::Tensor>> lists = outputTensorLists;
  return launch(
      c10d::OpType::ALLGATHER_COALESCED, "allgather_coalesced", all, outs,
      [this, ins, lists](loomComm_t comm, void* stream) mutable {
        for (size_t i = 0; i < ins.size(); ++i) {
          const at::Tensor& in = ins[i];
          at::Tensor flat = at::empty({size_ * in.numel()}, in.options());
          call(loomAllGather(in.data_ptr(), flat.data_ptr(), loomCount(in),
                             loomType(in.scalar_type()), comm, stream),
               "allgather_coalesced", comm, getGroupDesc());
          for (int r = 0; r < size_; ++r)
            lists[r][i].copy_(flat.narrow(0, r * in.numel(), in.numel()).view_as(lists[r][i]));
        }
      },
      // The profiler records the inputs only, as Gloo's does (torch's tests compare the event's
      // input shapes with the input tensors').
      std::optional<std::vector<at::Tensor>>(inputs));
}

c10::intrusive_ptr<c10d::Work> ProcessGroupLoom::allreduce_sparse(
    std::vector<at::Tensor>& tensors, const c10d::AllreduceOptions& opts) {
  TORCH_CHECK(tensors.size() == 1, "ProcessGroupLoom: allreduce takes one sparse tensor, got ",
              tensors.size());
  return sparseAllreduce(tensors[0], opts.reduceOp);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupLoom::sparseAllreduce(const at::Tensor& tensor,
                                                                 const c10d::ReduceOp& op) {
  if (tensor.layout() != at::kSparse) unsupported("sparse layouts other than COO in allreduce");
  if (!tensor.device().is_cpu())
    unsupported("sparse allreduce of " + tensor.device().str() + " tensors");
  if (op.op_ != c10d::ReduceOp::SUM)
    unsupported("sparse allreduce with a reduction other than SUM");
  loomType(tensor.scalar_type());
  ++sequence_;
  at::Tensor t = tensor;
  // Every rank's indices and values, gathered (padded to the largest count) and summed, Gloo's
  // way; the result is coalesced, and written into the caller's tensor.
  return coalesced(enqueue(c10d::OpType::ALLREDUCE, "allreduce (sparse)", {t}, [this, t]() mutable {
    const std::string group = getGroupDesc();
    at::Tensor input = t.coalesce();
    at::Tensor indices = input._indices().contiguous();
    at::Tensor values = input._values().contiguous();
    int64_t nnz = input._nnz();
    at::Tensor counts = at::empty({size_}, at::kLong);
    call(loomAllGather(&nnz, counts.data_ptr(), 1, loomInt64, comm_, nullptr), "allreduce (sparse)",
         comm_, group);
    const int64_t most = counts.max().item<int64_t>();
    const int64_t sparseDim = indices.size(0);
    at::Tensor paddedIndices = at::zeros({sparseDim, most}, indices.options());
    paddedIndices.narrow(1, 0, nnz).copy_(indices);
    std::vector<int64_t> valueShape = values.sizes().vec();
    valueShape[0] = most;
    at::Tensor paddedValues = at::zeros(valueShape, values.options());
    paddedValues.narrow(0, 0, nnz).copy_(values);
    at::Tensor allIndices = at::empty({size_, sparseDim, most}, indices.options());
    valueShape[0] = most * size_;
    at::Tensor allValues = at::empty(valueShape, values.options());
    call(loomAllGather(paddedIndices.data_ptr(), allIndices.data_ptr(), loomCount(paddedIndices),
                       loomInt64, comm_, nullptr),
         "allreduce (sparse)", comm_, group);
    call(loomAllGather(paddedValues.data_ptr(), allValues.data_ptr(), loomCount(paddedValues),
                       loomType(values.scalar_type()), comm_, nullptr),
         "allreduce (sparse)", comm_, group);
    std::vector<at::Tensor> pieceIndices, pieceValues;
    for (int r = 0; r < size_; ++r) {
      const int64_t n = counts[r].item<int64_t>();
      pieceIndices.push_back(allIndices[r].narrow(1, 0, n));
      pieceValues.push_back(allValues.narrow(0, r * most, n));
    }
    at::Tensor sum = at::sparse_coo_tensor(at::cat(pieceIndices, 1), at::cat(pieceValues, 0),
                                           input.sizes(), input.options())
                         .coalesce();
    t.copy_(sum);
  }));
}

}  // namespace loom::torchbackend
