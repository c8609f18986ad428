#include "transport/shm/shm_arena.hpp"

#include <algorithm>
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
  // A slot holds at least one 8-byte element per rank (reduce-scatter, alltoall and scatter stage
  // a piece per destination) and alltoallv's two count tables, whatever was asked for.
  size_t minSlot = 2 * sizeof(uint64_t) * static_cast<size_t>(nranks);
  layout.slotBytes = roundUp(std::max(slotBytes, minSlot), 4096);
  layout.channelBytes = roundUp(std::max<size_t>(channelBytes, 4096), kCacheLine);
  size_t offset = roundUp(sizeof(ArenaHeader), 4096);
  layout.flagsOffset = offset;
  offset = roundUp(offset + sizeof(RankFlags) * nranks, 4096);
  layout.presenceOffset = offset;  // rewritten rarely, read by waiters: away from the step flags
  offset = roundUp(offset + sizeof(WaitPresence) * nranks, 4096);
  layout.progressOffset = offset;  // each rank's own line, written twice per call
  offset = roundUp(offset + sizeof(CallProgress) * nranks, 4096);
  layout.signaturesOffset = offset;  // pages of their own (shm_arena.hpp)
  offset = roundUp(offset + sizeof(SignatureSlots) * nranks, 4096);
  layout.reasonsOffset = offset;
  offset = roundUp(offset + kAbortReasonBytes * nranks, 4096);
  layout.slotsOffset = offset;
  offset += layout.slotBytes * 4 * nranks;
  layout.channelsOffset = offset;
  size_t pairs =
      static_cast<size_t>(nranks) * nranks * 2;  // diagonal unused; keeps indexing simple
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
  h->abortWord.store(0);
  // No rank has waited yet: none is on a core (0 would name core 0).
  for (int r = 0; r < layout.nranks; ++r) new (arena.presence() + r) WaitPresence();
  for (int r = 0; r < layout.nranks; ++r) new (&arena.progress(r)) CallProgress();
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

void ShmArena::raiseAbort(loomResult_t code, int rank, const std::string& reason) const {
  // Only this rank writes its reason slot, and before it publishes the word.
  char* mine = segment_.data() + layout_.reasonsOffset + kAbortReasonBytes * rank;
  std::strncpy(mine, reason.c_str(), kAbortReasonBytes - 1);
  mine[kAbortReasonBytes - 1] = '\0';
  uint64_t word = (static_cast<uint64_t>(rank) + 1) << 8 |
                  static_cast<uint64_t>(code == loomSuccess ? loomInternalError : code);
  uint64_t expected = 0;
  header()->abortWord.compare_exchange_strong(expected, word, std::memory_order_acq_rel);
}

ArenaAbort ShmArena::abortInfo() const {
  uint64_t word = header()->abortWord.load(std::memory_order_acquire);
  ArenaAbort info;
  if (word == 0) return info;
  info.code = static_cast<loomResult_t>(word & 0xff);
  info.rank = static_cast<int>((word >> 8) - 1);
  if (info.rank >= 0 && info.rank < layout_.nranks) {
    const char* reason = segment_.data() + layout_.reasonsOffset + kAbortReasonBytes * info.rank;
    info.reason.assign(reason, strnlen(reason, kAbortReasonBytes));
  }
  return info;
}

}  // namespace loom
