#include <cstring>
#include <string>

#include "algorithms/context.hpp"
#include "algorithms/families.hpp"

namespace loom {

const std::vector<Algorithm>& allAlgorithms() {
  static const std::vector<Algorithm> all = [] {
    std::vector<Algorithm> out;
    registerDirectAlgorithms(out);
    registerPipelinedAlgorithms(out);
    registerRingAlgorithms(out);
    registerAllToAllvAlgorithms(out);
    registerPairwiseAlgorithms(out);
    registerHierarchicalAlgorithms(out);
    registerHierarchicalAllToAllAlgorithms(out);
#if LOOM_HAVE_CUDA
    registerCudaAlgorithms(out);
#endif
    return out;
  }();
  return all;
}

const Algorithm* findAlgorithm(loomFunc_t func, const std::string& name, DeviceKind device) {
  for (const Algorithm& algo : allAlgorithms())
    if (algo.func == func && algo.device == device && name == algo.name) return &algo;
  return nullptr;
}

const char* funcName(loomFunc_t func) {
  static const char* const names[loomNumFuncs] = {
      "allreduce", "broadcast", "reduce",  "allgather", "reducescatter", "alltoall",
      "alltoallv", "gather",    "scatter", "sendrecv",  "barrier"};
  return func >= 0 && func < loomNumFuncs ? names[func] : "unknown";
}

}  // namespace loom
