#include "device_work.hpp"

#include <ATen/core/ivalue.h>
#include <c10/core/StreamGuard.h>
#include <c10/core/impl/VirtualGuardImpl.h>

#include <stdexcept>
#include <thread>

#include "loom/loom_device_plugin.h"
#include "tensor_args.hpp"

namespace loom::torchbackend {

namespace {

bool blockingWait() {
  const char* value = std::getenv("LOOM_TORCH_BLOCKING_WAIT");
  return value != nullptr && std::string(value) == "1";
}

}  // namespace

std::vector<DevicePlugin> torchPlugins() {
  int count = 0;
  call(loomDevicePluginCount(&count), "device plug-ins", nullptr, "");
  std::vector<DevicePlugin> out;
  for (int i = 0; i < count; ++i) {
    loomDevicePluginInfo_t info{};
    call(loomDevicePluginGetInfo(i, &info), "device plug-ins", nullptr, "");
    if (info.torchDeviceType != nullptr) out.push_back({info.kind, info.torchDeviceType});
  }
  return out;
}

std::optional<DevicePlugin> pluginFor(c10::DeviceType type) {
  // The name torch gives the type: a renamed PrivateUse1 device has its new name.
  const std::string name = c10::DeviceTypeName(type, /*lower_case=*/true);
  for (DevicePlugin& p : torchPlugins())
    if (p.torchType == name) return p;
  return std::nullopt;
}

void attachStream(DeviceComm& comm) {
  c10::impl::VirtualGuardImpl guard(comm.device.type());
  comm.stream = guard.getNewStream(comm.device);
  call(loomDevicePluginTorchStream(comm.kind.c_str(), comm.device.index(), comm.stream.id(),
                                   &comm.loomStream),
       "init (the plug-in's stream)", nullptr, "");
}

LoomDeviceWork::LoomDeviceWork(int rank, c10d::OpType type, const char* name, std::string group,
                               const DeviceComm& comm, std::vector<at::Tensor> outputs,
                               std::exception_ptr error, std::chrono::milliseconds timeout)
    : Work(rank, type),
      name_(name),
      group_(std::move(group)),
      comm_(comm.comm),
      device_(comm.device),
      outputs_(std::move(outputs)),
      end_(comm.device.type()),
      timeout_(timeout) {
  future_ = c10::make_intrusive<at::ivalue::Future>(c10::ListType::create(c10::TensorType::get()),
                                                    std::vector<c10::Device>{device_});
  if (error) {
    finish(error);
    future_->setError(error);
    return;
  }
  end_.record(comm.stream);
  // The future's value is ready on Loom's stream: its callbacks (DDP comm hooks) follow it.
  c10::StreamGuard guard(comm.stream);
  future_->markCompleted(c10::IValue(outputs_));
}

void LoomDeviceWork::raiseIfFailed() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (exception_) std::rethrow_exception(exception_);
  }
  loomResult_t asyncError = loomSuccess;
  if (loomCommGetAsyncError(comm_, &asyncError) != loomSuccess || asyncError == loomSuccess ||
      asyncError == loomInProgress)
    return;
  std::string message = std::string("ProcessGroupLoom ") + name_ +
                        (group_.empty() ? "" : " on group '" + group_ + "'") + " failed (" +
                        loomGetErrorString(asyncError) + "): " + loomGetLastError(comm_);
  std::lock_guard<std::mutex> lock(mutex_);
  exception_ = std::make_exception_ptr(std::runtime_error(message));
  std::rethrow_exception(exception_);
}

bool LoomDeviceWork::isCompleted() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (exception_) return true;
  }
  if (!end_.query()) return false;
  try {
    raiseIfFailed();
  } catch (...) {  // recorded in exception_
  }
  return true;
}

bool LoomDeviceWork::isSuccess() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return !exception_;
}

std::exception_ptr LoomDeviceWork::exception() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return exception_;
}

void LoomDeviceWork::hostWait(std::chrono::milliseconds timeout) {
  const auto start = std::chrono::steady_clock::now();
  auto pause = std::chrono::microseconds(10);
  while (!end_.query()) {
    raiseIfFailed();
    if (timeout.count() > 0 && std::chrono::steady_clock::now() - start > timeout) {
      loomCommAbort(comm_);  // its stream work ends; every later op on the group fails at once
      TORCH_CHECK(false, "ProcessGroupLoom ", name_, group_.empty() ? "" : " on group '", group_,
                  group_.empty() ? "" : "'", ": wait timed out after ", timeout.count(),
                  " ms; the communicator was aborted");
    }
    std::this_thread::sleep_for(pause);
    pause = std::min(pause * 2, std::chrono::microseconds(1000));
  }
  raiseIfFailed();
}

bool LoomDeviceWork::wait(std::chrono::milliseconds timeout) {
  raiseIfFailed();
  synchronize();
  if (timeout.count() > 0 || blockingWait()) hostWait(timeout.count() > 0 ? timeout : timeout_);
  return true;
}

void LoomDeviceWork::synchronize() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (exception_) return;  // nothing was enqueued
  }
  c10::impl::VirtualGuardImpl guard(device_.type());
  end_.block(guard.getStream(device_));
}

c10::intrusive_ptr<c10d::Work> launchOnDevice(const DeviceComm& comm, int rank, c10d::OpType type,
                                              const char* name, const std::string& group,
                                              const std::vector<at::Tensor>& tensors,
                                              std::vector<at::Tensor> outputs,
                                              std::chrono::milliseconds timeout,
                                              const DeviceBody& body) {
  c10::impl::VirtualGuardImpl guard(comm.device.type());
  c10::Event ready(comm.device.type());
  ready.record(guard.getStream(comm.device));
  ready.block(comm.stream);
  for (const at::Tensor& t : tensors) {
    if (t.defined() && t.device() == comm.device && t.storage().data_ptr().get() != nullptr)
      guard.recordDataPtrOnStream(t.storage().data_ptr(), comm.stream);
  }
  std::exception_ptr error;
  // Torch work inside the op (scaling, staging copies) runs on Loom's stream too.
  c10::StreamGuard streamGuard(comm.stream);
  try {
    body(comm.comm, comm.loomStream);
  } catch (...) {
    error = std::current_exception();
  }
  return c10::make_intrusive<LoomDeviceWork>(rank, type, name, group, comm, std::move(outputs),
                                             error, timeout);
}

}  // namespace loom::torchbackend
