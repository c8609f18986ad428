// Chooses the algorithm of each call from a small table it can explain (loom-info --algos,
// LOOM_DEBUG=INFO). LOOM_ALGO=allreduce:ring,allgather:direct forces one per collective.
// The table is Loom's own for host algorithms; a backend with native collectives brings its
// algorithms and its rows instead (device/native.hpp).
#pragma once

#include <array>
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
    for (const Tier& t : tiers_[func])
      if (bytes <= t.maxBytes) return *t.algo;
    return *tiers_[func].back().algo;
  }
  std::string explain() const;  // one line per collective

 private:
  struct Tier {
    size_t maxBytes;
    const Algorithm* algo;
  };
  const Algorithm* find(loomFunc_t func, const std::string& name) const;
  const Algorithm* must(loomFunc_t func, const char* name) const;
  void hostTable();
  void nativeTable();
  SelectorInputs inputs_;
  std::array<const Algorithm*, loomNumFuncs> forced_{};
  // Resolved once here, so a call's selection does no string comparison.
  std::array<std::vector<Tier>, loomNumFuncs> tiers_;
};

}  // namespace loom
