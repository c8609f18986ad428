// Every algorithm that builds a schedule, built for every rank of a job and simulated together
// without ranks (exec/simulate.hpp): each receive meets its send, everything finishes, every
// output byte is written, and the results equal a reference computed here. Flat algorithms at
// 1-8 ranks, hierarchical ones on even, uneven and interleaved node placements; sizes that are
// not multiples of anything.
#include <gtest/gtest.h>

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "algorithms/context.hpp"
#include "algorithms/hierarchical_view.hpp"
#include "algorithms/ring_steps.hpp"
#include "base/coll_args.hpp"
#include "base/dtype.hpp"
#include "exec/simulate.hpp"

namespace loom {
namespace {

// One rank's side of a simulated job: its context's workspaces and its memory.
struct SimRank {
  AlgoContext ctx;
  std::vector<Channel*> channels;
  std::vector<RingStep> ringSteps;
  std::vector<uint32_t> opList;
  std::vector<BufferRef> refList;
  Schedule schedule;
  std::vector<int32_t> in, out;
  std::vector<std::vector<char>> scratch;
  // Points the context at this rank's storage: rank r of n, no channels (nothing is sent).
  void attach(int r, int n) {
    channels.assign(n, nullptr);
    ctx.rank = r;
    ctx.nranks = n;
    ctx.channels = &channels;
    ctx.ringSteps = &ringSteps;
    ctx.opList = &opList;
    ctx.refList = &refList;
  }
};

// Node placement: one letter per rank ("AABB": ranks 0,1 on node A).
Hierarchy hierarchyOf(const std::string& placement, int rank) {
  Hierarchy h;
  std::map<char, int> nodeIds;
  for (char c : placement)
    if (!nodeIds.count(c)) nodeIds[c] = static_cast<int>(nodeIds.size());
  h.members.resize(nodeIds.size());
  for (size_t r = 0; r < placement.size(); ++r) {
    const int node = nodeIds[placement[r]];
    h.nodeOf.push_back(node);
    h.localIndex.push_back(static_cast<int>(h.members[node].size()));
    h.members[node].push_back(static_cast<int>(r));
  }
  h.columns = static_cast<int>(placement.size());
  for (const auto& m : h.members) h.columns = std::min(h.columns, static_cast<int>(m.size()));
  h.nodeIndex = h.nodeOf[rank];
  return h;
}

int32_t inputValue(int rank, size_t i) { return static_cast<int32_t>(rank * 1000 + i % 997) - 300; }

// What rank r's output must hold, from every rank's input.
std::vector<int32_t> expected(const CollArgs& a, int n, int r,
                              const std::vector<std::vector<int32_t>>& ins) {
  const size_t c = a.count;
  auto reduceAt = [&](size_t i) {
    int32_t v = ins[0][i];
    for (int p = 1; p < n; ++p) v = a.op == loomMax ? std::max(v, ins[p][i]) : v + ins[p][i];
    return v;
  };
  std::vector<int32_t> out;
  switch (a.func) {
    case loomFuncAllReduce:
      for (size_t i = 0; i < c; ++i) out.push_back(reduceAt(i));
      break;
    case loomFuncReduce:
      if (r == a.root)
        for (size_t i = 0; i < c; ++i) out.push_back(reduceAt(i));
      break;
    case loomFuncBroadcast:
      out = std::vector<int32_t>(ins[a.root].begin(), ins[a.root].begin() + c);
      break;
    case loomFuncAllGather:
    case loomFuncGather:
      if (a.func == loomFuncAllGather || r == a.root)
        for (int p = 0; p < n; ++p) out.insert(out.end(), ins[p].begin(), ins[p].begin() + c);
      break;
    case loomFuncReduceScatter:
      for (size_t i = 0; i < c; ++i) out.push_back(reduceAt(r * c + i));
      break;
    case loomFuncScatter:
      out = std::vector<int32_t>(ins[a.root].begin() + r * c, ins[a.root].begin() + (r + 1) * c);
      break;
    case loomFuncAllToAll:
      for (int p = 0; p < n; ++p)
        out.insert(out.end(), ins[p].begin() + r * c, ins[p].begin() + (r + 1) * c);
      break;
    default:
      break;
  }
  return out;
}

// Builds `algo` for every rank of `n` (hierarchical when `placement` is given), simulates the
// job and checks every rank's output.
void checkAlgorithm(const Algorithm& algo, int n, size_t count, loomRedOp_t op, int root,
                    const std::string& placement = "") {
  SCOPED_TRACE(std::string(funcName(algo.func)) + ":" + algo.name + " n=" + std::to_string(n) +
               " count=" + std::to_string(count) + " root=" + std::to_string(root) +
               (placement.empty() ? "" : " nodes=" + placement));
  std::vector<SimRank> ranks(n);
  std::vector<Hierarchy> hierarchies;
  for (int r = 0; r < n && !placement.empty(); ++r)
    hierarchies.push_back(hierarchyOf(placement, r));
  std::vector<std::vector<int32_t>> ins(n);
  std::vector<SimulatedRank> sim(n);
  CollArgs a;
  a.func = algo.func;
  a.dtype = loomInt32;
  a.op = op;
  a.root = root;
  a.count = count;
  for (int r = 0; r < n; ++r) {
    SimRank& k = ranks[r];
    const CallExtents ext = callExtents(a, r, n);
    k.in.resize(ext.sendBytes / 4 + 1);
    for (size_t i = 0; i < k.in.size(); ++i) k.in[i] = inputValue(r, i);
    ins[r] = k.in;
    k.out.assign(ext.recvBytes / 4 + 1, -7);
  }
  for (int r = 0; r < n; ++r) {
    SimRank& k = ranks[r];
    k.attach(r, n);
    k.ctx.hierarchy = placement.empty() ? nullptr : &hierarchies[r];
    CollArgs mine = a;
    mine.send = k.in.data();
    mine.recv = k.out.data();
    const CallExtents ext = callExtents(a, r, n);
    k.schedule.clear(n);
    k.schedule.setExtents(ext.sendBytes, ext.recvBytes);
    algo.build(k.ctx, mine, k.schedule);
    k.schedule.finish();
    sim[r].schedule = &k.schedule;
    sim[r].buffers = {reinterpret_cast<char*>(k.in.data()), reinterpret_cast<char*>(k.out.data())};
    for (size_t b = 2; b < k.schedule.buffers().size(); ++b) {
      k.scratch.emplace_back(k.schedule.buffers()[b].bytes + 8);
      sim[r].buffers.push_back(k.scratch.back().data());
    }
  }
  SimulationResult result = simulateSchedules(sim);
  ASSERT_TRUE(result.ok) << result.problem;
  EXPECT_EQ(result.unwritten(), "");
  for (int r = 0; r < n; ++r) {
    std::vector<int32_t> want = expected(a, n, r, ins);
    std::vector<int32_t> got(ranks[r].out.begin(), ranks[r].out.begin() + want.size());
    EXPECT_EQ(got, want) << "rank " << r;
    EXPECT_EQ(ranks[r].out.back(), -7) << "rank " << r << " wrote past its output";
  }
}

const Algorithm& algorithm(loomFunc_t func, const char* name) {
  const Algorithm* algo = findAlgorithm(func, name);
  EXPECT_NE(algo, nullptr) << funcName(func) << ":" << name;
  EXPECT_NE(algo->build, nullptr) << funcName(func) << ":" << name << " builds no schedule";
  return *algo;
}

TEST(Schedules, RingAtEveryRankCount) {
  for (int n : {1, 2, 3, 4, 5, 7, 8})
    for (size_t count : {size_t{0}, size_t{1}, size_t{7}, size_t{1003}}) {
      checkAlgorithm(algorithm(loomFuncAllReduce, "ring"), n, count, loomSum, 0);
      checkAlgorithm(algorithm(loomFuncAllReduce, "ring"), n, count, loomMax, 0);
      checkAlgorithm(algorithm(loomFuncAllGather, "ring"), n, count, loomSum, 0);
      checkAlgorithm(algorithm(loomFuncReduceScatter, "ring"), n, count, loomSum, 0);
      for (int root : {0, n - 1}) {
        checkAlgorithm(algorithm(loomFuncBroadcast, "ring"), n, count, loomSum, root);
        checkAlgorithm(algorithm(loomFuncReduce, "ring"), n, count, loomSum, root);
      }
    }
}

TEST(Schedules, PairwiseAtEveryRankCount) {
  for (int n : {1, 2, 3, 5, 8})
    for (size_t count : {size_t{0}, size_t{1}, size_t{7}, size_t{1003}}) {
      checkAlgorithm(algorithm(loomFuncAllToAll, "pairwise"), n, count, loomSum, 0);
      for (int root : {0, n - 1}) {
        checkAlgorithm(algorithm(loomFuncGather, "pairwise"), n, count, loomSum, root);
        checkAlgorithm(algorithm(loomFuncScatter, "pairwise"), n, count, loomSum, root);
      }
    }
  checkAlgorithm(algorithm(loomFuncBarrier, "pairwise"), 5, 0, loomSum, 0);
}

TEST(Schedules, HierarchicalOnEvenUnevenAndInterleavedNodes) {
  for (const char* placement : {"AABB", "ABAB", "AAABB", "ABABA", "AABBCC", "AAAABBBB", "ABC"}) {
    const int n = static_cast<int>(std::string(placement).size());
    for (size_t count : {size_t{1}, size_t{7}, size_t{1003}}) {
      // Allreduce, allgather, reduce-scatter and reduce run their node phases on the node's
      // arena, not as schedules: the process tests collectives_hier_* cover them.
      checkAlgorithm(algorithm(loomFuncAllToAll, "hierarchical"), n, count, loomSum, 0, placement);
      for (int root : {0, 1, n - 1})
        checkAlgorithm(algorithm(loomFuncBroadcast, "hierarchical"), n, count, loomSum, root,
                       placement);
    }
  }
}

// buildSchedule keeps what it built for a call like the last (the same builder, context and
// arguments, its buffers anywhere at the same distance) and builds anything else again: another
// distance (in place), size or root, a clear() by another builder, per-peer counts.
TEST(Schedules, ACallLikeTheLastKeepsItsSchedule) {
  const int n = 4;
  SimRank k;
  BuiltCall built;
  k.attach(0, n);
  k.ctx.schedule = &k.schedule;
  k.ctx.builtCall = &built;
  std::vector<int32_t> memory(1024);
  CollArgs call;
  call.func = loomFuncBroadcast;
  call.dtype = loomInt32;
  call.count = 16;
  call.root = 0;  // this rank: it copies its input into its output unless they are one buffer
  call.send = memory.data();
  call.recv = memory.data() + 100;
  const ScheduleFn ring = algorithm(loomFuncBroadcast, "ring").build;
  auto builds = [&](const CollArgs& c) {
    const uint64_t before = k.schedule.generation();
    buildSchedule(k.ctx, c, ring);
    EXPECT_TRUE(k.schedule.finished());
    return k.schedule.generation() != before;
  };
  EXPECT_TRUE(builds(call));
  const uint64_t outOfPlace = k.schedule.hash();
  EXPECT_FALSE(builds(call));
  CollArgs moved = call;  // other buffers, the same distance
  moved.send = memory.data() + 300;
  moved.recv = memory.data() + 400;
  EXPECT_FALSE(builds(moved));
  EXPECT_EQ(k.schedule.hash(), outOfPlace);
  CollArgs inPlace = call;
  inPlace.send = inPlace.recv;
  EXPECT_TRUE(builds(inPlace));
  EXPECT_NE(k.schedule.hash(), outOfPlace);  // no copy
  EXPECT_TRUE(builds(call));
  EXPECT_EQ(k.schedule.hash(), outOfPlace);
  CollArgs larger = call, otherRoot = call;
  larger.count = 17;
  otherRoot.root = 2;
  EXPECT_TRUE(builds(larger));
  EXPECT_TRUE(builds(otherRoot));
  EXPECT_TRUE(builds(call));
  k.schedule.clear(n);  // another builder took the schedule
  EXPECT_TRUE(builds(call));
  CollArgs counted = call;
  const size_t counts[n] = {1, 2, 3, 4};
  counted.sendCounts = counts;
  EXPECT_TRUE(builds(counted));
  EXPECT_TRUE(builds(counted));
}

// The pipeline of a hierarchical allgather or reduce-scatter: chunks of the per-rank blocks sized
// on the whole call, never under 256 KiB (a smaller column hop moves at the network's latency),
// whole elements; a call of one chunk moves its column in the calling thread.
TEST(Schedules, HierarchicalBlockChunks) {
  constexpr size_t kKiB = 1024, kMiB = kKiB * kKiB;
  // 2 x 4 ranks, floats: 2 MiB in all is one chunk of each 256 KiB block (was two of 128 KiB).
  EXPECT_EQ(hierarchicalBlockChunkBytes(256 * kKiB / 4, 8, 4), 256 * kKiB);
  EXPECT_EQ(hierarchicalBlockChunkBytes(512 * kKiB / 4, 8, 4), 256 * kKiB);  // 4 MiB: two
  // Large calls: 1/8 of the call (at most 16 MiB) across the ranks' blocks.
  EXPECT_EQ(hierarchicalBlockChunkBytes(4 * kMiB / 4, 8, 4), 512 * kKiB);  // 32 MiB in all
  EXPECT_EQ(hierarchicalBlockChunkBytes(64 * kMiB / 4, 8, 4), 2 * kMiB);   // 512 MiB: capped
  // Whole elements of any size.
  for (size_t esize : {size_t{1}, size_t{2}, size_t{8}})
    EXPECT_EQ(hierarchicalBlockChunkBytes(3 * kMiB / esize + 1, 5, esize) % esize, 0u);
  EXPECT_EQ(besideOnThread(1), std::optional<bool>(false));
  EXPECT_EQ(besideOnThread(2), std::nullopt);
}

}  // namespace
}  // namespace loom
