// A fuzz run of the plan loader (parse, schema, compile, simulated check) on random and mutated
// plans: every input is either accepted or refused with loom::Error; nothing crashes or hangs.
// The seed is fixed so a failure reproduces; LOOM_PLAN_FUZZ_ITERATIONS runs longer.
#include <gtest/gtest.h>

#include <cstdlib>
#include <random>
#include <string>

#include "base/error.hpp"
#include "plan/plan_registry.hpp"

namespace loom {
namespace {

// The fuzz entry point: one input, any bytes.
bool loadOne(const std::string& bytes) {
  try {
    loadPlan(bytes.empty() || bytes[0] != '{' ? "{" + bytes : bytes);
    return true;
  } catch (const Error&) {
    return false;
  }
}

const char* const kSeed =
    R"({"loom_plan":1,"name":"f","collective":"allreduce","nranks":3,"chunks_per_block":3,)"
    R"("scratch_chunks":6,"pipeline":{"chunk_bytes":64,"max_parts":4},"ranks":[)"
    R"({"ops":[{"op":"send","peer":1,"src":["input",0]},)"
    R"({"op":"recv_reduce","peer":2,"dst":["scratch",2],"src":["input",2]},)"
    R"({"op":"send","peer":1,"src":["scratch",2]},)"
    R"({"op":"recv_reduce","peer":2,"dst":["output",1],"src":["input",1],"final":true},)"
    R"({"op":"send","peer":1,"src":["output",1]},{"op":"recv","peer":2,"dst":["output",0]},)"
    R"({"op":"send","peer":1,"src":["output",0]},{"op":"recv","peer":2,"dst":["output",2]}]},)"
    R"({"ops":[{"op":"send","peer":2,"src":["input",1]},)"
    R"({"op":"recv_reduce","peer":0,"dst":["scratch",0],"src":["input",0]},)"
    R"({"op":"send","peer":2,"src":["scratch",0]},)"
    R"({"op":"recv_reduce","peer":0,"dst":["output",2],"src":["input",2],"final":true},)"
    R"({"op":"send","peer":2,"src":["output",2]},{"op":"recv","peer":0,"dst":["output",1]},)"
    R"({"op":"send","peer":2,"src":["output",1]},{"op":"recv","peer":0,"dst":["output",0]}]},)"
    R"({"ops":[{"op":"send","peer":0,"src":["input",2]},)"
    R"({"op":"recv_reduce","peer":1,"dst":["scratch",1],"src":["input",1]},)"
    R"({"op":"send","peer":0,"src":["scratch",1]},)"
    R"({"op":"recv_reduce","peer":1,"dst":["output",0],"src":["input",0],"final":true},)"
    R"({"op":"send","peer":0,"src":["output",0]},{"op":"recv","peer":1,"dst":["output",2]},)"
    R"({"op":"send","peer":0,"src":["output",2]},{"op":"recv","peer":1,"dst":["output",1]}]}]})";

std::string mutate(std::string text, std::mt19937& random) {
  static const char* const tokens[] = {
      "0",           "1",          "2",        "-1",       "99999999999", "\"input\"",
      "\"scratch\"", "\"output\"", "\"recv\"", "\"send\"", "\"reduce\"",  "\"copy\"",
      "true",        "null",       "[",        "]",        "{",           "}",
      ",",           ":",          "\"",       "1e308",    "4096"};
  const int edits = 1 + static_cast<int>(random() % 4);
  for (int e = 0; e < edits && !text.empty(); ++e) {
    const size_t at = random() % text.size();
    switch (random() % 4) {
      case 0:  // flip a byte
        text[at] = static_cast<char>(random() % 256);
        break;
      case 1:  // drop a run
        text.erase(at, 1 + random() % 16);
        break;
      case 2:  // insert a token
        text.insert(at, tokens[random() % (sizeof tokens / sizeof *tokens)]);
        break;
      default: {  // swap a digit for another
        const size_t digit = text.find_first_of("0123456789", at);
        if (digit != std::string::npos) text[digit] = static_cast<char>('0' + random() % 10);
        break;
      }
    }
  }
  return text;
}

TEST(PlanFuzz, MutatedPlansAreAcceptedOrRefusedCleanly) {
  ASSERT_TRUE(loadOne(kSeed));
  const char* env = std::getenv("LOOM_PLAN_FUZZ_ITERATIONS");
  const int iterations = env != nullptr ? std::atoi(env) : 3000;
  std::mt19937 random(20261128);
  int accepted = 0;
  for (int i = 0; i < iterations; ++i) accepted += loadOne(mutate(kSeed, random));
  // Most mutations break the plan, a few (a peer's digit in a dead spot) keep it right.
  EXPECT_LT(accepted, iterations);
  for (int i = 0; i < 300; ++i) {  // random bytes
    std::string bytes(random() % 200, '\0');
    for (char& c : bytes) c = static_cast<char>(random() % 256);
    EXPECT_FALSE(loadOne(bytes));
  }
}

}  // namespace
}  // namespace loom
