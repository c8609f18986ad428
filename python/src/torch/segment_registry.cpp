#include "segment_registry.hpp"

#ifdef LOOM_TORCH_CUDA

#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace loom::torchbackend {

namespace alloc = c10::cuda::CUDACachingAllocator;

std::shared_ptr<SegmentRegistry> SegmentRegistry::attachIfEnabled(loomComm_t comm, int device) {
  const char* setting = std::getenv("LOOM_TORCH_REGISTER_SEGMENTS");
  if (setting == nullptr || std::strcmp(setting, "1") != 0) return nullptr;
  auto registry = std::make_shared<SegmentRegistry>(comm, device);
  try {
    // Attached before the snapshot is read: a segment made in between is seen twice, and add()
    // replaces a registration at the same address.
    std::weak_ptr<SegmentRegistry> weak = registry;
    alloc::attachAllocatorTraceTracker([weak](const alloc::TraceEntry& entry) {
      if (std::shared_ptr<SegmentRegistry> r = weak.lock()) r->onTrace(entry);
    });
    for (const alloc::SegmentInfo& segment : alloc::snapshot().segments)
      if (segment.device == device && !segment.is_expandable)
        registry->add(static_cast<uintptr_t>(segment.address), segment.total_size);
  } catch (const std::exception& e) {
    // An allocator backend without traces or snapshots (cudaMallocAsync): the group works
    // unregistered, as on every rank with the same allocator settings.
    std::fprintf(stderr,
                 "loom: LOOM_TORCH_REGISTER_SEGMENTS: this allocator cannot report its segments "
                 "(%s); collectives run unregistered\n",
                 e.what());
    return nullptr;
  }
  return registry;
}

SegmentRegistry::~SegmentRegistry() {
  std::lock_guard<std::mutex> lock(mutex_);
  for (auto& [address, registration] : registered_) loomCommDeregister(comm_, registration);
  registered_.clear();
}

size_t SegmentRegistry::registeredCount() {
  std::lock_guard<std::mutex> lock(mutex_);
  return registered_.size();
}

void SegmentRegistry::onTrace(const alloc::TraceEntry& entry) {
  if (entry.device_ != device_) return;
  if (entry.action_ == alloc::TraceEntry::SEGMENT_ALLOC)
    add(static_cast<uintptr_t>(entry.addr_), entry.size_);
  else if (entry.action_ == alloc::TraceEntry::SEGMENT_FREE)
    remove(static_cast<uintptr_t>(entry.addr_));
}

void SegmentRegistry::add(uintptr_t address, size_t bytes) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = registered_.find(address);
  if (it != registered_.end()) {
    // The same segment seen again (snapshot and tracker) or, were a free ever missed, a new
    // segment at a freed one's address: the old registration must not name it.
    loomCommDeregister(comm_, it->second);
    registered_.erase(it);
  }
  loomRegistration_t registration = nullptr;
  const loomResult_t result =
      loomCommRegister(comm_, reinterpret_cast<void*>(address), bytes, &registration);
  if (result == loomSuccess) {
    registered_[address] = registration;
  } else if (!warned_) {
    // Calls on it run as on any buffer; no rank's call fails for it.
    warned_ = true;
    std::fprintf(stderr,
                 "loom: LOOM_TORCH_REGISTER_SEGMENTS: a segment of PyTorch's allocator could not "
                 "be registered (%s); collectives on it run unregistered\n",
                 loomGetLastError(comm_));
  }
}

void SegmentRegistry::remove(uintptr_t address) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = registered_.find(address);
  if (it == registered_.end()) return;
  loomCommDeregister(comm_, it->second);
  registered_.erase(it);
}

}  // namespace loom::torchbackend

#endif  // LOOM_TORCH_CUDA
