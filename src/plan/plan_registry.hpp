// The execution plans of one communicator: loaded (from JSON text or a file), compiled, checked,
// and each entered in the selector as the algorithm "plan:NAME" of its collective, for its size
// range. Each keeps the schedule of its last call shape, so repeated calls of one shape build
// nothing.
#pragma once

#include <array>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "algorithms/context.hpp"
#include "plan/plan_program.hpp"

namespace loom {

// Reads a plan: `jsonOrPath` is JSON text when it starts with '{' (after whitespace), else the
// path of a file holding it. Parses, compiles and checks it (plan_check.hpp); throws naming the
// file and what is wrong.
PlanProgram loadPlan(std::string_view jsonOrPath);

// The *.json files of a directory, sorted (LOOM_PLAN_DIR); throws when it cannot be read.
std::vector<std::string> planFilesIn(const std::string& directory);

// What a call's schedule depends on besides its plan (count, element size, reduction, parts, in
// place): a fixed array, so comparing a call's with the last one's allocates nothing.
using PlanShape = std::array<uint64_t, 8>;

// What a communicator registered.
struct PlanEntry {
  PlanProgram program;
  std::string algorithmName;  // "plan:NAME"
  Algorithm algorithm;
  std::string source;  // the file, or "text"
  // Where the communicator's native collectives run the plan themselves (a GPU kernel): the index
  // NativeCollectives::loadPlan gave it; -1: the host schedule below.
  int nativePlan = -1;
  // The schedule of the last call, and the shape it was built for.
  std::mutex mutex;
  Schedule schedule;
  PlanShape shape{};
};

class PlanRegistry {
 public:
  // A plan must name `nranks` ranks.
  explicit PlanRegistry(int nranks) : nranks_(nranks) {}
  // Adds a checked plan (throws loomInvalidArgument for the wrong rank count, or for a name
  // already registered with different content; the same plan again returns the entry there).
  PlanEntry& add(PlanProgram program, std::string source);
  const PlanEntry* find(const std::string& name) const;
  const std::deque<std::unique_ptr<PlanEntry>>& entries() const { return entries_; }
  // One line per plan: name, collective, ranks, size range, chunks, hash, source.
  std::string describe() const;

 private:
  int nranks_;
  std::deque<std::unique_ptr<PlanEntry>> entries_;
};

// "allreduce on 4 ranks, 0 B - any, 4 chunks a block, 2 scratch chunks, pipelined by 1 MiB (at
// most 8 parts), hash 0123456789abcdef": a plan in words.
std::string describePlan(const Plan& plan);

// True for a registered plan's algorithm ("plan:NAME"): the only algorithms that carry data of
// their own (Algorithm::runWith).
inline bool isPlan(const Algorithm& algo) { return static_cast<bool>(algo.runWith); }

// Runs `entry`'s plan for one call (the Algorithm's runWith).
void runPlan(PlanEntry& entry, const AlgoContext& ctx, const CollArgs& args);

}  // namespace loom
