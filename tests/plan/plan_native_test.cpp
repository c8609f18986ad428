// Plans as a backend's native collectives get them (device/native_plan.hpp): one rank's program
// with its dependencies, the figures every rank sizes a call from alike, and each call handed to
// the backend with how the plan applies (parts, in place).
#include "plan/plan_native.hpp"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "../device/fake_native.hpp"
#include "plan/plan_registry.hpp"

namespace loom {
namespace {

// Rank 0 reduces what ranks 1 and 2 send it with its own input (in rank order) and sends them
// the result; ranks 1 and 2 each exchange with rank 0 only, rank 2 copying on a local lane.
const char* const kStar = R"({"loom_plan":1,"name":"star","collective":"allreduce","nranks":3,
  "chunks_per_block":2,"scratch_chunks":4,"ranks":[
  {"ops":[{"op":"recv","peer":1,"dst":["scratch",0,2]},{"op":"recv","peer":2,"dst":["scratch",2,2]},
          {"op":"reduce","dst":["output",0,2],"srcs":[["input",0,2],["scratch",0,2],["scratch",2,2]],
           "final":true},
          {"op":"send","peer":1,"src":["output",0,2]},{"op":"send","peer":2,"src":["output",0,2]}]},
  {"ops":[{"op":"send","peer":0,"src":["input",0,2]},{"op":"recv","peer":0,"dst":["output",0,2]}]},
  {"ops":[{"op":"send","peer":0,"src":["input",0,2]},{"op":"recv","peer":0,"dst":["scratch",0,2]},
          {"op":"copy","lane":1,"dst":["output",0,2],"src":["scratch",0,2]}]}]})";

TEST(PlanNative, CarriesOneRanksProgramAndFiguresOverAllRanks) {
  const PlanProgram program = loadPlan(kStar);
  const NativePlan plan = nativePlanOf(program, 2);
  EXPECT_EQ(plan.name, "star");
  EXPECT_EQ(plan.nranks, 3);
  EXPECT_EQ(plan.chunksPerBlock, 2u);
  EXPECT_EQ(plan.scratchBlocks, 2u);
  // Rank 0 runs the most lanes: sends to 1 and 2, receives from 1 and 2, one local lane.
  EXPECT_EQ(planLanes(program.ranks[0]), 5);
  EXPECT_EQ(planLanes(program.ranks[2]), 3);
  EXPECT_EQ(plan.mostLanes, 5);
  EXPECT_EQ(plan.mostChunksPerOp, 2u);
  // Rank 0's reduction of three operands, though rank 2 reduces nothing: a backend that refuses
  // wide reductions refuses on every rank alike.
  EXPECT_EQ(plan.mostReduceSources, 3u);
  // Rank 2's lanes, in order of first use: its send to 0, its receive from 0, local lane 1.
  ASSERT_EQ(plan.program.lanes.size(), 3u);
  EXPECT_EQ(plan.program.lanes[0].kind, NativePlanLane::kSend);
  EXPECT_EQ(plan.program.lanes[0].peer, 0);
  EXPECT_EQ(plan.program.lanes[0].ops, std::vector<uint32_t>{0});
  EXPECT_EQ(plan.program.lanes[1].kind, NativePlanLane::kReceive);
  EXPECT_EQ(plan.program.lanes[1].ops, std::vector<uint32_t>{1});
  EXPECT_EQ(plan.program.lanes[2].kind, NativePlanLane::kLocal);
  EXPECT_EQ(plan.program.lanes[2].peer, -1);
  EXPECT_EQ(plan.program.lanes[2].ops, std::vector<uint32_t>{2});
  // Rank 2's own operations, in program order.
  ASSERT_EQ(plan.program.ops.size(), 3u);
  EXPECT_EQ(plan.program.ops[0].kind, NativePlanOp::kSend);
  EXPECT_EQ(plan.program.ops[0].peer, 0);
  EXPECT_EQ(plan.program.ops[1].kind, NativePlanOp::kRecv);
  EXPECT_EQ(plan.program.ops[1].dst.buffer, NativeChunks::kScratch);
  const NativePlanOp& copy = plan.program.ops[2];
  EXPECT_EQ(copy.kind, NativePlanOp::kCopy);
  EXPECT_EQ(copy.lane, 1);
  ASSERT_EQ(copy.srcEnd - copy.srcBegin, 1u);
  EXPECT_EQ(plan.program.srcs[copy.srcBegin].buffer, NativeChunks::kScratch);
  EXPECT_EQ(plan.program.srcs[copy.srcBegin].count, 2u);
  // The copy reads what the receive wrote: a whole-operation dependency.
  ASSERT_EQ(copy.depEnd - copy.depBegin, 1u);
  EXPECT_EQ(plan.program.deps[copy.depBegin].on, 1u);
  EXPECT_FALSE(plan.program.deps[copy.depBegin].streamed);
}

