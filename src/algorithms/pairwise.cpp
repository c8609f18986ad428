// "pairwise": collectives as one transfer per pair of ranks over the pair channels, all in flight
// together, so they run on any transport (the arena-free counterparts of "direct"). gather and
// scatter: the root exchanges with every rank; alltoall(v): every rank with every other (alltoallv
// first exchanges the byte counts of every pair, so a mismatch is an error (and, through the abort,
// one for every rank) rather than a desynchronised stream); barrier: a token to rank 0 from
// everyone, then one back.
#include "algorithms/pairwise.hpp"

#include <algorithm>
#include <vector>

#include "algorithms/context.hpp"
#include "algorithms/families.hpp"
#include "base/dtype.hpp"
#include "base/error.hpp"

namespace loom {

namespace {

// The communicator's list, emptied for this call.
std::vector<PairTransfer>& transferList(const AlgoContext& ctx) {
  ctx.transfers->clear();
  return *ctx.transfers;
}

void add(std::vector<PairTransfer>& list, int peer, bool isSend, const void* data, size_t bytes) {
  if (bytes > 0) list.push_back({peer, isSend, static_cast<char*>(const_cast<void*>(data)), bytes});
}

// Progresses every transfer together until all are done. A pair has at most one transfer per
// direction in a list, so stream order never matters between them.
void runTransfers(const AlgoContext& ctx, std::vector<PairTransfer>& list) {
  auto pass = [&]() -> bool {
    bool moved = false;
    for (PairTransfer& t : list) {
      if (t.position == t.bytes) continue;
      Channel& ch = ctx.channel(t.peer);
      size_t n = t.isSend ? ch.trySend(t.data + t.position, t.bytes - t.position)
                          : ch.tryReceive(t.data + t.position, t.bytes - t.position);
      t.position += n;
      moved |= n > 0;
    }
    return moved;
  };
  auto done = [&] {
    return std::all_of(list.begin(), list.end(),
                       [](const PairTransfer& t) { return t.position == t.bytes; });
  };
  auto check = [&] {
    for (const PairTransfer& t : list)
      if (t.position < t.bytes) ctx.check(t.peer);
  };
  auto gather = [&](PollSet& set) {
    for (const PairTransfer& t : list)
      if (t.position < t.bytes) ctx.channel(t.peer).addPollFds(set, t.isSend);
  };
  while (!done()) {
    if (!pass()) waitUntil(pass, check, gather, *ctx.pollSet, ctx.peers);
  }
}

void gatherPairwise(const AlgoContext& ctx, const CollArgs& a) {
  size_t block = a.count * dtypeSize(a.dtype);
  std::vector<PairTransfer>& list = transferList(ctx);
  if (ctx.rank == a.root) {
    char* recv = static_cast<char*>(a.recv);
    for (int p = 0; p < ctx.nranks; ++p)
      if (p != ctx.rank) add(list, p, false, recv + p * block, block);
    if (a.send != recv + ctx.rank * block) ctx.device->copy(recv + ctx.rank * block, a.send, block);
  } else {
    add(list, a.root, true, a.send, block);
  }
  runTransfers(ctx, list);
}

void scatterPairwise(const AlgoContext& ctx, const CollArgs& a) {
  size_t block = a.count * dtypeSize(a.dtype);
  std::vector<PairTransfer>& list = transferList(ctx);
  if (ctx.rank == a.root) {
    const char* send = static_cast<const char*>(a.send);
    for (int p = 0; p < ctx.nranks; ++p)
      if (p != ctx.rank) add(list, p, true, send + p * block, block);
    if (send + ctx.rank * block != a.recv) ctx.device->copy(a.recv, send + ctx.rank * block, block);
  } else {
    add(list, a.root, false, a.recv, block);
  }
  runTransfers(ctx, list);
}

void allToAllPairwise(const AlgoContext& ctx, const CollArgs& a) {
  size_t block = a.count * dtypeSize(a.dtype);
  const char* send = static_cast<const char*>(a.send);
  char* recv = static_cast<char*>(a.recv);
  std::vector<PairTransfer>& list = transferList(ctx);
  for (int p = 0; p < ctx.nranks; ++p) {
    if (p == ctx.rank) continue;
    add(list, p, true, send + p * block, block);
    add(list, p, false, recv + p * block, block);
  }
  // In place, this rank's own block is already where it belongs.
  if (send != recv) ctx.device->copy(recv + ctx.rank * block, send + ctx.rank * block, block);
  runTransfers(ctx, list);
}

void allToAllvPairwise(const AlgoContext& ctx, const CollArgs& a) {
  size_t esize = dtypeSize(a.dtype);
  const int n = ctx.nranks, r = ctx.rank;
  // Counts first: every pair checks that what one sends is what the other expects.
  std::vector<char>& scratch = *ctx.scratch;
  if (scratch.size() < 2 * n * sizeof(uint64_t)) scratch.resize(2 * n * sizeof(uint64_t));
  auto* mine = reinterpret_cast<uint64_t*>(scratch.data());
  uint64_t* theirs = mine + n;
  std::vector<PairTransfer>& list = transferList(ctx);
  for (int p = 0; p < n; ++p) {
    mine[p] = a.sendCounts[p];
    if (p == r) continue;
    add(list, p, true, &mine[p], sizeof(uint64_t));
    add(list, p, false, &theirs[p], sizeof(uint64_t));
  }
  runTransfers(ctx, list);
  theirs[r] = mine[r];
  for (int p = 0; p < n; ++p)
    if (theirs[p] != a.recvCounts[p])
      LOOM_THROW(loomInvalidUsage, "alltoallv: rank ", p, " sends ", theirs[p],
                 " elements to rank ", r, ", which expects ", a.recvCounts[p]);
  list.clear();
  const char* send = static_cast<const char*>(a.send);
  char* recv = static_cast<char*>(a.recv);
  for (int p = 0; p < n; ++p) {
    if (p == r) continue;
    add(list, p, true, send + a.sendDispls[p] * esize, a.sendCounts[p] * esize);
    add(list, p, false, recv + a.recvDispls[p] * esize, a.recvCounts[p] * esize);
  }
  ctx.device->copy(recv + a.recvDispls[r] * esize, send + a.sendDispls[r] * esize,
                   a.sendCounts[r] * esize);
  runTransfers(ctx, list);
}

void barrierPairwise(const AlgoContext& ctx, const CollArgs&) {
  uint64_t token = 0;
  thread_local std::vector<uint64_t> tokens;
  if (tokens.size() < static_cast<size_t>(ctx.nranks)) tokens.resize(ctx.nranks);
  for (bool toRoot : {true, false}) {
    std::vector<PairTransfer>& list = transferList(ctx);
    if (ctx.rank == 0) {
      for (int p = 1; p < ctx.nranks; ++p) add(list, p, !toRoot, &tokens[p], sizeof(uint64_t));
    } else {
      add(list, 0, toRoot, &token, sizeof(token));
    }
    runTransfers(ctx, list);
  }
}

}  // namespace

void registerPairwiseAlgorithms(std::vector<Algorithm>& out) {
  out.push_back({loomFuncGather, "pairwise", gatherPairwise, false});
  out.push_back({loomFuncScatter, "pairwise", scatterPairwise, false});
  out.push_back({loomFuncAllToAll, "pairwise", allToAllPairwise, false});
  out.push_back({loomFuncAllToAllv, "pairwise", allToAllvPairwise, false});
  out.push_back({loomFuncBarrier, "pairwise", barrierPairwise, false});
}

}  // namespace loom
