// Chooses the algorithm of each call from a small table it can explain (loom-info --algos,
// LOOM_DEBUG=INFO). LOOM_ALGO=allreduce:ring,allgather:direct forces one per collective.
// The table is Loom's own for host algorithms; a backend with native collectives brings its
// algorithms and its rows instead (device/native.hpp). Execution plans (plan_registry.hpp) come
// before the table within their size ranges (the narrowest range first, then the latest), a user's
// selector callback before both, and LOOM_ALGO=allreduce:plan:NAME forces one once it is
// registered.
#pragma once

#include <array>
#include <functional>
#include <string>
#include <vector>

#include "algorithms/context.hpp"

namespace loom {

struct SelectorInputs {
  int nranks = 1;
  bool sharedMemory = true;    // every rank of the communicator on one host
  bool nodesShared = false;    // several nodes, some holding more than one rank
  size_t directMaxBytes = 0;   // allreduce/reduce switch from direct to pipelined above this
  std::string device = "cpu";  // the device kind, for messages
  // A backend's native collectives: their table entries (nativeAlgorithms()) and rows. Null:
  // the host algorithms.
  const std::vector<Algorithm>* native = nullptr;
  std::vector<NativeSelectorRow> nativeRows;
};

class Selector {
 public:
  // Parses the override (throws loomInvalidArgument naming the valid choices).
  Selector(const SelectorInputs& inputs, const std::string& override);
  const Algorithm& select(loomFunc_t func, size_t bytes) const {
    if (forced_[func] != nullptr) return *forced_[func];
    if (planned_) return selectPlanned(func, bytes);
    return builtIn(func, bytes);
  }
  // The table's choice, ignoring plans, the callback and LOOM_ALGO.
  const Algorithm& builtIn(loomFunc_t func, size_t bytes) const {
    for (const Tier& t : tiers_[func])
      if (bytes <= t.maxBytes) return *t.algo;
    return *tiers_[func].back().algo;
  }
  std::string explain() const;  // one line per collective

  // A registered plan's algorithm for calls of [minBytes, maxBytes] bytes; forced if LOOM_ALGO
  // names it.
  void addPlan(const Algorithm* algo, size_t minBytes, size_t maxBytes);
  // The user's choice per call: an algorithm name of the collective ("plan:NAME", "ring"...), or
  // empty for the usual choice. Empty function: none.
  using Callback = std::function<std::string(loomFunc_t func, size_t bytes)>;
  void setCallback(Callback callback);

 private:
  struct Tier {
    size_t maxBytes;
    const Algorithm* algo;
  };
  const Algorithm* find(loomFunc_t func, const std::string& name) const;
  const Algorithm& selectPlanned(loomFunc_t func, size_t bytes) const;
  struct PlanTier {
    size_t minBytes, maxBytes;
    const Algorithm* algo;
  };
  const Algorithm* must(loomFunc_t func, const char* name) const;
  void hostTable();
  void nativeTable();
  SelectorInputs inputs_;
  std::array<const Algorithm*, loomNumFuncs> forced_{};
  // Resolved once here, so a call's selection does no string comparison.
  std::array<std::vector<Tier>, loomNumFuncs> tiers_;
  bool planned_ = false;  // plans, a callback or a forced plan not yet registered
  std::array<std::vector<PlanTier>, loomNumFuncs> plans_;
  std::array<std::string, loomNumFuncs> forcedPlan_;  // LOOM_ALGO's plan names
  Callback callback_;
};

}  // namespace loom
