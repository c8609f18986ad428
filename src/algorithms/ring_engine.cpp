#include "algorithms/ring_engine.hpp"

#include <algorithm>

#include "base/dtype.hpp"

namespace loom {

void runRing(const AlgoContext& ctx, const std::vector<RingStep>& steps, const RingReduction& red) {
  // Neighbours as ranks of this context (a sub-group's check translates them).
  const int rightRank = (ctx.rank + 1) % ctx.nranks;
  const int leftRank = (ctx.rank - 1 + ctx.nranks) % ctx.nranks;
  Channel& right = ctx.channel(rightRank);
  Channel& left = ctx.channel(leftRank);
  size_t esize = dtypeSize(red.dtype);
  size_t nsteps = steps.size();
  size_t sendStep = 0, sendPos = 0, recvStep = 0, recvPos = 0;
  bool sendBlocked = false;  // the last send attempt found the channel full

  auto progress = [&]() -> bool {
    bool moved = false;
    sendBlocked = false;
    while (sendStep < nsteps && sendPos == steps[sendStep].sendBytes) ++sendStep, sendPos = 0;
    if (sendStep < nsteps) {
      const RingStep& s = steps[sendStep];
      size_t limit = s.sendBytes;
      if (s.sendAfterPrevRecv && sendStep > 0 && recvStep < sendStep)
        limit = recvStep == sendStep - 1 ? recvPos : 0;
      size_t want = limit - sendPos;
      if (limit < s.sendBytes) want &= ~size_t{7};  // partial sends stay 8-byte granular
      if (want > 0) {
        size_t sent = right.trySend(s.send + sendPos, want);
        sendPos += sent;
        moved |= sent > 0;
        sendBlocked = sent < want;
      }
    }
    while (recvStep < nsteps && recvPos == steps[recvStep].recvBytes) ++recvStep, recvPos = 0;
    if (recvStep < nsteps && steps[recvStep].reduceWith == nullptr && left.receivesDirect()) {
      // Plain copies land straight in their destination (a network channel reads the kernel's
      // buffer into it); steps start and end transfers alike on both ends, so this never
      // splits one.
      const RingStep& s = steps[recvStep];
      size_t n = left.tryReceive(s.recvDst + recvPos, s.recvBytes - recvPos);
      recvPos += n;
      moved |= n > 0;
    } else if (recvStep < nsteps) {
      const RingStep& s = steps[recvStep];
      std::span<const char> span = left.peek(s.recvBytes - recvPos);
      size_t n = std::min(span.size(), s.recvBytes - recvPos);
      if (n > 0) {
        char* dst = s.recvDst + recvPos;
        if (s.reduceWith != nullptr) {
          const void* srcs[2] = {s.reduceWith + recvPos, span.data()};
          ctx.device->reduce(dst, srcs, 2, n / esize, red.dtype, red.op, red.accum, s.divisor);
        } else {
          ctx.device->copy(dst, span.data(), n);
        }
        left.consume(n);
        recvPos += n;
        moved = true;
      }
    }
    return moved;
  };

  auto sendsDone = [&] {
    while (sendStep < nsteps && sendPos == steps[sendStep].sendBytes) ++sendStep, sendPos = 0;
    return sendStep == nsteps;
  };
  auto recvsDone = [&] {
    while (recvStep < nsteps && recvPos == steps[recvStep].recvBytes) ++recvStep, recvPos = 0;
    return recvStep == nsteps;
  };
  auto finished = [&] { return sendsDone() && recvsDone(); };
  // Only a neighbour this rank still needs may fail the wait: the right one can finish its last
  // receive and exit while this rank still waits for its own last step from the left.
  auto checkNeighbours = [&] {
    if (!recvsDone()) ctx.check(leftRank);
    if (!sendsDone()) ctx.check(rightRank);
  };
  // A send held back by its own step's receive waits on the left channel only.
  const bool networked = left.pollFd(false) >= 0 || right.pollFd(true) >= 0;
  auto gather = [&](PollSet& set) {
    if (networked) set.markNetworked();
    if (!recvsDone()) left.addPollFds(set, false);
    if (sendBlocked) right.addPollFds(set, true);
  };
  while (!finished()) {
    if (!progress()) waitUntil(progress, checkNeighbours, gather, *ctx.pollSet, ctx.peers);
  }
}

}  // namespace loom
