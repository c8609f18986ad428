#include "algorithms/ring_steps.hpp"

#include "algorithms/partition.hpp"

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

void allReduceSteps(std::vector<RingStep>& steps, int r, int n, uint64_t count, size_t elementBytes,
                    BufferRef input, BufferRef region, int lastDivisor) {
  auto seg = [&](int i) { return sliceOf(count, n, ((i % n) + n) % n); };
  steps.clear();
  for (int k = 0; k < n - 1; ++k) {  // reduce-scatter
    Range out = seg(r - k), in = seg(r - k - 1);
    RingStep st;
    st.send = (k == 0 ? input : region).at(out.offset * elementBytes);
    st.sendBytes = out.count * elementBytes;
    st.sendAfterPrevRecv = k > 0;
    st.recvDst = region.at(in.offset * elementBytes);
    st.recvBytes = in.count * elementBytes;
    st.reduce = true;
    st.reduceWith = input.at(in.offset * elementBytes);
    st.divisor = k == n - 2 ? lastDivisor : 1;
    st.toOutput = true;
    steps.push_back(st);
  }
  for (int k = 0; k < n - 1; ++k) {  // all-gather
    Range out = seg(r + 1 - k), in = seg(r - k);
    RingStep st;
    st.send = region.at(out.offset * elementBytes);
    st.sendBytes = out.count * elementBytes;
    st.sendAfterPrevRecv = true;
    st.recvDst = region.at(in.offset * elementBytes);
    st.recvBytes = in.count * elementBytes;
    st.toOutput = true;
    steps.push_back(st);
  }
}

}  // namespace loom
