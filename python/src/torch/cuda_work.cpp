#include "cuda_work.hpp"

#ifdef LOOM_TORCH_CUDA

#include <ATen/core/ivalue.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAGuard.h>
#include <cuda_runtime_api.h>

#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <thread>

namespace loom::torchbackend {

namespace {

bool capturing(const c10::cuda::CUDAStream& stream) {
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  return cudaStreamIsCapturing(stream.stream(), &status) == cudaSuccess &&
         status != cudaStreamCaptureStatusNone;
}

}  // namespace

std::unique_ptr<CudaComm> makeCudaComm(loomComm_t comm, at::Device device) {
  return std::make_unique<CudaComm>(
      CudaComm{comm, device, c10::cuda::getStreamFromPool(false, device.index()),
               SegmentRegistry::attachIfEnabled(comm, device.index())});
}

bool blockingWaitRequested() {
  const char* value = std::getenv("LOOM_TORCH_BLOCKING_WAIT");
  return value != nullptr && std::strcmp(value, "1") == 0;
}

LoomCudaWork::LoomCudaWork(int rank, c10d::OpType type, const char* name, std::string group,
                           const CudaComm& comm, std::vector<at::Tensor> outputs,
                           std::exception_ptr error, std::chrono::milliseconds timeout)
    : Work(rank, type),
      name_(name),
      group_(std::move(group)),
      comm_(comm.comm),
      device_(comm.device),
      outputs_(std::move(outputs)),
      capturing_(capturing(comm.stream)),
      timeout_(timeout) {
  future_ = c10::make_intrusive<at::ivalue::Future>(c10::ListType::create(c10::TensorType::get()),
                                                    std::vector<c10::Device>{device_});
  if (error) {
    finish(error);
    future_->setError(error);
    return;
  }
  end_.record(comm.stream);
  // The future's value is ready on Loom's stream: callbacks (DDP comm hooks) are ordered after it.
  c10::cuda::CUDAStreamGuard guard(comm.stream);
  future_->markCompleted(c10::IValue(outputs_));
}

void LoomCudaWork::raiseIfFailed() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (exception_) std::rethrow_exception(exception_);
  }
  loomResult_t asyncError = loomSuccess;
  if (loomCommGetAsyncError(comm_, &asyncError) != loomSuccess || asyncError == loomSuccess ||
      asyncError == loomInProgress)
    return;
  // The communicator stopped (a peer died, a wait timed out, or it was aborted): its kernels
  // have given up, later calls on it fail at once.
  std::string message = std::string("ProcessGroupLoom ") + name_ +
                        (group_.empty() ? "" : " on group '" + group_ + "'") + " failed (" +
                        loomGetErrorString(asyncError) + "): " + loomGetLastError(comm_);
  std::lock_guard<std::mutex> lock(mutex_);
  exception_ = std::make_exception_ptr(std::runtime_error(message));
  std::rethrow_exception(exception_);
}

bool LoomCudaWork::isCompleted() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (exception_) return true;
  }
  if (capturing_ || !end_.query()) return false;
  try {
    raiseIfFailed();
  } catch (...) {  // recorded in exception_
  }
  return true;
}

bool LoomCudaWork::isSuccess() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return !exception_;
}

std::exception_ptr LoomCudaWork::exception() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return exception_;
}

void LoomCudaWork::hostWait(std::chrono::milliseconds timeout) {
  const auto start = std::chrono::steady_clock::now();
  auto pause = std::chrono::microseconds(10);
  while (!end_.query()) {
    raiseIfFailed();
    if (timeout.count() > 0 && std::chrono::steady_clock::now() - start > timeout) {
      loomCommAbort(comm_);  // its kernels stop; every later op on the group fails at once
      TORCH_CHECK(false, "ProcessGroupLoom ", name_, group_.empty() ? "" : " on group '", group_,
                  group_.empty() ? "" : "'", ": wait timed out after ", timeout.count(),
                  " ms; the communicator was aborted");
    }
    std::this_thread::sleep_for(pause);
    pause = std::min(pause * 2, std::chrono::microseconds(1000));
  }
  raiseIfFailed();
}

bool LoomCudaWork::wait(std::chrono::milliseconds timeout) {
  raiseIfFailed();
  synchronize();
  if (!capturing_ && (timeout.count() > 0 || blockingWaitRequested()))
    hostWait(timeout.count() > 0 ? timeout : timeout_);
  return true;
}

void LoomCudaWork::synchronize() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (exception_) return;  // nothing was enqueued
  }
  end_.block(c10::cuda::getCurrentCUDAStream(device_.index()));
}

c10::intrusive_ptr<c10::ivalue::Future> LoomCudaWork::getFuture() { return future_; }

c10::intrusive_ptr<c10d::Work> launchOnCuda(const CudaComm& comm, int rank, c10d::OpType type,
                                            const char* name, const std::string& group,
                                            const std::vector<at::Tensor>& tensors,
                                            std::vector<at::Tensor> outputs,
                                            std::chrono::milliseconds timeout,
                                            const CudaBody& body) {
  c10::cuda::CUDAGuard deviceGuard(comm.device);
  c10::Event ready(c10::DeviceType::CUDA);
  ready.record(c10::cuda::getCurrentCUDAStream(comm.device.index()));
  ready.block(comm.stream);
  for (const at::Tensor& t : tensors) {
    if (t.defined() && t.is_cuda() && t.storage().data_ptr().get() != nullptr)
      c10::cuda::CUDACachingAllocator::recordStream(t.storage().data_ptr(), comm.stream);
  }
  std::exception_ptr error;
  // Torch work inside the op (scaling, staging copies) runs on Loom's stream too.
  c10::cuda::CUDAStreamGuard streamGuard(comm.stream);
  try {
    body(comm.comm, comm.stream.stream());
  } catch (...) {
    error = std::current_exception();
  }
  return c10::make_intrusive<LoomCudaWork>(rank, type, name, group, comm, std::move(outputs), error,
                                           timeout);
}

}  // namespace loom::torchbackend

#endif  // LOOM_TORCH_CUDA
