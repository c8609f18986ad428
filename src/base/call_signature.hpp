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

// The current call's signature and how far it has been checked; one per communicator, shared by
// every context and channel of it. Set before each collective runs.
struct CallCheck {
  bool enabled = false;
  CallSignature mine;
  // The call before: a network channel may find, at the start of this call, what a peer sent in
  // the previous one that no receive took (each rank only sent, as two broadcast roots do).
  CallSignature previous;
  // The arena: the call whose first step already compared every rank's signature.
  uint64_t verifiedSeq = ~uint64_t{0};
};

// The start of every mismatch message: a peer that learns of the failure through the arena's
// abort word reports it as the same misuse (loomInvalidUsage), not as a remote error.
inline constexpr const char* kMismatchMessage = "collectives differ across ranks";

}  // namespace loom
