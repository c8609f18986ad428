#include "segment_registry.hpp"

#ifdef LOOM_TORCH_CUDA

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iterator>

namespace loom::torchbackend {

namespace alloc = c10::cuda::CUDACachingAllocator;

std::shared_ptr<SegmentRegistry> SegmentRegistry::attachIfEnabled(loomComm_t comm, int device) {
  const char* setting = std::getenv("LOOM_TORCH_REGISTER_SEGMENTS");
  if (setting == nullptr || std::strcmp(setting, "1") != 0) return nullptr;
  auto registry = std::make_shared<SegmentRegistry>(comm, device);
  try {
    // Attached before the snapshot is read: a segment made in between is seen twice, which
    // addSegment and mapRange both absorb.
    std::weak_ptr<SegmentRegistry> weak = registry;
    alloc::attachAllocatorTraceTracker([weak](const alloc::TraceEntry& entry) {
      if (std::shared_ptr<SegmentRegistry> r = weak.lock()) r->onTrace(entry);
    });
    for (const alloc::SegmentInfo& segment : alloc::snapshot().segments) {
      if (segment.device != device) continue;
      const auto address = static_cast<uintptr_t>(segment.address);
      if (segment.is_expandable)
        registry->mapRange(address, segment.total_size);
      else
        registry->addSegment(address, segment.total_size);
    }
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
  for (Intervals* intervals : {&segments_, &mapped_})
    for (auto it = intervals->begin(); it != intervals->end();)
      it = deregisterInterval(*intervals, it);
}

size_t SegmentRegistry::registeredCount() {
  std::lock_guard<std::mutex> lock(mutex_);
  size_t count = 0;
  for (const Intervals* intervals : {&segments_, &mapped_})
    for (const auto& [address, interval] : *intervals) count += interval.registration != nullptr;
  return count;
}

void SegmentRegistry::onTrace(const alloc::TraceEntry& entry) {
  if (entry.device_ != device_) return;
  const auto address = static_cast<uintptr_t>(entry.addr_);
  switch (entry.action_) {
    case alloc::TraceEntry::SEGMENT_ALLOC:
      addSegment(address, entry.size_);
      break;
    case alloc::TraceEntry::SEGMENT_FREE:
      removeSegment(address);
      break;
    case alloc::TraceEntry::SEGMENT_MAP:
      mapRange(address, entry.size_);
      break;
    case alloc::TraceEntry::SEGMENT_UNMAP:
      unmapRange(address, entry.size_);
      break;
    default:
      break;
  }
}

void SegmentRegistry::addSegment(uintptr_t address, size_t bytes) {
  std::lock_guard<std::mutex> lock(mutex_);
  // The same segment seen again (snapshot and tracker) or, were a free ever missed, a new
  // segment at a freed one's address: the old registration must not name it.
  auto it = segments_.find(address);
  if (it != segments_.end()) deregisterInterval(segments_, it);
  registerInterval(segments_, address, bytes);
}

void SegmentRegistry::removeSegment(uintptr_t address) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = segments_.find(address);
  if (it != segments_.end()) deregisterInterval(segments_, it);
}

void SegmentRegistry::mapRange(uintptr_t address, size_t bytes) {
  if (bytes == 0) return;
  std::lock_guard<std::mutex> lock(mutex_);
  uintptr_t start = address;
  uintptr_t end = address + bytes;
  // The first interval that overlaps the range or ends where it starts.
  auto it = mapped_.upper_bound(start);
  if (it != mapped_.begin() && std::prev(it)->first + std::prev(it)->second.bytes >= start) --it;
  // Already inside one registration (seen twice at attach): nothing changes.
  if (it != mapped_.end() && it->first <= start && it->first + it->second.bytes >= end) return;
  while (it != mapped_.end() && it->first <= end) {
    start = std::min(start, it->first);
    end = std::max(end, it->first + it->second.bytes);
    it = deregisterInterval(mapped_, it);
  }
  registerInterval(mapped_, start, end - start);
}

void SegmentRegistry::unmapRange(uintptr_t address, size_t bytes) {
  std::lock_guard<std::mutex> lock(mutex_);
  const uintptr_t end = address + bytes;
  auto it = mapped_.upper_bound(address);
  if (it != mapped_.begin() && std::prev(it)->first + std::prev(it)->second.bytes > address) --it;
  while (it != mapped_.end() && it->first < end) {
    const uintptr_t from = it->first;
    const uintptr_t to = from + it->second.bytes;
    it = deregisterInterval(mapped_, it);
    // Both pieces land before `it`: the loop does not see them again.
    if (from < address) registerInterval(mapped_, from, address - from);
    if (to > end) registerInterval(mapped_, end, to - end);
  }
}

void SegmentRegistry::registerInterval(Intervals& into, uintptr_t address, size_t bytes) {
  loomRegistration_t registration = nullptr;
  const loomResult_t result =
      loomCommRegister(comm_, reinterpret_cast<void*>(address), bytes, &registration);
  if (result != loomSuccess) {
    registration = nullptr;
    if (!warned_) {
      // Calls on it run as on any buffer where every rank was refused alike (one allocator
      // setting makes the same memory on every rank); were a rank refused alone, calls on that
      // memory would fail on every rank (loom.h, loomCommRegister).
      warned_ = true;
      std::fprintf(stderr,
                   "loom: LOOM_TORCH_REGISTER_SEGMENTS: a segment of PyTorch's allocator could "
                   "not be registered (%s); collectives on it run unregistered\n",
                   loomGetLastError(comm_));
    }
  }
  // Kept when refused too, so that later maps and unmaps still see the interval's bounds.
  into[address] = Interval{bytes, registration};
}

SegmentRegistry::Intervals::iterator SegmentRegistry::deregisterInterval(Intervals& from,
                                                                         Intervals::iterator it) {
  if (it->second.registration != nullptr) loomCommDeregister(comm_, it->second.registration);
  return from.erase(it);
}

}  // namespace loom::torchbackend

#endif  // LOOM_TORCH_CUDA
