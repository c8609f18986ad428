#include "process_group_loom.hpp"

#include <ATen/ATen.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <numeric>
#include <stdexcept>
#include <utility>

#include "tensor_args.hpp"

#ifdef LOOM_TORCH_CUDA
#include <c10/cuda/CUDAGuard.h>
#endif

namespace loom::torchbackend {

namespace {

constexpr const char* kUniqueIdKey = "loom_unique_id";

}  // namespace

ProcessGroupLoom::ProcessGroupLoom(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
                                   std::chrono::milliseconds timeout, std::string profilingPrefix)
    : Backend(rank, size),
      store_(store),
      profilingPrefix_(std::move(profilingPrefix)),
      timeout_(timeout) {
  // The store torch hands us is already prefixed per group (and per device type).
  loomUniqueId id = sharedId(kUniqueIdKey);
  loomConfig_t config = LOOM_CONFIG_INITIALIZER;
  config.timeoutMs = loomTimeoutMs(timeout);
  config.name = "torch";
  call(loomCommInitRankConfig(&comm_, size, id, rank, &config), "init", nullptr, "");
  adoptHomeDevices();
  worker_ = std::thread([this] { work(); });
}

ProcessGroupLoom::ProcessGroupLoom(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
                                   std::chrono::milliseconds timeout, const SplitChild& child)
    : Backend(rank, size),
      store_(store),
      profilingPrefix_(child.profilingPrefix),
      timeout_(timeout),
      comm_(child.hostComm) {
#ifdef LOOM_TORCH_CUDA
  if (child.cudaComm != nullptr) {
    cuda_ = makeCudaComm(child.cudaComm, child.cudaDevice);
  }
#endif
  if (child.deviceComm != nullptr) {
    device_ = std::make_unique<DeviceComm>(DeviceComm{child.deviceComm, child.device, child.kind});
    attachStream(*device_);
  }
  worker_ = std::thread([this] { work(); });
}

loomUniqueId ProcessGroupLoom::sharedId(const std::string& key) {
  loomUniqueId id;
  if (rank_ == 0) {
    call(loomGetUniqueId(&id), "init", nullptr, "");
    store_->set(key, std::vector<uint8_t>(id.internal, id.internal + sizeof(id.internal)));
  } else {
    std::vector<uint8_t> bytes = store_->get(key);
    TORCH_CHECK(bytes.size() == sizeof(id.internal), "ProcessGroupLoom: malformed unique id");
    std::memcpy(id.internal, bytes.data(), sizeof(id.internal));
  }
  return id;
}

c10::intrusive_ptr<c10d::Backend::Options> ProcessGroupLoom::getBackendOptions() {
  auto options = c10::make_intrusive<LoomOptions>(timeout_);
  options->group_name = getGroupUid();
  options->group_desc = getGroupDesc();
  return options;
}

c10::intrusive_ptr<c10d::Backend> ProcessGroupLoom::split(
    const c10::intrusive_ptr<c10d::Store>& store, const std::vector<int>& ranks,
    const c10::intrusive_ptr<Options>& opts) {
  const std::string name = opts ? opts->group_name : "";
  std::lock_guard<std::mutex> lock(splitMutex_);
  if (auto it = splits_.find(name); !name.empty() && it != splits_.end()) return it->second;
  // Every rank of this group calls split, each with the ranks of its own new group (the groups
  // do not overlap, so their lowest rank names them), or with ranks it is not in: no group.
  const auto self = std::find(ranks.begin(), ranks.end(), rank_);
  const bool member = self != ranks.end();
  const int color = member ? *std::min_element(ranks.begin(), ranks.end()) : LOOM_SPLIT_NOCOLOR;
  std::chrono::milliseconds timeout = opts ? opts->timeout : timeout_;
  const std::string configName = "torch:" + name;
  loomConfig_t config = LOOM_CONFIG_INITIALIZER;
  config.timeoutMs = loomTimeoutMs(timeout);
  config.name = configName.c_str();

  SplitChild child;
  child.profilingPrefix = profilingPrefix_;
  // The host communicator is the worker's: the split runs there, in order with queued ops.
  enqueue(c10d::OpType::UNKNOWN, "split", {}, [&] {
    call(loomCommSplit(comm_, color, rank_, &child.hostComm, &config), "split", comm_,
         getGroupDesc());
  })->wait();
#ifdef LOOM_TORCH_CUDA
  {
    std::lock_guard<std::mutex> cudaLock(cudaMutex_);
    if (cuda_) {
      c10::cuda::CUDAGuard guard(cuda_->device);
      call(loomCommSplit(cuda_->comm, color, rank_, &child.cudaComm, &config), "split (CUDA)",
           cuda_->comm, getGroupDesc());
      child.cudaDevice = cuda_->device;
    }
  }
#endif
  {
    std::lock_guard<std::mutex> deviceLock(deviceMutex_);
    if (device_) {
      call(loomCommSplit(device_->comm, color, rank_, &child.deviceComm, &config), "split (device)",
           device_->comm, getGroupDesc());
      child.device = device_->device;
      child.kind = device_->kind;
    }
  }
  c10::intrusive_ptr<c10d::Backend> result;
  if (member) {
    result = c10::make_intrusive<ProcessGroupLoom>(store, static_cast<int>(self - ranks.begin()),
                                                   static_cast<int>(ranks.size()), timeout, child);
  }
  if (!name.empty()) splits_[name] = result;
  return result;
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

c10::intrusive_ptr<c10d::Work> ProcessGroupLoom::launch(
    c10d::OpType type, const char* name, const std::vector<at::Tensor>& tensors,
    std::vector<at::Tensor> outputs, Body body,
    const std::optional<std::vector<at::Tensor>>& inputs) {
  ++sequence_;
  at::Device device = commonDevice(tensors, name);
  if (device.is_cpu()) {
    // A plug-in's device takes only its own memory (a GPU rank's CPU tensors run on device
    // scratch inside Loom).
    TORCH_CHECK(!deviceHome_ || tensors.empty(), "ProcessGroupLoom ", name,
                ": this rank's home device is ", device_->device,
                " in a group of mixed devices: it passes ", device_->device,
                " tensors, not CPU tensors");
    return coalesced(enqueue(
        type, name, std::move(outputs), [this, body = std::move(body)] { body(comm_, nullptr); },
        inputs ? inputs : std::optional<std::vector<at::Tensor>>(tensors)));
  }
  {
    std::lock_guard<std::mutex> lock(coalesceMutex_);
    if (coalescing_) {
      // Enqueued at endCoalescing, together in one Loom group on the stream; the batch's Work is
      // endCoalescing's (this one is complete at once, as a placeholder).
      TORCH_CHECK(coalescedOnStream_.empty() || coalescedDevice_ == device,
                  "ProcessGroupLoom: a coalesced batch uses one device, got ", coalescedDevice_,
                  " and ", device);
      coalescedDevice_ = device;
      coalescedOnStream_.push_back({tensors, outputs, std::move(body)});
      auto placeholder = c10::make_intrusive<LoomWork>(rank_, type, name, std::move(outputs));
      placeholder->complete(nullptr);
      return placeholder;
    }
  }
  return launchOnStream(device, type, name, tensors, std::move(outputs), body);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupLoom::launchOnStream(
    at::Device device, c10d::OpType type, const char* name, const std::vector<at::Tensor>& tensors,
    std::vector<at::Tensor> outputs, const Body& body) {
  if (device.is_cuda()) {
#ifdef LOOM_TORCH_CUDA
    return launchOnCuda(cudaComm(device), rank_, type, name, getGroupDesc(), tensors,
                        std::move(outputs), timeout_, body);
#else
    unsupported("CUDA tensors in this build");
#endif
  }
  return launchOnDevice(deviceComm(device), rank_, type, name, getGroupDesc(), tensors,
                        std::move(outputs), timeout_, body);
}

std::string ProcessGroupLoom::profilingTitle(c10d::OpType type) const {
  const char* op = profilingName(type);
  return op == nullptr ? std::string() : profilingPrefix_ + ":" + op;
}

c10::intrusive_ptr<c10d::Work> ProcessGroupLoom::enqueue(
    c10d::OpType type, const char* name, std::vector<at::Tensor> outputs,
    std::function<void()> body, const std::optional<std::vector<at::Tensor>>& inputs) {
  const std::string title = profilingTitle(type);
  std::optional<std::vector<at::Tensor>> recorded = inputs;
  if (recorded) {  // complex tensors travel, and are recorded, as pairs of reals (as Gloo's)
    for (at::Tensor& t : *recorded)
      if (t.defined() && t.is_complex()) t = at::view_as_real(t);
  }
  auto work = c10::make_intrusive<LoomWork>(rank_, type, name, std::move(outputs),
                                            title.empty() ? nullptr : title.c_str(), recorded);
  if (cudaHome_ || deviceHome_) {
    // A mixed group's device rank: its device ops run on this thread, so its others do too.
    TORCH_CHECK(!aborted_.load(), "ProcessGroupLoom ", name, ": the process group was aborted");
    try {
      body();
      work->complete(nullptr);
    } catch (...) {
      work->complete(std::current_exception());
    }
    return work;
  }
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
  return launch(c10d::OpType::BROADCAST, "broadcast", tensors, tensors,
                [this, t, root](loomComm_t comm, void* stream) {
                  call(loomBroadcast(t.data_ptr(), t.data_ptr(), loomCount(t),
                                     loomType(t.scalar_type()), root, comm, stream),
                       "broadcast", comm, getGroupDesc());
                });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupLoom::allreduce(std::vector<at::Tensor>& tensors,
                                                           const c10d::AllreduceOptions& opts) {
  if (!tensors.empty() && tensors[0].is_sparse()) return allreduce_sparse(tensors, opts);
  for (const at::Tensor& t : tensors) {
    checkTensor(t, "allreduce");
    checkComplexOp(t, opts.reduceOp, "allreduce");
  }
  loomRedOp_t op = loomOp(opts.reduceOp);
  c10d::ReduceOp reduceOp = opts.reduceOp;
  std::vector<at::Tensor> ts = tensors;
  return launch(c10d::OpType::ALLREDUCE, "allreduce", tensors, tensors,
                [this, ts, op, reduceOp](loomComm_t comm, void* stream) mutable {
                  for (at::Tensor& t : ts) {
                    premultiply(t, reduceOp);
                    call(loomAllReduce(t.data_ptr(), t.data_ptr(), loomCount(t),
                                       loomType(t.scalar_type()), op, comm, stream),
                         "allreduce", comm, getGroupDesc());
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
  checkComplexOp(tensors[0], opts.reduceOp, "reduce");
  at::Tensor t = tensors[0];
  loomRedOp_t op = loomOp(opts.reduceOp);
  c10d::ReduceOp reduceOp = opts.reduceOp;
  int root = static_cast<int>(opts.rootRank);
  return launch(c10d::OpType::REDUCE, "reduce", tensors, tensors,
                [this, t, op, reduceOp, root](loomComm_t comm, void* stream) mutable {
                  premultiply(t, reduceOp);
                  call(loomReduce(t.data_ptr(), t.data_ptr(), loomCount(t),
                                  loomType(t.scalar_type()), op, root, comm, stream),
                       "reduce", comm, getGroupDesc());
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
  return launch(
      c10d::OpType::_ALLGATHER_BASE, "allgather", {input, output}, {output},
      [this, in, out](loomComm_t comm, void* stream) {
        call(loomAllGather(in.data_ptr(), out.data_ptr(), loomCount(in), loomType(in.scalar_type()),
                           comm, stream),
             "allgather", comm, getGroupDesc());
      },
      std::vector<at::Tensor>{input});
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
  std::vector<at::Tensor> all = outs;
  all.push_back(in);
  return launch(
      c10d::OpType::ALLGATHER, "allgather", all, outs,
      [this, in, outs](loomComm_t comm, void* stream) mutable {
        at::Tensor flat = at::empty({static_cast<int64_t>(outs.size()) * in.numel()}, in.options());
        call(loomAllGather(in.data_ptr(), flat.data_ptr(), loomCount(in),
                           loomType(in.scalar_type()), comm, stream),
             "allgather", comm, getGroupDesc());
        for (size_t r = 0; r < outs.size(); ++r)
          outs[r].copy_(
              flat.narrow(0, static_cast<int64_t>(r) * in.numel(), in.numel()).view_as(outs[r]));
      },
      inputs);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupLoom::allgather_into_tensor_coalesced(
    std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
    const c10d::AllgatherOptions& opts) {
  TORCH_CHECK(outputs.size() == inputs.size(), "allgather_into_tensor_coalesced: ", outputs.size(),
              " outputs for ", inputs.size(), " inputs");
  c10::intrusive_ptr<c10d::Work> last;
  for (size_t i = 0; i < inputs.size(); ++i) last = _allgather_base(outputs[i], inputs[i], opts);
  // Ops run in issue order (one worker, or one stream): the last one finishing means all did.
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
  std::vector<at::Tensor> all = outs;
  all.push_back(in);
  return launch(
      c10d::OpType::GATHER, "gather", all, outs,
      [this, in, outs, root](loomComm_t comm, void* stream) mutable {
        at::Tensor flat = rank_ == root ? at::empty({size_ * in.numel()}, in.options()) : in;
        call(loomGather(in.data_ptr(), flat.data_ptr(), loomCount(in), loomType(in.scalar_type()),
                        root, comm, stream),
             "gather", comm, getGroupDesc());
        for (size_t r = 0; r < outs.size(); ++r)
          outs[r].copy_(
              flat.narrow(0, static_cast<int64_t>(r) * in.numel(), in.numel()).view_as(outs[r]));
      },
      inputs);
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
  std::vector<at::Tensor> all = ins;
  all.push_back(out);
  return launch(
      c10d::OpType::SCATTER, "scatter", all, outputs,
      [this, out, ins, root](loomComm_t comm, void* stream) {
        at::Tensor flat = out;
        if (rank_ == root) {
          std::vector<at::Tensor> rows;
          for (const at::Tensor& t : ins) rows.push_back(t.reshape({-1}));
          flat = at::cat(rows);
        }
        call(loomScatter(flat.data_ptr(), out.data_ptr(), loomCount(out),
                         loomType(out.scalar_type()), root, comm, stream),
             "scatter", comm, getGroupDesc());
      },
      ins);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupLoom::_reduce_scatter_base(
    at::Tensor& output, at::Tensor& input, const c10d::ReduceScatterOptions& opts) {
  checkTensor(input, "reduce_scatter input");
  checkTensor(output, "reduce_scatter output");
  checkComplexOp(input, opts.reduceOp, "reduce_scatter");
  TORCH_CHECK(input.numel() == output.numel() * size_, "reduce_scatter: input must hold ", size_,
              " x output's ", output.numel(), " elements, has ", input.numel());
  loomRedOp_t op = loomOp(opts.reduceOp);
  c10d::ReduceOp reduceOp = opts.reduceOp;
  at::Tensor in = input, out = output;
  return launch(
      c10d::OpType::_REDUCE_SCATTER_BASE, "reduce_scatter", {input, output}, {output},
      [this, in, out, op, reduceOp](loomComm_t comm, void* stream) mutable {
        at::Tensor source = in;
        if (reduceOp.op_ == c10d::ReduceOp::PREMUL_SUM) {
          source = in.clone();  // the caller's input stays unscaled
          premultiply(source, reduceOp);
        }
        call(loomReduceScatter(source.data_ptr(), out.data_ptr(), loomCount(out),
                               loomType(out.scalar_type()), op, comm, stream),
             "reduce_scatter", comm, getGroupDesc());
      },
      std::vector<at::Tensor>{input});
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
    const size_t rowElems = rows == 0 ? 0 : static_cast<size_t>(loomCount(t) / rows);
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
  return launch(
      c10d::OpType::ALLTOALL_BASE, "alltoall", {input, output}, {output},
      [this, in, out, sendCounts, recvCounts](loomComm_t comm, void* stream) {
        std::vector<size_t> sd(sendCounts.size()), rd(recvCounts.size());
        std::exclusive_scan(sendCounts.begin(), sendCounts.end(), sd.begin(), size_t{0});
        std::exclusive_scan(recvCounts.begin(), recvCounts.end(), rd.begin(), size_t{0});
        call(loomAllToAllv(in.data_ptr(), sendCounts.data(), sd.data(), out.data_ptr(),
                           recvCounts.data(), rd.data(), loomType(in.scalar_type()), comm, stream),
             "alltoall", comm, getGroupDesc());
      },
      std::vector<at::Tensor>{input});
}

c10::intrusive_ptr<c10d::Work> ProcessGroupLoom::alltoall(std::vector<at::Tensor>& outputs,
                                                          std::vector<at::Tensor>& inputs,
                                                          const c10d::AllToAllOptions&) {
  TORCH_CHECK(static_cast<int>(inputs.size()) == size_ && static_cast<int>(outputs.size()) == size_,
              "alltoall: expected ", size_, " input and output tensors");
  for (const at::Tensor& t : inputs) {
    checkTensor(t, "alltoall input");
    TORCH_CHECK(!t.is_complex(), "Backend loom does not support complex tensors in alltoall lists");
  }
  for (const at::Tensor& t : outputs) checkTensor(t, "alltoall output");
  std::vector<at::Tensor> ins = inputs, outs = outputs;
  std::vector<at::Tensor> all = inputs;
  all.insert(all.end(), outputs.begin(), outputs.end());
  return launch(
      c10d::OpType::ALLTOALL, "alltoall", all, outputs,
      [this, ins, outs](loomComm_t comm, void* stream) mutable {
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
        call(loomAllToAllv(send.data_ptr(), sc.data(), sd.data(), recv.data_ptr(), rc.data(),
                           rd.data(), loomType(send.scalar_type()), comm, stream),
             "alltoall", comm, getGroupDesc());
        for (size_t i = 0; i < n; ++i)
          outs[i].copy_(recv.narrow(0, static_cast<int64_t>(rd[i]), static_cast<int64_t>(rc[i]))
                            .view_as(outs[i]));
      },
      inputs);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupLoom::barrier(const c10d::BarrierOptions&) {
  // On the host communicator whatever the devices: every rank has reached the barrier when it
  // ends (CUDA work already enqueued is not waited for).
  return launch(c10d::OpType::BARRIER, "barrier", {}, {}, [this](loomComm_t comm, void* stream) {
    call(loomBarrier(comm, stream), "barrier", comm, getGroupDesc());
  });
}

}  // namespace loom::torchbackend
