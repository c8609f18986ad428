// A compiled plan as a backend's native collectives run it (device/native_plan.hpp): this rank's
// operations and dependencies as plain data, with the figures every rank must size its run from
// alike (lanes, chunks an operation moves), taken over all ranks' programs.
#pragma once

#include <vector>

#include "device/native_plan.hpp"
#include "plan/plan_program.hpp"

namespace loom {

NativePlan nativePlanOf(const PlanProgram& program, int rank);

// The lanes a rank's program runs on (NativePlanLane), in order of first use.
std::vector<NativePlanLane> planLanesOf(const RankProgram& program);
// How many: at least 1 (a rank with nothing to do still takes part).
int planLanes(const RankProgram& program);

}  // namespace loom
