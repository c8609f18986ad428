// Chooses the algorithm of each call from a small table it can explain (loom-info --algos,
// LOOM_DEBUG=INFO). LOOM_ALGO=allreduce:ring,allgather:direct forces one per collective.
#pragma once

#include <array>
#include <string>

#include "algorithms/context.hpp"

namespace loom {

struct SelectorInputs {
  int nranks = 1;
  bool sharedMemory = true;   // every rank of the communicator on one host
  bool nodesShared = false;   // several nodes, some holding more than one rank (CPU only)
  size_t directMaxBytes = 0;  // allreduce/reduce switch from direct to pipelined above this
  DeviceKind device = DeviceKind::kCpu;  // the algorithms of this kind of buffers
  int64_t llMaxBytes = -1;  // CUDA: LL up to this many bytes, simple above (-1: per collective)
};

class Selector {
 public:
  // Parses the override (throws loomInvalidArgument naming the valid choices).
  Selector(const SelectorInputs& inputs, const std::string& override);
  const Algorithm& select(loomFunc_t func, size_t bytes) const;
  std::string explain() const;  // one line per collective

 private:
  const Algorithm* must(loomFunc_t func, const char* name) const;
  SelectorInputs inputs_;
  std::array<const Algorithm*, loomNumFuncs> forced_{};
  // Looked up once here, so a call's selection does no string comparison.
  std::array<const Algorithm*, loomNumFuncs> small_{}, large_{};
  std::array<size_t, loomNumFuncs> smallMax_{};  // largest call (bytes) that takes small_
};

}  // namespace loom
