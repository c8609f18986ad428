// The shared-memory arena of one communicator on one host: per-rank step flags, per-rank staging
// slots for the one-shot and pipelined collectives, a byte-stream channel for every ordered pair of
// ranks, and a job-wide abort word. One segment per communicator, created by its first local rank.
//
// Flag protocol (see algorithms/shm_stage.hpp): each rank owns three monotonically increasing
// counters (in, red, done) that only it writes; a waiting rank only reads. Step numbers are shared
// by all ranks because ranks issue collectives in the same order.
#pragma once

#include <atomic>
#include <cstdint>
#include <string>

#include "base/shm_segment.hpp"
#include "base/wait.hpp"
#include "loom/loom.h"

namespace loom {

constexpr size_t kCacheLine = 64;

struct alignas(kCacheLine) PaddedCounter {
  std::atomic<uint64_t> value{0};
  char pad[kCacheLine - sizeof(std::atomic<uint64_t>)];
};

// The word of `in` and `done`: the step in the high 40 bits, the 24-bit hash of the signature of
// the call the step belongs to (base/call_signature.hpp; 0 with the check off) in the low bits, so
// a rank that sees a peer's arrival compares the hashes in the same load. Steps compare modulo
// 2^40 (ranks are never 2^39 steps apart), so the word may wrap.
constexpr int kStepShift = 24;
constexpr uint64_t kHashMask = (uint64_t{1} << kStepShift) - 1;
inline uint64_t arrivalWord(uint64_t step, uint32_t hash) { return step << kStepShift | hash; }
inline bool arrivedAt(uint64_t word, uint64_t step) {
  return static_cast<int64_t>(word - (step << kStepShift)) >= 0;
}
inline bool arrivedExactly(uint64_t word, uint64_t step) {
  return ((word >> kStepShift) ^ step) << kStepShift == 0;
}

// `in` and `done`: step s's word in word[s & 3], so a reader that checks step s reads that step's
// word (and hash) even when the owner has moved on: a rank reads another's `in` of s while at s,
// and its `done` of s at most two steps later, and no rank gets more than one step ahead of the
// slowest one's `done` plus two.
struct alignas(kCacheLine) StepWords {
  std::atomic<uint64_t> word[4] = {0, 0, 0, 0};
  std::atomic<uint64_t>& of(uint64_t step) { return word[step & 3]; }
  const std::atomic<uint64_t>& of(uint64_t step) const { return word[step & 3]; }
};
static_assert(sizeof(StepWords) == kCacheLine);

// The whole signature (packed into 12 bytes) of a rank's last four steps, slot step & 3, written
// right after the step's first flag word and tagged with the step; read only when a hash differs
// (for the message). A rank rewrites a step's slot four steps later, after every rank's `done` of
// two steps later. In pages of their own (ArenaLayout), away from the polled flags.
struct alignas(2 * kCacheLine) SignatureSlots {
  std::atomic<uint64_t> countSeq[4];  // count (48 bits) | call number (low 16 bits) << 48
  std::atomic<uint32_t> shape[4];     // func | dtype << 4 | op << 8 | (accum+1) << 11 | root << 16
  std::atomic<uint64_t> step[4];      // the step whose signature the slot holds (release)
};

// What a rank's peers on its host see of its calls, whatever the algorithm: the last collective it
// entered and the last it finished (call numbers), the collective's kind and when it entered it.
// Written by its flight recorder (comm/flight_recorder.hpp); read when a wait for it times out, to
// say whether it is late, stuck in an earlier call or never came (comm/hang_report.cpp).
struct alignas(kCacheLine) CallProgress {
  std::atomic<uint64_t> entered{0};
  std::atomic<uint64_t> finished{0};
  std::atomic<int64_t> enteredNs{0};  // steady clock
  std::atomic<uint32_t> func{0};
  // 1 once the rank destroyed its communicator: a peer still waiting for it will wait in vain.
  std::atomic<uint32_t> destroyed{0};
};

struct RankFlags {
  StepWords in;       // arrivalWord of the step whose input this rank has staged (or, without
                      // input, at which it arrived)
  PaddedCounter red;  // step whose reduced slice this rank has published
  StepWords done;     // arrivalWord of the step after which this rank reads nothing more of
                      // anyone's slots
};

struct ArenaHeader {
  uint64_t magic;
  uint32_t nranks;
  uint32_t pad0;
  uint64_t slotBytes;
  uint64_t channelBytes;
  // The first failure: (rank + 1) << 8 | loomResult_t, 0 while none. One word, so a rank that
  // dies while reporting never leaves it half-written; the reason sits in the rank's own slot.
  alignas(kCacheLine) std::atomic<uint64_t> abortWord;
};

constexpr size_t kAbortReasonBytes = 1024;  // a mismatch message names every rank

struct ArenaAbort {
  loomResult_t code = loomSuccess;
  int rank = -1;
  std::string reason;
};

struct alignas(kCacheLine) ChannelHeader {
  PaddedCounter head;  // total bytes written by the sender
  PaddedCounter tail;  // total bytes consumed by the receiver
};

struct ArenaLayout {
  int nranks = 0;
  size_t slotBytes = 0;  // one staging slot (a rank has 2 input and 2 output slots)
  // Rounds the requested sizes up to what every algorithm needs (pages; a slot fits one 8-byte
  // element per rank twice; a channel at least 4 KiB).
  size_t channelBytes = 0;  // ring capacity of each pair channel (multiple of 64)
  size_t flagsOffset = 0, presenceOffset = 0, progressOffset = 0, signaturesOffset = 0,
         reasonsOffset = 0, slotsOffset = 0, channelsOffset = 0, totalBytes = 0;
  static ArenaLayout compute(int nranks, size_t slotBytes, size_t channelBytes);
};

// Kinds of pair channel: collectives and user point-to-point never share a byte stream, so that a
// user's send cannot be mistaken for a collective's data.
enum class ChannelClass { kCollective = 0, kPointToPoint = 1 };

class ShmArena {
 public:
  // The first local rank creates the segment; the others attach with the same name and layout.
  static ShmArena create(const std::string& name, const ArenaLayout& layout);
  static ShmArena attach(const std::string& name, const ArenaLayout& layout);
  ShmArena() = default;

