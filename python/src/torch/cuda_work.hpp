// The CUDA half of ProcessGroupLoom (built when loom has CUDA and torch has CUDA): a Loom
// communicator per group on the rank's CUDA device with its own stream, and the Work of an op
// enqueued there.
//
// Ordering, as NCCL's backend does it: an op first makes Loom's stream wait for an event recorded
// on the caller's current stream, enqueues its kernels on Loom's stream, then records an end
// event there. wait() makes the caller's current stream wait for the end event (it does not block
// the host, so CUDA-graph capture works), and raises if the communicator failed. Tensors are
// recorded on Loom's stream (caching allocator) so that memory freed by the caller is not reused
// before the op has run.
#pragma once

#ifdef LOOM_TORCH_CUDA

#include <c10/core/Event.h>
#include <c10/cuda/CUDAStream.h>

#include <chrono>
#include <exception>
#include <memory>
#include <string>
#include <torch/csrc/distributed/c10d/Work.hpp>
#include <vector>

#include "loom/loom.h"
#include "segment_registry.hpp"

namespace loom::torchbackend {

struct CudaComm {
  loomComm_t comm = nullptr;
  at::Device device{at::kCUDA, 0};
  c10::cuda::CUDAStream stream;
  // The allocator's segments registered with comm (LOOM_TORCH_REGISTER_SEGMENTS=1), or null;
  // released before comm is destroyed.
  std::shared_ptr<SegmentRegistry> segments;
};

// comm on device, with a stream from torch's pool (and the segment registry, if enabled).
std::unique_ptr<CudaComm> makeCudaComm(loomComm_t comm, at::Device device);

class LoomCudaWork : public c10d::Work {
 public:
  // error: the op failed at issue (it is reported by wait(), like a failure while it ran).
  LoomCudaWork(int rank, c10d::OpType type, const char* name, std::string group,
               const CudaComm& comm, std::vector<at::Tensor> outputs, std::exception_ptr error,
               std::chrono::milliseconds timeout);

  bool isCompleted() override;
  bool isSuccess() const override;
  std::exception_ptr exception() const override;
  // The caller's current stream waits for the op; raises if the communicator failed. With a
  // positive timeout, or LOOM_TORCH_BLOCKING_WAIT=1, the host waits too, up to that timeout.
  bool wait(std::chrono::milliseconds timeout) override;
  void synchronize() override;
  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override;

 private:
  void raiseIfFailed();
  void hostWait(std::chrono::milliseconds timeout);

  std::string name_;
  std::string group_;
  loomComm_t comm_;
  at::Device device_;
  std::vector<at::Tensor> outputs_;
  c10::Event end_{c10::DeviceType::CUDA};
  bool capturing_ = false;
  std::chrono::milliseconds timeout_;
  c10::intrusive_ptr<c10::ivalue::Future> future_;
};

// Runs `body` (which enqueues Loom calls on Loom's stream) ordered after the current stream of the
// tensors' device; returns its Work.
using CudaBody = std::function<void(loomComm_t comm, void* stream)>;
c10::intrusive_ptr<c10d::Work> launchOnCuda(const CudaComm& comm, int rank, c10d::OpType type,
                                            const char* name, const std::string& group,
                                            const std::vector<at::Tensor>& tensors,
                                            std::vector<at::Tensor> outputs,
                                            std::chrono::milliseconds timeout,
                                            const CudaBody& body);

bool blockingWaitRequested();

}  // namespace loom::torchbackend

#endif  // LOOM_TORCH_CUDA
