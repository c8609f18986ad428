// Plans refused at load: schema violations and plans whose simulated run is wrong (a missing
// send, a cycle of waits, an output chunk written twice, a chunk read before it is written, a
// misplaced average), each with a message that says where.
#include "plan/plan_check.hpp"

#include <gtest/gtest.h>

#include <string>

#include "base/error.hpp"
#include "plan/plan_registry.hpp"

namespace loom {
namespace {

// A 2-rank allreduce of one chunk a block: each rank sends its input and reduces what arrives
// with it into the output. `ops0`/`ops1` replace a rank's operations.
std::string twoRanks(const std::string& ops0, const std::string& ops1,
                     const std::string& extra = "") {
  return R"({"loom_plan":1,"name":"t","collective":"allreduce","nranks":2,)"
         R"("chunks_per_block":1,"scratch_chunks":1)" +
         extra + R"(,"ranks":[{"ops":[)" + ops0 + "]},{\"ops\":[" + ops1 + "]}]}";
}

const char* const kGood0 =
    R"({"op":"send","peer":1,"src":["input",0]},)"
    R"({"op":"recv_reduce","peer":1,"dst":["output",0],"src":["input",0],"final":true})";
const char* const kGood1 =
    R"({"op":"send","peer":0,"src":["input",0]},)"
    R"({"op":"recv_reduce","peer":0,"dst":["output",0],"src":["input",0],"final":true})";

std::string refusal(const std::string& json) {
  try {
    loadPlan(json);
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), loomInvalidArgument) << e.what();
    return e.what();
  }
  return "";
}

void expectRefused(const std::string& json, const std::string& words) {
  const std::string why = refusal(json);
  EXPECT_NE(why.find(words), std::string::npos) << "wanted '" << words << "' in: " << why;
}

TEST(PlanCheck, AcceptsACorrectPlan) {
  const PlanProgram p = loadPlan(twoRanks(kGood0, kGood1));
  EXPECT_EQ(p.plan.name, "t");
  EXPECT_EQ(p.hash.size(), 16u);
  EXPECT_EQ(p.hash, loadPlan(planToJson(p.plan)).hash);  // canonical text round-trips
}

TEST(PlanCheck, RefusesSchemaViolations) {
  expectRefused(R"({"loom_plan":2})", "format version 2");
  expectRefused(twoRanks(kGood0, kGood1, R"(,"colour":1)"), "unknown member \"colour\"");
  expectRefused(twoRanks(R"({"op":"jump"})", kGood1), "rank 0 op 0: unknown operation \"jump\"");
  expectRefused(twoRanks(R"({"op":"send","peer":2,"src":["input",0]})", kGood1),
                "peer = 2 is outside [0, 1]");
  expectRefused(twoRanks(R"({"op":"send","peer":0,"src":["input",0]})", kGood1),
                "cannot send to or receive from itself");
  expectRefused(twoRanks(R"({"op":"copy","dst":["output",1],"src":["input",0]})", kGood1),
                "chunk index = 1 is outside [0, 0]");
  expectRefused(twoRanks(R"({"op":"copy","dst":["input",0],"src":["output",0]})", kGood1),
                "the input is read-only");
  expectRefused(R"({"loom_plan":1,"name":"t","collective":"allreduce","nranks":3,)"
                R"("chunks_per_block":1,"ranks":[{"ops":[]}]})",
                "\"ranks\" lists 1 ranks but nranks is 3");
  expectRefused(R"({"loom_plan":1,"name":"t","collective":"broadcast","nranks":1,)"
                R"("chunks_per_block":1,"ranks":[{"ops":[]}]})",
                "\"collective\" must be");
  expectRefused("/nonexistent/plan.json", "cannot read plan file '/nonexistent/plan.json'");
}

TEST(PlanCheck, RefusesAMissingSend) {
  expectRefused(twoRanks(R"({"op":"recv_reduce","peer":1,"dst":["output",0],)"
                         R"("src":["input",0],"final":true})",
                         kGood1),
                "fails its check");
  expectRefused(twoRanks(R"({"op":"recv_reduce","peer":1,"dst":["output",0],)"
                         R"("src":["input",0],"final":true})",
                         kGood1),
                "rank 1");  // its send is never received
}

TEST(PlanCheck, RefusesACycleOfWaits) {
  // Each rank receives into scratch and only then sends it on: both wait for the other.
  const std::string waits0 =
      R"({"op":"recv","peer":1,"dst":["scratch",0]},{"op":"send","peer":1,"src":["scratch",0]},)"
      R"({"op":"reduce","dst":["output",0],"srcs":[["input",0],["scratch",0]],"final":true})";
  const std::string waits1 =
      R"({"op":"recv","peer":0,"dst":["scratch",0]},{"op":"send","peer":0,"src":["scratch",0]},)"
      R"({"op":"reduce","dst":["output",0],"srcs":[["input",0],["scratch",0]],"final":true})";
  const std::string why = refusal(twoRanks(waits0, waits1));
  EXPECT_NE(why.find("no operation can go on"), std::string::npos) << why;
  EXPECT_NE(why.find("rank 0"), std::string::npos) << why;
  EXPECT_NE(why.find("rank 1"), std::string::npos) << why;
}

TEST(PlanCheck, RefusesAChunkWrittenTwice) {
  expectRefused(
      twoRanks(std::string(kGood0) + R"(,{"op":"copy","dst":["output",0],"src":["input",0]})",
               kGood1),
      "rank 0 writes output chunk 0 2 times");
}

TEST(PlanCheck, RefusesAChunkReadBeforeItIsWritten) {
  expectRefused(twoRanks(R"({"op":"send","peer":1,"src":["scratch",0]},)"
                         R"({"op":"recv_reduce","peer":1,"dst":["output",0],)"
                         R"("src":["input",0],"final":true})",
                         kGood1),
                "rank 1 output chunk 0 is wrong");
}

TEST(PlanCheck, RefusesAMisplacedAverage) {
  const std::string noFinal = R"({"op":"send","peer":1,"src":["input",0]},)"
                              R"({"op":"recv_reduce","peer":1,"dst":["output",0],)"
                              R"("src":["input",0]})";
  expectRefused(twoRanks(noFinal, kGood1), "the division is not where the reduction completes");
}

TEST(PlanCheck, RefusesTheWrongRankCountAtRegistration) {
  PlanRegistry registry(3);
  EXPECT_THROW(
      {
        try {
          registry.add(loadPlan(twoRanks(kGood0, kGood1)), "text");
        } catch (const Error& e) {
          EXPECT_NE(std::string(e.what()).find("is for 2 ranks but this communicator has 3"),
                    std::string::npos);
          throw;
        }
      },
      Error);
  PlanRegistry two(2);
  const PlanEntry& entry = two.add(loadPlan(twoRanks(kGood0, kGood1)), "text");
  EXPECT_EQ(entry.algorithmName, "plan:t");
  EXPECT_EQ(&two.add(loadPlan(twoRanks(kGood0, kGood1)), "again"), &entry);
  const std::string other =
      twoRanks(kGood0, kGood1, R"(,"max_bytes":100)");  // same name, other content
  EXPECT_THROW(two.add(loadPlan(other), "other"), Error);
}

}  // namespace
}  // namespace loom
