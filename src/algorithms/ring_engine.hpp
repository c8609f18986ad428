// The ring pipeline shared by every ring algorithm: a sequence of steps, each sending one range to
// the right neighbour while receiving another from the left one (copied, or reduced with a local
// operand). A step's send may start before the previous step's receive has finished: it streams
// the bytes already received (chunk-level pipelining), which is also what makes the ring
// deadlock-free with bounded channel buffers.
#pragma once

#include <vector>

#include "algorithms/context.hpp"

namespace loom {

struct RingStep {
  const char* send = nullptr;  // what goes to the right neighbour
  size_t sendBytes = 0;
  bool sendAfterPrevRecv = false;  // send bytes only as the previous step's receive lands
  char* recvDst = nullptr;         // where the left neighbour's data lands
  size_t recvBytes = 0;
  const char* reduceWith = nullptr;  // if set: recvDst = reduceWith op incoming
  int divisor = 1;                   // applied after reducing (average's last step)
};

struct RingReduction {
  loomDataType_t dtype = loomFloat32;
  loomRedOp_t op = loomSum;  // never loomAvg: pass Sum and a divisor on the last step
  int accum = -1;
};

void runRing(const AlgoContext& ctx, const std::vector<RingStep>& steps, const RingReduction& red);

}  // namespace loom
