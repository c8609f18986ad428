// The device adaptor: everything the upper layers need from the device that holds a rank's buffers.
// The CPU adaptor (cpu/) is the reference; a CUDA adaptor implements the same contract with kernels
// and streams. Algorithms move and reduce data only through this interface.
#pragma once

#include <cstddef>
#include <memory>
#include <string>

#include "loom/loom.h"

namespace loom {

enum class DeviceKind { kCpu = 0, kCuda = 1 };

class Device {
 public:
  virtual ~Device() = default;
  virtual DeviceKind kind() const = 0;
  virtual std::string vendor() const = 0;  // "cpu", "nvidia", ...
  virtual std::string name() const = 0;    // model name, for logs and loom-info
  virtual int index() const = 0;           // device ordinal on its host (-1 for the host CPU)
  virtual std::string busId() const { return ""; }  // PCI bus id of an accelerator

  virtual void* allocate(size_t bytes) = 0;
  virtual void release(void* ptr) = 0;
  // Copies between buffers of this device, or between this device and host memory (shared
  // segments live in host memory).
  virtual void copy(void* dst, const void* src, size_t bytes) = 0;
  // The same, for output that nobody reads soon (a large collective's result): may bypass caches.
  virtual void copyToOutput(void* dst, const void* src, size_t bytes) { copy(dst, src, bytes); }
  // dst = srcs[0] op srcs[1] op ... (in index order), divided by divisor when divisor > 1.
  virtual void reduce(void* dst, const void* const* srcs, int nsrc, size_t count,
                      loomDataType_t dtype, loomRedOp_t op, int accum, int divisor) = 0;
};

// Creates the adaptor for a config string: "cpu" (default), "cuda" (the calling thread's current
// CUDA device) or "cuda:N". Throws loomInvalidArgument for anything else, and for "cuda" in a
// build without CUDA or on a machine without that GPU.
std::unique_ptr<Device> createDevice(const std::string& spec);

std::unique_ptr<Device> createCpuDevice();
std::unique_ptr<Device> createCudaDevice(const std::string& spec);  // device/cuda/cuda_device.cpp

}  // namespace loom
