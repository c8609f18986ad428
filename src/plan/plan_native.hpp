// A compiled plan as a backend's native collectives run it (device/native_plan.hpp): this rank's
// operations and dependencies as plain data, with the figures every rank must size its run from
// alike (lanes, chunks an operation moves), taken over all ranks' programs.
#pragma once

#include "device/native_plan.hpp"
#include "plan/plan_program.hpp"

namespace loom {

NativePlan nativePlanOf(const PlanProgram& program, int rank);

// The lanes rank `rank`'s program runs on: one per peer it sends to, one per peer it receives
// from, one per local lane its copies and reductions name.
int planLanes(const RankProgram& program);

}  // namespace loom
