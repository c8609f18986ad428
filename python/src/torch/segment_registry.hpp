// LOOM_TORCH_REGISTER_SEGMENTS=1: every segment PyTorch's CUDA caching allocator holds on a
// group's device is registered with the group's CUDA communicator (loomCommRegister), as
// PyTorch's NCCL backend does with TORCH_NCCL_USE_TENSOR_REGISTER_ALLOCATOR_HOOK, so that
// collectives on any tensor the allocator made run zero-copy. Segments that exist when the
// communicator is made come from the allocator's snapshot; later ones from a trace tracker that
// registers on SEGMENT_ALLOC and deregisters on SEGMENT_FREE.
//
// The allocator keeps its trackers for the life of the process and cannot remove one, so the
// tracker holds a weak reference only: once the registry is gone it does nothing. Every rank of
// a group must set the variable alike (a call on registered buffers needs them registered on
// every rank). Segments Loom cannot share (expandable segments: cuMemCreate) stay unregistered,
// alike on every rank that uses the same allocator settings.
#pragma once

#ifdef LOOM_TORCH_CUDA

#include <c10/cuda/CUDACachingAllocator.h>

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>

#include "loom/loom.h"

namespace loom::torchbackend {

class SegmentRegistry {
 public:
  // Null unless LOOM_TORCH_REGISTER_SEGMENTS=1. Registers the device's segments now and attaches
  // the tracker.
  static std::shared_ptr<SegmentRegistry> attachIfEnabled(loomComm_t comm, int device);
  SegmentRegistry(loomComm_t comm, int device) : comm_(comm), device_(device) {}
  // Deregisters every segment (before the communicator is destroyed).
  ~SegmentRegistry();
  SegmentRegistry(const SegmentRegistry&) = delete;
  SegmentRegistry& operator=(const SegmentRegistry&) = delete;

  size_t registeredCount();

 private:
  void onTrace(const c10::cuda::CUDACachingAllocator::TraceEntry& entry);
  void add(uintptr_t address, size_t bytes);
  void remove(uintptr_t address);

  std::mutex mutex_;
  loomComm_t comm_;
  int device_;
  std::map<uintptr_t, loomRegistration_t> registered_;  // by segment address
  bool warned_ = false;
};

}  // namespace loom::torchbackend

#endif  // LOOM_TORCH_CUDA
