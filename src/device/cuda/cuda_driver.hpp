// The few CUDA driver entry points Loom uses, found through the runtime
// (cudaGetDriverEntryPointByVersion) so that libloom still links no libcuda and loads without a
// GPU: an allocation's base (to export a registered buffer that starts inside one), the stream
// memory operations of the copy-engine collectives (flags written and awaited by the stream
// itself, no kernel), the virtual memory calls that share cuMem memory between processes, and the
// primary context's state (whether cudaDeviceReset destroyed what a communicator allocated).
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

  // Like allocationOf, without throwing: false when ptr is not mapped device memory. For cuMem
  // memory the range is the one physical allocation mapped at ptr, not the whole reservation.
  bool addressRange(const void* ptr, char*& base, size_t& size) const;

  // Whether this device can run 64-bit stream memory operations (the copy-engine collectives).
  bool streamMemOps(int device) const;
  // Stream-ordered: *addr = value after the stream's earlier work (with a memory barrier).
  void writeValue(cudaStream_t stream, uint64_t* addr, uint64_t value) const;
  // Stream-ordered: later work waits until *addr >= value.
  void waitAtLeast(cudaStream_t stream, uint64_t* addr, uint64_t value) const;

  // The identity of `ordinal`'s primary context: a number unique for the process's life
  // (cuCtxGetId), 0 when the context is not active (reset, torn down at exit, never made) or the
  // driver cannot tell. Creates no context.
  unsigned long long primaryContextId(int ordinal) const;
  // Whether `ordinal`'s primary context is active (cheap: no context is retained). False after
  // cudaDeviceReset until the next CUDA call makes a new one.
  bool primaryContextActive(int ordinal) const;

  // The virtual memory entry points (cuMem*); all null when the driver lacks any of them.
  struct Vmm {
    decltype(&cuMemRetainAllocationHandle) retainAllocationHandle = nullptr;
    decltype(&cuMemGetAllocationPropertiesFromHandle) getAllocationProperties = nullptr;
    decltype(&cuMemExportToShareableHandle) exportToShareableHandle = nullptr;
    decltype(&cuMemImportFromShareableHandle) importFromShareableHandle = nullptr;
    decltype(&cuMemAddressReserve) addressReserve = nullptr;
    decltype(&cuMemAddressFree) addressFree = nullptr;
    decltype(&cuMemMap) map = nullptr;
    decltype(&cuMemUnmap) unmap = nullptr;
    decltype(&cuMemSetAccess) setAccess = nullptr;
    decltype(&cuMemRelease) release = nullptr;
    bool available() const { return release != nullptr; }
  };
  const Vmm& vmm() const { return vmm_; }

 private:
  Vmm vmm_;
  decltype(&cuMemGetAddressRange) getAddressRange_ = nullptr;
  decltype(&cuDeviceGetAttribute) getAttribute_ = nullptr;
  decltype(&cuStreamWriteValue64) writeValue64_ = nullptr;
  decltype(&cuStreamWaitValue64) waitValue64_ = nullptr;
  decltype(&cuDeviceGet) deviceGet_ = nullptr;
  decltype(&cuDevicePrimaryCtxGetState) primaryCtxGetState_ = nullptr;
  decltype(&cuDevicePrimaryCtxRetain) primaryCtxRetain_ = nullptr;
  decltype(&cuDevicePrimaryCtxRelease) primaryCtxRelease_ = nullptr;
  decltype(&cuCtxGetId) ctxGetId_ = nullptr;
};

}  // namespace loom
