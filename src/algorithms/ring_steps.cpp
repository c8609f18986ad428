#include "algorithms/ring_steps.hpp"

namespace loom {

RingOps appendRing(Schedule& s, int left, int right, std::span<const RingStep> steps,
                   const Reduction& reduction, std::span<const uint32_t> inputReady) {
  RingOps out;
  uint32_t previousRecv = RingOps::kNone;
  for (const RingStep& step : steps) {
    // Zero-byte steps are kept: a step's send streams after the previous step's receive, which
    // then completes in its lane's order, as the ring's steps do.
    const uint32_t send = s.send(right, step.send, step.sendBytes);
    if (step.sendAfterPrevRecv && previousRecv != RingOps::kNone) {
      s.streamAfter(send, previousRecv);
    } else {
      for (uint32_t ready : inputReady) s.after(send, ready);
      if (step.sendReady != RingOps::kNone) s.after(send, step.sendReady);
    }
    uint32_t recv;
    if (step.reduce) {
      Reduction r = reduction;
      r.divisor = step.divisor;
      recv = s.recvReduce(left, step.recvDst, step.reduceWith, step.recvBytes, r, step.toOutput);
      for (uint32_t ready : inputReady) s.after(recv, ready);
      if (step.reduceReady != RingOps::kNone) s.after(recv, step.reduceReady);
    } else {
      recv = s.recv(left, step.recvDst, step.recvBytes, step.toOutput);
    }
    previousRecv = recv;
    out.lastRecv = recv;
  }
  return out;
}

}  // namespace loom