TEST(PlanNative, InPlaceProgramStreamsTheOverwriteOfWhatIsSent) {
  // Rank 1 sends its input, then receives into its output: in place the receive overwrites what
  // the send reads, chunk by chunk behind it (else it waits for the whole send: a deadlock on
  // bounded channels).
  const PlanProgram program = loadPlan(kStar);
  const NativePlan plan = nativePlanOf(program, 1);
  ASSERT_EQ(plan.program.ops.size(), 2u);
  EXPECT_EQ(plan.program.ops[1].depEnd - plan.program.ops[1].depBegin, 0u);
  ASSERT_EQ(plan.aliased.ops.size(), 2u);
  const NativePlanOp& recv = plan.aliased.ops[1];
  ASSERT_EQ(recv.depEnd - recv.depBegin, 1u);
  EXPECT_EQ(plan.aliased.deps[recv.depBegin].on, 0u);
  EXPECT_TRUE(plan.aliased.deps[recv.depBegin].streamed);
}

// A backend that runs plans and records what it was handed.
class PlanRunningNative final : public test::FakeNative {
 public:
  bool runsPlans() const override { return true; }
  void runPlan(int plan, const CollArgs& args, const NativePlanCall& call) override {
    calls.push_back({plan, args.count, call});
  }
  struct Call {
    int plan;
    uint64_t count;
    NativePlanCall call;
  };
  std::vector<Call> calls;
};

TEST(PlanNative, ACallOfANativePlanGoesToTheBackendWithHowItApplies) {
  PlanRegistry registry(3);
  PlanEntry& entry = registry.add(loadPlan(kStar), "text");
  entry.nativePlan = 7;
  PlanRunningNative native;
  AlgoContext ctx;
  ctx.rank = 1;
  ctx.nranks = 3;
  ctx.native = &native;
  std::vector<float> a(64), b(64);
  CollArgs args;
  args.func = loomFuncAllReduce;
  args.dtype = loomFloat32;
  args.count = 32;
  args.send = a.data(), args.recv = b.data();
  runPlan(entry, ctx, args);
  args.recv = a.data();  // in place
  runPlan(entry, ctx, args);
  args.recv = a.data() + 1;  // overlapping, not in place
  runPlan(entry, ctx, args);
  ASSERT_EQ(native.calls.size(), 3u);
  EXPECT_EQ(native.calls[0].plan, 7);
  EXPECT_EQ(native.calls[0].count, 32u);
  EXPECT_EQ(native.calls[0].call.parts, 1u);
  EXPECT_EQ(native.calls[0].call.inPlace, NativePlanCall::InPlace::kNo);
  EXPECT_EQ(native.calls[1].call.inPlace, NativePlanCall::InPlace::kAliased);
  EXPECT_EQ(native.calls[2].call.inPlace, NativePlanCall::InPlace::kCopy);
}

}  // namespace
}  // namespace loom