  void unlinkName() { segment_.unlink(); }
  const ArenaLayout& layout() const { return layout_; }
  int nranks() const { return layout_.nranks; }
  ArenaHeader* header() const { return reinterpret_cast<ArenaHeader*>(segment_.data()); }
  RankFlags& flags(int rank) const {
    return reinterpret_cast<RankFlags*>(segment_.data() + layout_.flagsOffset)[rank];
  }
  // Every rank's WaitPresence line, rank 0 first (base/wait.hpp: whom a waiter may yield to).
  WaitPresence* presence() const {
    return reinterpret_cast<WaitPresence*>(segment_.data() + layout_.presenceOffset);
  }
  CallProgress& progress(int rank) const {
    return reinterpret_cast<CallProgress*>(segment_.data() + layout_.progressOffset)[rank];
  }
  SignatureSlots& signatures(int rank) const {
    return reinterpret_cast<SignatureSlots*>(segment_.data() + layout_.signaturesOffset)[rank];
  }
  // Staging slots: which = 0/1 alternates between steps (double buffering).
  char* inSlot(int rank, uint64_t step) const { return slot(rank, 0, step & 1); }
  char* outSlot(int rank, uint64_t step) const { return slot(rank, 1, step & 1); }
  size_t slotBytes() const { return layout_.slotBytes; }

  ChannelHeader* channelHeader(ChannelClass cls, int from, int to) const;
  char* channelData(ChannelClass cls, int from, int to) const {
    return reinterpret_cast<char*>(channelHeader(cls, from, to)) + sizeof(ChannelHeader);
  }
  size_t channelBytes() const { return layout_.channelBytes; }

  // The first failure wins; later ones keep the first reason.
  void raiseAbort(loomResult_t code, int rank, const std::string& reason) const;
  // The failure raised by any rank, if one was (cheap: one atomic load when none was).
  bool aborted() const { return header()->abortWord.load(std::memory_order_acquire) != 0; }
  ArenaAbort abortInfo() const;

 private:
  char* slot(int rank, int kind, uint64_t which) const {
    size_t index = (static_cast<size_t>(rank) * 2 + kind) * 2 + which;
    return segment_.data() + layout_.slotsOffset + index * layout_.slotBytes;
  }
  ShmSegment segment_;
  ArenaLayout layout_;
};

}  // namespace loom
