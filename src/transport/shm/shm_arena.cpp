#include "transport/shm/shm_arena.hpp"

#include <cstring>
#include <new>

#include "base/error.hpp"

namespace loom {

namespace {
constexpr uint64_t kArenaMagic = 0x4c4f4f4d41524e41ull;  // "LOOMARNA"
size_t roundUp(size_t value, size_t to) { return (value + to - 1) / to * to; }
}  // namespace

ArenaLayout ArenaLayout::compute(int nranks, size_t slotBytes, size_t channelBytes) {
  ArenaLayout layout;
  layout.nranks = nranks;
  layout.slotBytes = roundUp(slotBytes, 4096);
  layout.channelBytes = roundUp(channelBytes, kCacheLine);
  size_t offset = roundUp(sizeof(ArenaHeader), 4096);
  layout.flagsOffset = offset;
  offset = roundUp(offset + sizeof(RankFlags) * nranks, 4096);
  layout.slotsOffset = offset;
  offset += layout.slotBytes * 4 * nranks;
  layout.channelsOffset = offset;
  size_t pairs = static_cast<size_t>(nranks) * nranks * 2;  // diagonal unused; keeps indexing simple
  offset += pairs * (sizeof(ChannelHeader) + layout.channelBytes);
  layout.totalBytes = roundUp(offset, 4096);
  return layout;
}

ShmArena ShmArena::create(const std::string& name, const ArenaLayout& layout) {
  ShmArena arena;
  arena.layout_ = layout;
  arena.segment_ = ShmSegment::create(name, layout.totalBytes);
  // A fresh tmpfs file reads as zeros: counters, heads and tails start at 0 without touching the
  // (mostly untouched, so unbacked) data pages.
  ArenaHeader* h = new (arena.segment_.data()) ArenaHeader();
  h->magic = kArenaMagic;
  h->nranks = static_cast<uint32_t>(layout.nranks);
  h->slotBytes = layout.slotBytes;
  h->channelBytes = layout.channelBytes;
  h->abortCode.store(0);
  h->abortRank.store(-1);
  return arena;
}

ShmArena ShmArena::attach(const std::string& name, const ArenaLayout& layout) {
  ShmArena arena;
  arena.layout_ = layout;
  arena.segment_ = ShmSegment::open(name, layout.totalBytes);
  const ArenaHeader* h = arena.header();
  if (h->magic != kArenaMagic || h->nranks != static_cast<uint32_t>(layout.nranks) ||
      h->slotBytes != layout.slotBytes || h->channelBytes != layout.channelBytes)
    LOOM_THROW(loomInternalError, "shared segment ", name,
               " does not match this communicator's layout (different Loom versions or settings "
               "such as LOOM_SHM_CHUNK_BYTES across ranks?)");
  return arena;
}

ChannelHeader* ShmArena::channelHeader(ChannelClass cls, int from, int to) const {
  size_t n = static_cast<size_t>(layout_.nranks);
  size_t index = (static_cast<size_t>(cls) * n + from) * n + to;
  return reinterpret_cast<ChannelHeader*>(segment_.data() + layout_.channelsOffset +
                                          index * (sizeof(ChannelHeader) + layout_.channelBytes));
}

void ShmArena::raiseAbort(int32_t code, int rank, const std::string& reason) const {
  ArenaHeader* h = header();
  int32_t expected = 0;
  if (h->abortCode.compare_exchange_strong(expected, -1)) {
    // -1 marks "being written" so that readers never see a half-copied reason.
    std::strncpy(h->abortReason, reason.c_str(), sizeof(h->abortReason) - 1);
    h->abortRank.store(rank);
    h->abortCode.store(code == 0 ? loomInternalError : code, std::memory_order_release);
  }
}

}  // namespace loom
