// The signature of one collective call, as every rank publishes it beside the synchronization the
// call does anyway (the arena's arrival flag, the first bytes a channel carries in the call), so
// that calls which differ across ranks fail on every rank instead of returning garbage or hanging.
// Three words: the call's number on its communicator (ranks issue collectives in the same order,
// so it is the same everywhere), the count, and the rest packed.
#pragma once

#include <cstdint>

namespace loom {

struct CallSignature {
  uint64_t seq = 0;    // the call's number on its communicator, from 1
  uint64_t count = 0;  // elements, as the C API received them
  // func | dtype << 8 | op << 16 | (accum + 1) << 24 | uint32(root) << 32; an unused field is 0.
  uint64_t shape = 0;
  friend bool operator==(const CallSignature&, const CallSignature&) = default;
};

// The 12 bytes of a signature in the arena's arrival line (transport/shm/shm_arena.hpp): the count
// modulo 2^48, the call number modulo 2^16, the root modulo 2^16; lossless in practice.
struct PackedSignature {
  uint64_t countSeq = 0;
  uint32_t shape = 0;
  friend bool operator==(const PackedSignature&, const PackedSignature&) = default;
};
inline PackedSignature pack(const CallSignature& s) {
  uint64_t func = s.shape & 0xf, dtype = (s.shape >> 8) & 0xf, op = (s.shape >> 16) & 0x7;
  uint64_t accum = (s.shape >> 24) & 0x1f, root = (s.shape >> 32) & 0xffff;
  return {(s.count & 0xffffffffffffull) | (s.seq & 0xffff) << 48,
          static_cast<uint32_t>(func | dtype << 4 | op << 8 | accum << 11 | root << 16)};
}
// 24 bits that differ, but for one chance in 2^24, between two different packed signatures: small
// enough to ride in the arena's `in` flag word beside the step (transport/shm/shm_arena.hpp), so a
// rank that sees a peer's arrival has the check in the same load (a separate load of the slot in
// the same line, taken while the peer may already be writing its next step there, cost 5-15 % of
// a sub-microsecond call). The full signature stays in the slots for the message.
inline uint32_t hash24(const PackedSignature& p) {
  uint64_t x = p.countSeq ^ (static_cast<uint64_t>(p.shape) * 0x9e3779b97f4a7c15ull);
  x ^= x >> 31;
  x *= 0xbf58476d1ce4e5b9ull;
  x ^= x >> 29;
  return static_cast<uint32_t>((x ^ x >> 24 ^ x >> 48) & 0xffffff);
}
// `near`: a call number close to the packed one's (the reader's own), to restore its high bits.
inline CallSignature unpack(const PackedSignature& p, uint64_t near) {
  uint64_t seq = near - ((near - (p.countSeq >> 48)) & 0xffff);
  uint64_t s = p.shape;
  return {seq, p.countSeq & 0xffffffffffffull,
          (s & 0xf) | ((s >> 4) & 0xf) << 8 | ((s >> 8) & 0x7) << 16 | ((s >> 11) & 0x1f) << 24 |
              ((s >> 16) & 0xffff) << 32};
}

// The current call's signature and how far it has been checked; one per communicator, shared by
// every context and channel of it. Set before each collective runs.
struct CallCheck {
  bool enabled = false;
  CallSignature mine;
  // The call before: a network channel may find, at the start of this call, what a peer sent in
  // the previous one that no receive took (each rank only sent, as two broadcast roots do).
  CallSignature previous;
  PackedSignature minePacked;
  uint32_t mineHash = 0;  // hash24(minePacked), or 0 when the check is off
  // The arena: steps at which this rank did not see every rank's `in` (it only staged, as a
  // broadcast's root), with the hash of its signature there; checked two steps later, when it
  // has waited for every rank's `done`. Step 0: none.
  struct Pending {
    uint64_t step = 0;
    uint32_t hash = 0;
  };
  Pending unverified[2];
};

// The start of every mismatch message: a peer that learns of the failure through the arena's
// abort word reports it as the same misuse (loomInvalidUsage), not as a remote error.
inline constexpr const char* kMismatchMessage = "collectives differ across ranks";

}  // namespace loom
