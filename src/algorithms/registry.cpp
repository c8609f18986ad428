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
    registerHierarchicalBlockAlgorithms(out);
    registerHierarchicalAllToAllAlgorithms(out);
    return out;
  }();
  return all;
}

const Algorithm* findAlgorithm(loomFunc_t func, const std::string& name) {
  for (const Algorithm& algo : allAlgorithms())
    if (algo.func == func && name == algo.name) return &algo;
  return nullptr;
}

std::vector<Algorithm> nativeAlgorithms(const NativeCollectives& native) {
  std::vector<Algorithm> out;
  const std::vector<NativeAlgorithm>& list = native.algorithms();
  for (size_t i = 0; i < list.size(); ++i)
    out.push_back({list[i].func, list[i].name.c_str(), nullptr, false, false, static_cast<int>(i)});
  return out;
}

const char* funcName(loomFunc_t func) {
  static const char* const names[loomNumFuncs] = {
      "allreduce", "broadcast", "reduce",  "allgather", "reducescatter", "alltoall",
      "alltoallv", "gather",    "scatter", "sendrecv",  "barrier"};
  if (func == kFuncExpertParallel) return "expert-parallel call";
  return func >= 0 && func < loomNumFuncs ? names[func] : "unknown";
}

}  // namespace loom
