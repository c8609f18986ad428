// ProcessGroupLoom on a device a Loom device plug-in serves (docs/plugins.md, "Torch"): torch
// tensors of the plug-in's torch device type (an out-of-tree PrivateUse1 device such as the
// emulated "loomemu" or Ascend's "npu", or "xpu") on a Loom communicator of the plug-in's kind.
//
// Ordering is the CUDA half's (cuda_work.hpp), through torch's device-generic interfaces (the
// device's guard: c10::Stream, c10::Event, recordDataPtrOnStream), which a vendor's torch
// extension implements: Loom's stream is a torch stream of the device from its pool, mapped to
// the plug-in's stream handle (the plug-in's torchStream entry, or the id itself); an op makes it
// wait for an event on the caller's current stream, records the tensors on it, enqueues Loom's
// calls there and records an end event. wait() makes the caller's current stream wait for that
// event (the host waits only with a timeout or LOOM_TORCH_BLOCKING_WAIT=1) and raises if the
// communicator failed.
#pragma once

#include <c10/core/Event.h>
#include <c10/core/Stream.h>

#include <chrono>
#include <exception>
#include <functional>
#include <optional>
#include <string>
#include <torch/csrc/distributed/c10d/Work.hpp>
#include <vector>

#include "loom/loom.h"

namespace loom::torchbackend {

// A loaded plug-in that serves a torch device type.
struct DevicePlugin {
  std::string kind;       // Loom's device kind ("loom-emu")
  std::string torchType;  // torch's device type name ("loomemu")
};

// The plug-in serving torch device type `type`, if one is loaded (LOOM_DEVICE_PLUGIN's are
// loaded first); none: nullopt.
std::optional<DevicePlugin> pluginFor(c10::DeviceType type);
// The plug-ins loaded in this process that serve a torch device type.
std::vector<DevicePlugin> torchPlugins();

struct DeviceComm {
  loomComm_t comm = nullptr;
  at::Device device{at::kCPU};
  std::string kind;
  c10::Stream stream{c10::Stream::DEFAULT, at::Device(at::kCPU)};  // Loom's stream
  loomStream_t loomStream = nullptr;                               // the plug-in's handle of it
};

// The communicator's stream for `device` of plug-in `kind`: a new stream from the device's pool.
void attachStream(DeviceComm& comm);

class LoomDeviceWork : public c10d::Work {
 public:
  LoomDeviceWork(int rank, c10d::OpType type, const char* name, std::string group,
                 const DeviceComm& comm, std::vector<at::Tensor> outputs, std::exception_ptr error,
                 std::chrono::milliseconds timeout);

  bool isCompleted() override;
  bool isSuccess() const override;
  std::exception_ptr exception() const override;
  bool wait(std::chrono::milliseconds timeout) override;
  void synchronize() override;
  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override { return future_; }

 private:
  void raiseIfFailed();
  void hostWait(std::chrono::milliseconds timeout);

  std::string name_;
  std::string group_;
  loomComm_t comm_;
  at::Device device_;
  std::vector<at::Tensor> outputs_;
  c10::Event end_;
  std::chrono::milliseconds timeout_;
  c10::intrusive_ptr<c10::ivalue::Future> future_;
};

using DeviceBody = std::function<void(loomComm_t comm, void* stream)>;
c10::intrusive_ptr<c10d::Work> launchOnDevice(const DeviceComm& comm, int rank, c10d::OpType type,
                                              const char* name, const std::string& group,
                                              const std::vector<at::Tensor>& tensors,
                                              std::vector<at::Tensor> outputs,
                                              std::chrono::milliseconds timeout,
                                              const DeviceBody& body);

}  // namespace loom::torchbackend
