// The semantic check of a plan at load: a plan is data from a file, so before it may run it is
// built for every rank at a few sizes (uneven chunks, several pipeline parts, in place) and run in
// the simulator (exec/simulate.hpp) on known data. It must finish (every receive meets a send of
// its size, no cycle of waits), write every output byte exactly once, never leave poisoned
// scratch or output bytes in the result (a chunk read before it was written), and give exactly
// the collective's result for a sum and for an average (which checks where it divides). The
// first failure is explained by rank, chunk and operation.
#pragma once

#include "plan/plan_program.hpp"

namespace loom {

// Throws loom::Error(loomInvalidArgument) "plan 'x' fails its check: ..." when it is wrong.
void checkPlan(const PlanProgram& program);

}  // namespace loom
