// What a GPU collective kernel knows about its communicator: the peers' windows as mapped into this
// process, this rank's private sequence counters and the host-visible status words. Passed to every
// kernel by value, so a captured CUDA graph replays with the same (still valid) pointers;
// everything that changes from call to call (sequence numbers) lives in device memory, not in the
// parameters.
#pragma once

#include <cstddef>
#include <cstdint>

namespace loom::cuda {

constexpr int kMaxRanks = 16;    // GPUs of one communicator on one host
constexpr int kMaxBlocks = 64;   // thread blocks of one collective kernel (= channels per peer)
constexpr int kP2PChannels = 8;  // channels of send/recv, apart from the collectives' own
constexpr int kChannels = kMaxBlocks + kP2PChannels;
constexpr int kThreads = 512;        // threads per block
constexpr int kSlotsPerChannel = 2;  // double buffering: chunk s+1 lands while s is consumed
// LL slots need not be large: LL carries small messages, and half of every packet is flags.
constexpr size_t kMaxLLSlotBytes = 32 * 1024;

// Status words in host-mapped pinned memory: the host raises `abort`; a kernel that gives up
// writes `error` (first one wins) and raises `abort` so that every other block stops too.
struct DevStatus {
  int abort;
  int error;      // DevError
  int errorPeer;  // the rank a timed-out wait was waiting for
  int waiting;    // set by kernels while a wait has lasted over a millisecond: check the peers
};

enum DevError : int {
  kDevOk = 0,
  kDevTimeout = 1,
  kDevAborted = 2,
  kDevWindowMismatch = 3,
  kDevUnmapped = 4,  // a peer's registered buffer was never mapped here within the timeout
};

// A rank's window, the part of its device (or pinned host) memory that peers write into:
//   slots   [kChannels][nranks][kSlotsPerChannel][slotBytes]: data from rank q on channel b
//   llSlots the same again for LL packets: an LL receiver must never find raw data of the simple
//           protocol where it polls for packets (data can look like a flag).
//   ready   [kChannels][nranks] uint64: last sequence number rank q posted into those slots
//   acks    [kChannels][nranks] uint64: last sequence number rank p consumed of this rank's data
//   sync    [2][kMaxBlocks][nranks] SyncFlag: the zero-copy kernels' arrival (0) and departure
//           (1) of block b of rank q (zero_copy.cu)
//   ceSync  [2][nranks] uint64: the same for the copy-engine collectives, written by the streams
// A rank's buffer registered alone (loomCommRegister), as its peers find it: the registration's
// slot and generation in the rank's board (local_registrations.hpp), and the offset into it.
// Live registrations per rank. A rank past it gets loomInvalidUsage (its call then runs
// unregistered where its peers' may not: a mismatch); torch's allocator holds far fewer segments.
constexpr int kMaxRegistrations = 4096;
constexpr uint32_t kNoSlot = 0xffffffffu;
struct BufferRef {
  uint32_t slot;  // kNoSlot: not a local registration
  uint32_t gen;
  uint64_t offset;
};

// A peer's registration as mapped here, written by the host (pinned, mapped memory): `base` is
// valid for registration `gen` once `gen` reads so.
struct ImportEntry {
  uint64_t gen;
  uint64_t base;
};

struct SyncFlag {
  uint64_t seq;
  uint64_t tag;  // arrival: what the caller passed (offsets into its windows), compared by peers
  BufferRef send, recv;  // arrival: the caller's registered buffers, for peers to map
};

struct WindowLayout {
  size_t slotBytes = 0;
  int nranks = 0;
  size_t llSlotBytes() const { return slotBytes < kMaxLLSlotBytes ? slotBytes : kMaxLLSlotBytes; }
  size_t flagBytes() const { return sizeof(uint64_t) * kChannels * nranks; }
  size_t readyOffset() const { return 0; }
  size_t acksOffset() const { return flagBytes(); }
  size_t syncOffset() const { return 2 * flagBytes(); }
  size_t syncBytes() const { return sizeof(SyncFlag) * 2 * kMaxBlocks * nranks; }
  size_t ceSyncOffset() const { return syncOffset() + syncBytes(); }
  size_t ceSyncBytes() const { return sizeof(uint64_t) * 2 * nranks; }
  size_t slotsOffset() const { return (ceSyncOffset() + ceSyncBytes() + 4095) / 4096 * 4096; }
  size_t slotsBytes(size_t bytesPerSlot) const {
    return static_cast<size_t>(kChannels) * nranks * kSlotsPerChannel * bytesPerSlot;
  }
  size_t llSlotsOffset() const { return slotsOffset() + slotsBytes(slotBytes); }
  size_t totalBytes() const { return llSlotsOffset() + slotsBytes(llSlotBytes()); }
};

struct DevComm {
  int rank;
  int nranks;
  size_t slotBytes;    // simple protocol
  size_t llSlotBytes;  // LL protocol
  uint64_t timeoutNs;
  // Indexed by rank, as mapped here (entry `rank` is this rank's own window).
  char* slots[kMaxRanks];
  char* llSlots[kMaxRanks];
  uint64_t* ready[kMaxRanks];
  uint64_t* acks[kMaxRanks];
  SyncFlag* sync[kMaxRanks];  // [2][kMaxBlocks][nranks] in each rank's window
  // This rank's counters, [kChannels][nranks]: sequence numbers sent to / received from a peer.
  uint64_t* sentSeq;
  uint64_t* recvSeq;
  uint64_t* syncSeq;  // [kMaxBlocks]: zero-copy calls block b took part in
  DevStatus* status;  // host-mapped
  // [nranks][kMaxRegistrations], host-mapped: peers' registrations as mapped here.
  const ImportEntry* imports;
};

}  // namespace loom::cuda
