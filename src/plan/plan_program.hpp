// A loaded plan made runnable: each rank's operations with the dependencies their chunks imply,
// and the schedule (exec/schedule.hpp) of one call built from them.
//
// Dependencies are not written in the plan; they follow from program order and the chunks each
// operation reads and writes, as a compiler orders memory accesses: an operation waits for every
// earlier one that writes what it reads or writes, or reads what it writes. A send of exactly the
// chunks an earlier receive writes streams behind it (byte i may go once byte i arrived), which is
// what pipelines a ring's steps and keeps it moving over bounded channels. Sends and receives go
// to the schedule's lanes of their peer (channel order is program order); copies and reductions
// to the local lane the plan names.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "exec/schedule.hpp"
#include "plan/plan_format.hpp"

namespace loom {

struct ProgramDep {
  uint32_t on = 0;  // an earlier operation of the same rank
  bool streamed = false;
};

struct RankProgram {
  std::vector<PlanOp> ops;
  std::vector<uint32_t> depBegin;  // ops.size() + 1 offsets into deps
  std::vector<ProgramDep> deps;
};

struct PlanProgram {
  Plan plan;
  std::string hash;  // planHash(plan)
  std::vector<RankProgram> ranks;
  // Allreduce in place (input and output one buffer): the dependencies with input chunk i and
  // output chunk i the same memory, so the plan runs on the aliased buffer without a copy.
  std::vector<RankProgram> aliasedRanks;
};

// Computes the dependencies (the plan's schema already checked by parsePlan).
PlanProgram compilePlan(Plan plan);

// One call's shape: the block's element count (the C API's count), the element size, how
// reductions combine, and how the plan is applied.
struct PlanCall {
  uint64_t count = 0;
  size_t elementSize = 4;
  Reduction reduction;  // divisor: what final reductions divide by (average: the rank count)
  uint32_t parts = 1;   // planParts()
  // In place. kAliased: an allreduce whose input is its output (the aliased dependencies);
  // kCopy: any other overlap, the plan reads a copy of the input made first.
  enum class InPlace : uint8_t { kNo, kAliased, kCopy } inPlace = InPlace::kNo;
};

// How many parts a call of `count` elements runs the plan in (pipelining, plan.partBytes).
uint32_t planParts(const Plan& plan, uint64_t count, size_t elementSize);

// Appends rank `rank`'s operations for `call` to `s`, cleared and with its extents set (the
// caller finishes it). Scratch buffers are added to `s`.
void buildPlanSchedule(const PlanProgram& program, int rank, const PlanCall& call, Schedule& s);

}  // namespace loom
