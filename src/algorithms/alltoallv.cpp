// "direct" alltoallv through the shared arena. Step 0 stages every rank's send and receive counts,
// so every rank checks every pair the same way (a mismatch fails on all ranks alike instead of
// hanging) and learns how many steps the largest pair needs. Each later step stages, per
// destination, the next piece of what goes there; each rank copies its pieces out of every slot.
#include <algorithm>
#include <cstring>
#include <vector>

#include "algorithms/context.hpp"
#include "algorithms/families.hpp"
#include "algorithms/shm_stage.hpp"
#include "base/dtype.hpp"
#include "base/error.hpp"

namespace loom {

namespace {

size_t exchangeCounts(const AlgoContext& ctx, const CollArgs& a) {
  const int n = ctx.nranks;
  ShmStage stage(ctx);
  auto* mine = reinterpret_cast<uint64_t*>(stage.myIn());
  for (int j = 0; j < n; ++j) {
    mine[j] = a.sendCounts[j];
    mine[n + j] = a.recvCounts[j];
  }
  stage.publishIn();
  stage.waitAllIn();
  uint64_t largest = 0;
  for (int i = 0; i < n; ++i) {
    const auto* counts = reinterpret_cast<const uint64_t*>(stage.in(i));
    for (int j = 0; j < n; ++j) {
      uint64_t sent = counts[j];
      uint64_t expected = reinterpret_cast<const uint64_t*>(stage.in(j))[n + i];
      if (sent != expected) {
        stage.publishDone();
        LOOM_THROW(loomInvalidUsage, "alltoallv count mismatch: rank ", i, " sends ", sent,
                   " elements to rank ", j, ", which expects ", expected, " from it");
      }
      largest = std::max(largest, sent);
    }
  }
  stage.publishDone();
  return largest;
}

void allToAllvDirect(const AlgoContext& ctx, const CollArgs& a) {
  const int n = ctx.nranks;
  size_t esize = dtypeSize(a.dtype);
  // The communicator sizes slots for this (Comm::setUpSharedMemory).
  if (ctx.arena->slotBytes() < 2 * n * sizeof(uint64_t))
    LOOM_THROW(loomInternalError, "staging slot too small for alltoallv on ", n, " ranks");
  size_t largest = exchangeCounts(ctx, a);
  size_t piece = ctx.arena->slotBytes() / n / esize;  // elements per pair per step
  size_t steps = (largest + piece - 1) / piece;
  size_t outputBytes = 0;
  for (int i = 0; i < n; ++i) outputBytes += a.recvCounts[i] * esize;
  const char* send = static_cast<const char*>(a.send);
  char* recv = static_cast<char*>(a.recv);
  for (size_t k = 0; k < steps; ++k) {
    size_t offset = k * piece;
    auto pieceOf = [&](size_t count) {
      return offset >= count ? 0 : std::min(piece, count - offset);
    };
    ShmStage stage(ctx);
    for (int j = 0; j < n; ++j) {
      if (j == ctx.rank) continue;
      ctx.device->copy(stage.myIn() + j * piece * esize, send + (a.sendDispls[j] + offset) * esize,
                       pieceOf(a.sendCounts[j]) * esize);
    }
    stage.publishIn();
    for (int i = 0; i < n; ++i) {
      char* dst = recv + (a.recvDispls[i] + offset) * esize;
      size_t bytes = pieceOf(a.recvCounts[i]) * esize;
      if (i == ctx.rank) {
        ctx.device->copy(dst, send + (a.sendDispls[i] + offset) * esize, bytes);
      } else {
        stage.waitIn(i);
        ctx.copyOut(dst, stage.in(i) + ctx.rank * piece * esize, bytes, outputBytes);
      }
    }
    stage.publishDone();
  }
}

}  // namespace

void registerAllToAllvAlgorithms(std::vector<Algorithm>& out) {
  out.push_back({loomFuncAllToAllv, "direct", allToAllvDirect, true, true});
}

}  // namespace loom
