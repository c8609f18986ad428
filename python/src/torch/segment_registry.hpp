// LOOM_TORCH_REGISTER_SEGMENTS=1: every segment PyTorch's CUDA caching allocator holds on a
// group's device is registered with the group's CUDA communicator (loomCommRegister), as
// PyTorch's NCCL backend does with TORCH_NCCL_USE_TENSOR_REGISTER_ALLOCATOR_HOOK, so that
// collectives on any tensor the allocator made run zero-copy. Segments that exist when the
// communicator is made come from the allocator's snapshot; later ones from a trace tracker.
//
// A cudaMalloc segment is one registration: made on SEGMENT_ALLOC, withdrawn on SEGMENT_FREE.
// An expandable segment (PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True) is one reserved
// address range whose pages the allocator maps (SEGMENT_MAP) as it grows and unmaps
// (SEGMENT_UNMAP) as it shrinks; a tensor may span pages of several growth steps, and a call
// finds a buffer only inside one registration. So the registry keeps the maximal contiguous
// mapped intervals and registers each as one: a map that touches intervals replaces them by
// their union, an unmap replaces the intervals it cuts by what is left of them. The snapshot
// reports one segment per contiguous mapped range of an expandable segment, fed in as maps.
// Costs: every growth of an interval withdraws and re-registers the whole of it; the withdrawal
// waits for all of this rank's device work (loomCommDeregister) inside the allocator's call, so
// a growth waits for the device to be idle, and a capture in global mode on another thread would
// make it fail. Each peer maps the grown interval again from descriptors, one per physical
// allocation (2 MiB or 20 MiB pages), when a call first needs it. Memory the allocator unmaps
// returns to the device only once the peers have unmapped it, at their next deregistration. Memory Loom cannot share (cuMem memory made without POSIX file descriptor
// handles: torch's expandable segments where it picks fabric handles) fails to register, is
// reported once, and runs unregistered.
//
// The allocator keeps its trackers for the life of the process and cannot remove one, so the
// tracker holds a weak reference only: once the registry is gone it does nothing. Every rank of
// a group must set the variable alike (a call on registered buffers needs them registered on
// every rank).
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
  struct Interval {
    size_t bytes;
    loomRegistration_t registration;  // null where loomCommRegister refused it
  };
  using Intervals = std::map<uintptr_t, Interval>;  // by start address

  void onTrace(const c10::cuda::CUDACachingAllocator::TraceEntry& entry);
  void addSegment(uintptr_t address, size_t bytes);
  void removeSegment(uintptr_t address);
  void mapRange(uintptr_t address, size_t bytes);
  void unmapRange(uintptr_t address, size_t bytes);
  // With mutex_ held.
  void registerInterval(Intervals& into, uintptr_t address, size_t bytes);
  Intervals::iterator deregisterInterval(Intervals& from, Intervals::iterator it);

  std::mutex mutex_;
  loomComm_t comm_;
  int device_;
  Intervals segments_;  // cudaMalloc segments
  Intervals mapped_;    // expandable segments' maximal mapped intervals
  bool warned_ = false;
};

}  // namespace loom::torchbackend

#endif  // LOOM_TORCH_CUDA
