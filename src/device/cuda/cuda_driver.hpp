// The few CUDA driver entry points Loom uses, found through the runtime
// (cudaGetDriverEntryPointByVersion) so that libloom still links no libcuda and loads without a
// GPU: an allocation's base (to export a registered buffer that starts inside one) and the stream
// memory operations of the copy-engine collectives (flags written and awaited by the stream
// itself, no kernel).
#pragma once

#include <cuda.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

namespace loom {

class CudaDriver {
 public:
  // Looks the entry points up; those missing leave their feature unavailable.
  CudaDriver();

  // The allocation that holds [ptr, ptr + bytes): its base and size. Throws loomInvalidArgument
  // when ptr is not device memory of this process.
  void allocationOf(const void* ptr, char*& base, size_t& size) const;

  // Whether this device can run 64-bit stream memory operations (the copy-engine collectives).
  bool streamMemOps(int device) const;
  // Stream-ordered: *addr = value after the stream's earlier work (with a memory barrier).
  void writeValue(cudaStream_t stream, uint64_t* addr, uint64_t value) const;
  // Stream-ordered: later work waits until *addr >= value.
  void waitAtLeast(cudaStream_t stream, uint64_t* addr, uint64_t value) const;

 private:
  decltype(&cuMemGetAddressRange) getAddressRange_ = nullptr;
  decltype(&cuDeviceGetAttribute) getAttribute_ = nullptr;
  decltype(&cuStreamWriteValue64) writeValue64_ = nullptr;
  decltype(&cuStreamWaitValue64) waitValue64_ = nullptr;
};

}  // namespace loom
