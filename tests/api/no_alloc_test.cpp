// The hot path allocates nothing: after a warm-up call of each kind, repeated collectives make no
// heap allocation on the calling thread. (Own binary: it replaces the global operator new.)
#include <gtest/gtest.h>

#include <cstdlib>
#include <new>
#include <string>
#include <thread>
#include <vector>

#include "api_test_helpers.hpp"

namespace {
thread_local long tlsAllocations = 0;
}

void* operator new(size_t size) {
  ++tlsAllocations;
  if (void* p = std::malloc(size == 0 ? 1 : size)) return p;
  throw std::bad_alloc();
}
void operator delete(void* p) noexcept { std::free(p); }
void operator delete(void* p, size_t) noexcept { std::free(p); }

namespace loom::test {
namespace {

// Runs `calls` on every rank twice (the first time warms up: scratch, workspaces, pages) and
// returns the allocations each rank made during the second time.
template <typename Calls>
std::vector<long> allocationsOfSecondRound(const std::vector<loomComm_t>& comms, Calls calls) {
  std::vector<long> counts(comms.size());
  onEachRank(comms, [&](int r) {
    calls(r, comms[r]);
    long before = tlsAllocations;
    for (int i = 0; i < 50; ++i) calls(r, comms[r]);
    counts[r] = tlsAllocations - before;
  });
  return counts;
}

void everyCollective(int r, loomComm_t comm) {
  static thread_local std::vector<float> a(1 << 18, 1.0f), b(4 << 18, 0.0f);
  const size_t n = comm == nullptr ? 0 : a.size() / 4;
  for (size_t count : {size_t{7}, size_t{1024}, n}) {
    ASSERT_EQ(loomAllReduce(a.data(), b.data(), count, loomFloat32, loomSum, comm, nullptr), 0);
    ASSERT_EQ(loomReduce(a.data(), b.data(), count, loomFloat32, loomMax, 0, comm, nullptr), 0);
    ASSERT_EQ(loomBroadcast(a.data(), b.data(), count, loomFloat32, 1, comm, nullptr), 0);
    ASSERT_EQ(loomAllGather(a.data(), b.data(), count, loomFloat32, comm, nullptr), 0);
    ASSERT_EQ(loomReduceScatter(a.data(), b.data(), count, loomFloat32, loomAvg, comm, nullptr), 0);
    ASSERT_EQ(loomAllToAll(a.data(), b.data(), count, loomFloat32, comm, nullptr), 0);
  }
  int peer = 1 - r;
  ASSERT_EQ(loomGroupStart(), 0);
  ASSERT_EQ(loomSend(a.data(), 1000, loomFloat32, peer, comm, nullptr), 0);
  ASSERT_EQ(loomRecv(b.data(), 1000, loomFloat32, peer, comm, nullptr), 0);
  ASSERT_EQ(loomGroupEnd(), 0);
  ASSERT_EQ(loomBarrier(comm, nullptr), 0);
}

TEST(NoAllocation, DefaultAlgorithms) {
  std::vector<loomComm_t> comms = initRanks(2);
  for (long count : allocationsOfSecondRound(comms, everyCollective))
    EXPECT_EQ(count, 0) << "heap allocations in 50 rounds of collectives";
  for (loomComm_t c : comms) loomCommDestroy(c);
}

TEST(NoAllocation, ExecutionPlans) {
  // The example plans of the plan_examples fixture forced: a plan keeps the schedule of its last
  // call shape, so repeated calls of one shape build nothing and allocate nothing.
  const char* dir = std::getenv("LOOM_TEST_PLAN_DIR");
  if (dir == nullptr) GTEST_SKIP() << "LOOM_TEST_PLAN_DIR names no example plans";
  const std::string fused = std::string(dir) + "/fused";
  ScopedEnv plans("LOOM_PLAN_DIR", fused.c_str());
  ScopedEnv algo("LOOM_ALGO",
                 "allreduce:plan:ring_allreduce_2,allgather:plan:ring_allgather_2,"
                 "reducescatter:plan:ring_reducescatter_2,alltoall:plan:pairwise_alltoall_2");
  std::vector<loomComm_t> comms = initRanks(2);
  auto calls = [](int, loomComm_t comm) {
    static thread_local std::vector<float> a(1 << 18, 1.0f), b(4 << 18, 0.0f);
    const size_t count = (1 << 16) + 3;
    ASSERT_EQ(loomAllReduce(a.data(), b.data(), count, loomFloat32, loomSum, comm, nullptr), 0);
    ASSERT_EQ(loomAllGather(a.data(), b.data(), count, loomFloat32, comm, nullptr), 0);
    ASSERT_EQ(loomReduceScatter(a.data(), b.data(), count, loomFloat32, loomSum, comm, nullptr), 0);
    ASSERT_EQ(loomAllToAll(a.data(), b.data(), count, loomFloat32, comm, nullptr), 0);
  };
  for (long count : allocationsOfSecondRound(comms, calls))
    EXPECT_EQ(count, 0) << "heap allocations in 50 rounds of calls run by plans";
  for (loomComm_t c : comms) loomCommDestroy(c);
}

TEST(NoAllocation, RingAndPipelined) {
  ScopedEnv algo("LOOM_ALGO", "allreduce:ring,allgather:ring,reducescatter:ring,reduce:pipelined");
  std::vector<loomComm_t> comms = initRanks(2);
  for (long count : allocationsOfSecondRound(comms, everyCollective))
    EXPECT_EQ(count, 0) << "heap allocations in 50 rounds of collectives";
  for (loomComm_t c : comms) loomCommDestroy(c);
}

TEST(NoAllocation, ThreeRanksEveryScheduleBuilder) {
  // Rings of several steps, pairwise gather and scatter, alltoall: every schedule builder the
  // executor runs on one host, at a rank count where steps differ from rank to rank.
  ScopedEnv algo("LOOM_ALGO",
                 "allreduce:ring,allgather:ring,reducescatter:ring,broadcast:ring,reduce:ring,"
                 "alltoall:pairwise");
  std::vector<loomComm_t> comms = initRanks(3);
  auto calls = [](int r, loomComm_t comm) {
    static thread_local std::vector<float> a(3 << 16, 1.0f), b(9 << 16, 0.0f);
    for (size_t count : {size_t{5}, size_t{3000}, a.size() / 3}) {
      ASSERT_EQ(loomAllReduce(a.data(), b.data(), count, loomFloat32, loomSum, comm, nullptr), 0);
      ASSERT_EQ(loomReduce(a.data(), b.data(), count, loomFloat32, loomMax, 2, comm, nullptr), 0);
      ASSERT_EQ(loomBroadcast(a.data(), b.data(), count, loomFloat32, 1, comm, nullptr), 0);
      ASSERT_EQ(loomAllGather(a.data(), b.data(), count, loomFloat32, comm, nullptr), 0);
      ASSERT_EQ(loomReduceScatter(a.data(), b.data(), count, loomFloat32, loomSum, comm, nullptr),
                0);
      ASSERT_EQ(loomAllToAll(a.data(), b.data(), count, loomFloat32, comm, nullptr), 0);
      ASSERT_EQ(loomGather(a.data(), b.data(), count, loomFloat32, 0, comm, nullptr), 0);
      ASSERT_EQ(loomScatter(b.data(), a.data(), count, loomFloat32, 2, comm, nullptr), 0);
    }
    (void)r;
  };
  for (long count : allocationsOfSecondRound(comms, calls))
    EXPECT_EQ(count, 0) << "heap allocations in 50 rounds of collectives";
  for (loomComm_t c : comms) loomCommDestroy(c);
}

TEST(NoAllocation, ComposedCallsOnGroups) {
  // A heterogeneous communicator (two CPU clusters) composing every call: the cluster's and the
  // exchange's groups, their schedules and the composition's scratch are reused from call to call.
  ScopedEnv split("LOOM_CLUSTER_SPLIT", "0,1;2");
  ScopedEnv composed("LOOM_HETERO_ALGO", "composed");
  std::vector<loomComm_t> comms = initRanks(3);
  auto calls = [](int r, loomComm_t comm) {
    static thread_local std::vector<float> a(3 << 16, 1.0f), b(9 << 16, 0.0f);
    for (size_t count : {size_t{5}, a.size() / 3}) {
      ASSERT_EQ(loomAllReduce(a.data(), b.data(), count, loomFloat32, loomSum, comm, nullptr), 0);
      ASSERT_EQ(loomReduce(a.data(), b.data(), count, loomFloat32, loomMax, 2, comm, nullptr), 0);
      ASSERT_EQ(loomBroadcast(a.data(), b.data(), count, loomFloat32, 1, comm, nullptr), 0);
      ASSERT_EQ(loomAllGather(a.data(), b.data(), count, loomFloat32, comm, nullptr), 0);
      ASSERT_EQ(loomReduceScatter(a.data(), b.data(), count, loomFloat32, loomSum, comm, nullptr),
                0);
    }
    (void)r;
  };
  for (long count : allocationsOfSecondRound(comms, calls))
    EXPECT_EQ(count, 0) << "heap allocations in 50 rounds of composed collectives";
  for (loomComm_t c : comms) loomCommDestroy(c);
}

TEST(NoAllocation, HierarchicalAcrossFakeNodes) {
  // One rank of a job across fake nodes (ctest's no_alloc_hierarchical runs it under loomrun and
  // api/fake_nodes.sh): the hierarchical allreduce, reduce, allgather and reduce-scatter, their
  // column schedules run beside the node phases on the arena, at sizes of one and of several
  // pipeline chunks. Alone (no RANK), there is no such job.
  if (std::getenv("RANK") == nullptr) GTEST_SKIP() << "runs as one rank of a fake-node job";
  ScopedEnv algo("LOOM_ALGO",
                 "allreduce:hierarchical,allgather:hierarchical,reducescatter:hierarchical,"
                 "reduce:hierarchical");
  loomComm_t comm = nullptr;
  ASSERT_EQ(loomCommInitFromEnv(&comm, nullptr), loomSuccess);
  int nranks = 0;
  ASSERT_EQ(loomCommCount(comm, &nranks), loomSuccess);
  std::vector<float> a(size_t{1} << 20, 1.0f), b(static_cast<size_t>(nranks) << 20, 0.0f);
  auto calls = [&] {
    for (size_t count : {size_t{7}, a.size() / nranks, a.size()}) {
      ASSERT_EQ(loomAllReduce(a.data(), b.data(), count, loomFloat32, loomSum, comm, nullptr), 0);
      const int root = static_cast<int>(count % static_cast<size_t>(nranks));
      ASSERT_EQ(loomReduce(a.data(), b.data(), count, loomFloat32, loomSum, root, comm, nullptr),
                0);
      ASSERT_EQ(loomAllGather(a.data(), b.data(), count, loomFloat32, comm, nullptr), 0);
      ASSERT_EQ(loomReduceScatter(b.data(), a.data(), count, loomFloat32, loomSum, comm, nullptr),
                0);
    }
  };
  calls();
  const long before = tlsAllocations;
  for (int i = 0; i < 5; ++i) calls();
  EXPECT_EQ(tlsAllocations - before, 0) << "heap allocations in 5 rounds of hierarchical calls";
  EXPECT_EQ(loomCommDestroy(comm), loomSuccess);
}

}  // namespace
}  // namespace loom::test
