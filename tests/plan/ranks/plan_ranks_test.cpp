// Plans through the C API with every rank a process (under loomrun): registration agreed on every
// rank and used by the selector and the callback; different plans, a plan refused by one rank,
// and a registration on some ranks only each fail on every rank with a message saying what;
// LOOM_ALGO forcing a plan before it is registered fails the call. Plans come from
// $LOOM_TEST_PLAN_DIR/fused (the examples fixture).
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>
#include <vector>

#include "loom/loom.h"

namespace {

loomComm_t gWorld = nullptr;
int gRank = 0, gRanks = 1;

std::string planFile(const std::string& name) {
  const char* dir = std::getenv("LOOM_TEST_PLAN_DIR");
  return std::string(dir != nullptr ? dir : ".") + "/fused/" + name + "_" + std::to_string(gRanks) +
         ".json";
}

// A communicator of its own per test, so that a failing one does not affect the next.
struct OwnComm {
  loomComm_t comm = nullptr;
  explicit OwnComm(const char* algo = nullptr) {
    if (algo != nullptr) setenv("LOOM_ALGO", algo, 1);
    EXPECT_EQ(loomCommSplit(gWorld, 0, gRank, &comm, nullptr), loomSuccess)
        << loomGetLastError(nullptr);
    unsetenv("LOOM_ALGO");
  }
  ~OwnComm() {
    if (comm != nullptr) loomCommDestroy(comm);
  }
};

std::string algorithmOf(loomComm_t comm, size_t count) {
  const char* name = nullptr;
  EXPECT_EQ(loomCommGetAlgorithm(comm, loomFuncAllReduce, count, loomFloat32, &name), loomSuccess);
  return name != nullptr ? name : "";
}

void expectAllReduceWorks(loomComm_t comm, size_t count) {
  std::vector<float> in(count), out(count);
  for (size_t i = 0; i < count; ++i) in[i] = static_cast<float>((gRank + 1) * (i % 7));
  ASSERT_EQ(loomAllReduce(in.data(), out.data(), count, loomFloat32, loomSum, comm, nullptr),
            loomSuccess)
      << loomGetLastError(comm);
  const float ranksSum = static_cast<float>(gRanks * (gRanks + 1) / 2);
  for (size_t i = 0; i < count; ++i) ASSERT_EQ(out[i], ranksSum * (i % 7)) << i;
}

TEST(PlanRanks, RegisteredPlanIsChosenAndRuns) {
  OwnComm c;
  const char* name = nullptr;
  ASSERT_EQ(loomCommRegisterPlan(c.comm, planFile("ring_allreduce").c_str(), &name), loomSuccess)
      << loomGetLastError(c.comm);
  EXPECT_EQ(std::string(name), "plan:ring_allreduce_" + std::to_string(gRanks));
  EXPECT_EQ(algorithmOf(c.comm, 1 << 20), name);
  expectAllReduceWorks(c.comm, (1 << 20) + 3);
  // One-shot, up to 256 KiB, registered later: chosen below its limit, the ring above.
  ASSERT_EQ(loomCommRegisterPlan(c.comm, planFile("one_shot_allreduce").c_str(), &name),
            loomSuccess)
      << loomGetLastError(c.comm);
  EXPECT_EQ(algorithmOf(c.comm, 1000), name);
  EXPECT_EQ(algorithmOf(c.comm, 1 << 20), "plan:ring_allreduce_" + std::to_string(gRanks));
  expectAllReduceWorks(c.comm, 1001);
  size_t needed = 0;
  ASSERT_EQ(loomCommDescribePlans(c.comm, nullptr, 0, &needed), loomSuccess);
  std::string text(needed, '\0');
  loomCommDescribePlans(c.comm, text.data(), text.size(), nullptr);
  EXPECT_NE(text.find("plan:one_shot_allreduce_"), std::string::npos) << text;
}

const char* chooseRingAbove1000(loomFunc_t func, size_t bytes, int nranks, void* user) {
  static std::string name;
  name = "plan:ring_allreduce_" + std::to_string(nranks);
  ++*static_cast<int*>(user);
  return func == loomFuncAllReduce && bytes > 1000 ? name.c_str() : nullptr;
}

TEST(PlanRanks, SelectorCallbackChoosesPerCall) {
  OwnComm c;
  ASSERT_EQ(loomCommRegisterPlan(c.comm, planFile("ring_allreduce").c_str(), nullptr), loomSuccess);
  // Registered plans take every size of their range; the callback narrows it.
  int calls = 0;
  ASSERT_EQ(loomCommSetPlanSelector(c.comm, chooseRingAbove1000, &calls), loomSuccess);
  EXPECT_EQ(algorithmOf(c.comm, 4096), "plan:ring_allreduce_" + std::to_string(gRanks));
  EXPECT_EQ(algorithmOf(c.comm, 100), "plan:ring_allreduce_" + std::to_string(gRanks));
  expectAllReduceWorks(c.comm, 5000);
  EXPECT_GT(calls, 0);
  ASSERT_EQ(loomCommSetPlanSelector(c.comm, nullptr, nullptr), loomSuccess);
}

TEST(PlanRanks, DifferentPlansFailOnEveryRank) {
  if (gRanks < 2) GTEST_SKIP() << "needs 2 ranks";
  OwnComm c;
  const std::string file = planFile(gRank == 1 ? "one_shot_allreduce" : "ring_allreduce");
  EXPECT_EQ(loomCommRegisterPlan(c.comm, file.c_str(), nullptr), loomInvalidArgument);
  EXPECT_NE(std::string(loomGetLastError(c.comm)).find("ranks register different plans"),
            std::string::npos)
      << loomGetLastError(c.comm);
  expectAllReduceWorks(c.comm, 100);  // still usable, nothing registered
  EXPECT_EQ(algorithmOf(c.comm, 100).rfind("plan:", 0), std::string::npos);
}

TEST(PlanRanks, APlanRefusedOnOneRankFailsOnEveryRank) {
  if (gRanks < 2) GTEST_SKIP() << "needs 2 ranks";
  OwnComm c;
  const std::string plan =
      gRank == 1 ? std::string("/nonexistent/plan.json") : planFile("ring_allreduce");
  EXPECT_EQ(loomCommRegisterPlan(c.comm, plan.c_str(), nullptr), loomInvalidArgument);
  const std::string why = loomGetLastError(c.comm);
  EXPECT_NE(why.find(gRank == 1 ? "cannot read plan file" : "was refused on rank(s) 1"),
            std::string::npos)
      << why;
  expectAllReduceWorks(c.comm, 100);
}

TEST(PlanRanks, ForcedPlanMustBeRegistered) {
  const std::string algo = "allreduce:plan:ring_allreduce_" + std::to_string(gRanks);
  OwnComm c(algo.c_str());
  std::vector<float> x(10, 1.0f);
  EXPECT_NE(loomAllReduce(x.data(), x.data(), 10, loomFloat32, loomSum, c.comm, nullptr),
            loomSuccess);
  EXPECT_NE(std::string(loomGetLastError(c.comm)).find("no such plan is registered"),
            std::string::npos)
      << loomGetLastError(c.comm);
}

TEST(PlanRanks, ForcedPlanRunsOnceRegistered) {
  const std::string algo = "allreduce:plan:ring_allreduce_" + std::to_string(gRanks);
  OwnComm c(algo.c_str());
  ASSERT_EQ(loomCommRegisterPlan(c.comm, planFile("ring_allreduce").c_str(), nullptr), loomSuccess);
  EXPECT_EQ(algorithmOf(c.comm, 8), "plan:ring_allreduce_" + std::to_string(gRanks));
  expectAllReduceWorks(c.comm, 333);
}

// Last: it aborts its communicator on every rank.
TEST(PlanRanks, RegistrationOnSomeRanksOnlyFailsOnEveryRank) {
  if (gRanks < 2) GTEST_SKIP() << "needs 2 ranks";
  OwnComm c;
  loomResult_t r;
  if (gRank == 0) {
    r = loomCommRegisterPlan(c.comm, planFile("ring_allreduce").c_str(), nullptr);
  } else {
    std::vector<float> x(10, 1.0f);
    r = loomAllReduce(x.data(), x.data(), 10, loomFloat32, loomSum, c.comm, nullptr);
  }
  EXPECT_NE(r, loomSuccess);
  const std::string why = loomGetLastError(c.comm);
  EXPECT_NE(why.find("differ"), std::string::npos) << why;
}

}  // namespace

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  if (loomCommInitFromEnv(&gWorld, nullptr) != loomSuccess) {
    fprintf(stderr, "init failed: %s\n", loomGetLastError(nullptr));
    return 2;
  }
  loomCommUserRank(gWorld, &gRank);
  loomCommCount(gWorld, &gRanks);
  const int result = RUN_ALL_TESTS();
  loomCommDestroy(gWorld);
  return result;
}
