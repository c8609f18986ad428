// The ring as schedule operations, shared by every ring algorithm: a sequence of steps, each
// sending one range to the right neighbour while receiving another from the left one (copied, or
// reduced with a local operand). A step's send may stream what the previous step is still
// receiving (exec/schedule.hpp's streamAfter), which pipelines a step's bytes through the ring
// and keeps it deadlock-free over bounded channels.
#pragma once

#include <cstdint>
#include <span>

#include "exec/schedule.hpp"

namespace loom {

struct RingStep {
  BufferRef send;  // what goes to the right neighbour
  uint64_t sendBytes = 0;
  bool sendAfterPrevRecv = false;  // send bytes only as the previous step's receive lands
  BufferRef recvDst;               // where the left neighbour's data lands
  uint64_t recvBytes = 0;
  bool reduce = false;    // recvDst = reduceWith op incoming
  BufferRef reduceWith;   // (may be recvDst itself: in place)
  int divisor = 1;        // applied after reducing (average's last step)
  bool toOutput = false;  // the receive writes part of the call's output
  // Operations that must be done first (kNone: none): what writes the range a send that does
  // not stream reads, and what writes the reducing receive's `reduceWith`.
  uint32_t sendReady = ~uint32_t{0};
  uint32_t reduceReady = ~uint32_t{0};
};

struct RingOps {
  static constexpr uint32_t kNone = ~uint32_t{0};
  uint32_t lastRecv = kNone;  // the last receiving operation (its lane finishes with it)
};

// Appends the ring's operations. `left` and `right` are ranks of the communicator; `reduction`'s
// divisor is replaced by each step's. Every operation that reads a local operand (a step's send
// that does not stream, a reducing receive's `reduceWith`) also waits for each op of
// `inputReady`: what must have written that operand first.
RingOps appendRing(Schedule& s, int left, int right, std::span<const RingStep> steps,
                   const Reduction& reduction, std::span<const uint32_t> inputReady = {});

// The steps of a ring allreduce of `count` elements of `elementBytes` on ring position `r` of `n`
// (slices by sliceOf): a reduce-scatter, then an all-gather, into `steps` (cleared). The rank's
// own data is read from `input` (the first send, every reduction's other operand) and received
// into `region`; they are the same buffer where the ring runs in place. The reduce-scatter's last
// step divides by `lastDivisor` (average).
void allReduceSteps(std::vector<RingStep>& steps, int r, int n, uint64_t count, size_t elementBytes,
                    BufferRef input, BufferRef region, int lastDivisor);

}  // namespace loom
