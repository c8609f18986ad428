// "pairwise": collectives as one transfer per pair of ranks over the pair channels, all in flight
// together (one schedule, a lane per peer and direction), so they run on any transport (the
// arena-free counterparts of "direct"). gather and scatter: the root exchanges with every rank;
// alltoall(v): every rank with every other (alltoallv first exchanges the byte counts of every
// pair, so a mismatch is an error (and, through the abort, one for every rank) rather than a
// desynchronised stream); barrier: a token to rank 0 from everyone, then one back.
#include <vector>

#include "algorithms/context.hpp"
#include "algorithms/families.hpp"
#include "base/dtype.hpp"
#include "base/error.hpp"

namespace loom {

namespace {

void buildGatherPairwise(const AlgoContext& ctx, const CollArgs& a, Schedule& s) {
  const uint64_t block = a.count * dtypeSize(a.dtype);
  if (ctx.rank != a.root) {
    s.send(a.root, s.input(), block);
    return;
  }
  for (int p = 0; p < ctx.nranks; ++p)
    if (p != ctx.rank) s.recv(p, s.output(p * block), block, true);
  if (static_cast<const char*>(a.send) != static_cast<const char*>(a.recv) + ctx.rank * block)
    s.copy(s.output(ctx.rank * block), s.input(), block, true);
}

void buildScatterPairwise(const AlgoContext& ctx, const CollArgs& a, Schedule& s) {
  const uint64_t block = a.count * dtypeSize(a.dtype);
  if (ctx.rank != a.root) {
    s.recv(a.root, s.output(), block, true);
    return;
  }
  for (int p = 0; p < ctx.nranks; ++p)
    if (p != ctx.rank) s.send(p, s.input(p * block), block);
  if (static_cast<const char*>(a.send) + ctx.rank * block != a.recv)
    s.copy(s.output(), s.input(ctx.rank * block), block, true);
}

void buildAllToAllPairwise(const AlgoContext& ctx, const CollArgs& a, Schedule& s) {
  const uint64_t block = a.count * dtypeSize(a.dtype);
  for (int p = 0; p < ctx.nranks; ++p) {
    if (p == ctx.rank) continue;
    s.send(p, s.input(p * block), block);
    s.recv(p, s.output(p * block), block, true);
  }
  // In place, this rank's own block is already where it belongs.
  if (a.send != a.recv) s.copy(s.output(ctx.rank * block), s.input(ctx.rank * block), block, true);
}

// alltoallv: this rank's counts to every peer and theirs to it (input: 8 bytes per peer, the
// count this rank sends it; output: what each peer sends this rank).
void buildCountExchange(const AlgoContext& ctx, const CollArgs&, Schedule& s) {
  for (int p = 0; p < ctx.nranks; ++p) {
    if (p == ctx.rank) continue;
    s.send(p, s.input(p * sizeof(uint64_t)), sizeof(uint64_t));
    s.recv(p, s.output(p * sizeof(uint64_t)), sizeof(uint64_t));
  }
}

void buildAllToAllvData(const AlgoContext& ctx, const CollArgs& a, Schedule& s) {
  const size_t esize = dtypeSize(a.dtype);
  const int r = ctx.rank;
  for (int p = 0; p < ctx.nranks; ++p) {
    if (p == r) continue;
    s.send(p, s.input(a.sendDispls[p] * esize), a.sendCounts[p] * esize);
    s.recv(p, s.output(a.recvDispls[p] * esize), a.recvCounts[p] * esize, true);
  }
  s.copy(s.output(a.recvDispls[r] * esize), s.input(a.sendDispls[r] * esize),
         a.sendCounts[r] * esize, true);
}

void allToAllvPairwise(const AlgoContext& ctx, const CollArgs& a) {
  const int n = ctx.nranks, r = ctx.rank;
  // Counts first: every pair checks that what one sends is what the other expects. They live in
  // the communicator's scratch (the schedules below take none).
  uint64_t* mine = reinterpret_cast<uint64_t*>(ctx.scratchBytes(2 * n * sizeof(uint64_t)));
  uint64_t* theirs = mine + n;
  for (int p = 0; p < n; ++p) mine[p] = a.sendCounts[p];
  Schedule& s = *ctx.schedule;
  s.clear(static_cast<int>(ctx.channels->size()));
  s.setExtents(n * sizeof(uint64_t), n * sizeof(uint64_t));
  buildCountExchange(ctx, a, s);
  s.finish();
  runBuilt(ctx, mine, theirs);
  theirs[r] = mine[r];
  for (int p = 0; p < n; ++p)
    if (theirs[p] != a.recvCounts[p])
      LOOM_THROW(loomInvalidUsage, "alltoallv: rank ", p, " sends ", theirs[p],
                 " elements to rank ", r, ", which expects ", a.recvCounts[p]);
  runSchedule(ctx, a, buildAllToAllvData);
}

void buildBarrierPairwise(const AlgoContext& ctx, const CollArgs&, Schedule& s) {
  // Tokens in scratch: one word per peer (their values mean nothing).
  const uint16_t tokens = s.addScratch("tokens", ctx.nranks * sizeof(uint64_t));
  const uint64_t word = sizeof(uint64_t);
  if (ctx.rank != 0) {
    s.send(0, s.scratch(tokens), word);
    s.recv(0, s.scratch(tokens, word), word);
    return;
  }
  // Released only once everyone arrived.
  const uint32_t everyone = s.join();
  for (int p = 1; p < ctx.nranks; ++p)
    s.after(everyone, s.recv(p, s.scratch(tokens, p * word), word));
  for (int p = 1; p < ctx.nranks; ++p)
    s.after(s.send(p, s.scratch(tokens, p * word), word), everyone);
}

Algorithm built(loomFunc_t func, ScheduleFn build) {
  Algorithm algo{func, "pairwise", nullptr, false};
  algo.build = build;
  return algo;
}

}  // namespace

void registerPairwiseAlgorithms(std::vector<Algorithm>& out) {
  out.push_back(built(loomFuncGather, buildGatherPairwise));
  out.push_back(built(loomFuncScatter, buildScatterPairwise));
  out.push_back(built(loomFuncAllToAll, buildAllToAllPairwise));
  out.push_back({loomFuncAllToAllv, "pairwise", allToAllvPairwise, false});
  out.push_back(built(loomFuncBarrier, buildBarrierPairwise));
}

}  // namespace loom
