#include "plan/selector.hpp"

#include <cstdint>
#include <sstream>

#include "base/error.hpp"

namespace loom {

namespace {

std::string choicesFor(loomFunc_t func, DeviceKind device) {
  std::string out;
  for (const Algorithm& algo : allAlgorithms())
    if (algo.func == func && algo.device == device)
      out += (out.empty() ? "" : ", ") + std::string(algo.name);
  return out.empty() ? "none" : out;
}

// CUDA: the largest call (bytes as the C API counts them: per rank for allgather, reduce-scatter,
// alltoall, gather and scatter) that runs on LL packets. LL sends twice the bytes but saves the
// flag round trip of every chunk. Crossovers measured on 4 H200s over NVLink, fp32
// (docs/benchmarks.md): allreduce LL 25 us vs simple 30 us at 512 KiB, 45 vs 31 at 1 MiB;
// allgather LL 21 vs simple 24 us at 256 KiB per rank; reduce-scatter LL 14 vs 18 us at 128 KiB.
size_t defaultLLMax(loomFunc_t func) {
  switch (func) {
    case loomFuncAllReduce:
      return 512 * 1024;
    case loomFuncAllGather:
      return 256 * 1024;
    case loomFuncReduceScatter:
    case loomFuncBroadcast:
    case loomFuncReduce:
      return 128 * 1024;
    case loomFuncAllToAllv:
      return 0;  // counts differ per rank: no rank knows the size of the whole exchange
    case loomFuncBarrier:
      return SIZE_MAX;
    default:
      return 64 * 1024;  // alltoall, gather, scatter: not measured yet
  }
}

// The algorithm over pair channels of each collective: the only kind that spans nodes.
const char* channelAlgorithm(loomFunc_t func) {
  switch (func) {
    case loomFuncAllReduce:
    case loomFuncAllGather:
    case loomFuncReduceScatter:
    case loomFuncBroadcast:
    case loomFuncReduce:
      return "ring";
    default:
      return "pairwise";
  }
}

bool hasHierarchical(loomFunc_t func) { return findAlgorithm(func, "hierarchical") != nullptr; }

// Several nodes with more than one rank on some: calls of at least this many bytes (as the C API
// counts them: per rank for allgather and reduce-scatter) take the hierarchical algorithm, smaller
// ones the flat ring; 0: never by default. Measured on fake nodes (LOOM_NODE_ID, TCP over
// loopback) of a 2-core shared host, 2 x 2 and 2 x 4 ranks, loom-bench -n 20 and -n 10, twice
// (docs/benchmarks.md): hierarchical was faster in every run from these sizes on (allreduce 1 MiB:
// 2.0-3.9 ms vs 4.1-8.6 ms ring; allgather and reduce-scatter 1 MiB total), mixed
// below them (latencies of 0.1-5 ms there are mostly scheduling). broadcast and reduce stay on
// the ring: a chain crosses each node boundary once anyway, and hierarchical broadcast lost at
// 2 x 4 (4 MiB: 6.1 vs 5.2 ms) as did one in-place reduce at 2 x 2. alltoall stays pairwise: the
// hierarchical one moves the same network bytes in fewer messages and lost at every size at 2 x 2
// (16 MiB: 30-42 vs 17-23 ms), winning both runs at 2 x 4 only at 4 MiB, by 4-10%.
size_t hierarchicalMinBytes(loomFunc_t func) {
  switch (func) {
    case loomFuncAllReduce:
      return 1 << 20;
    case loomFuncAllGather:
    case loomFuncReduceScatter:
      return 256 << 10;
    default:
      return 0;
  }
}

}  // namespace

Selector::Selector(const SelectorInputs& inputs, const std::string& override) : inputs_(inputs) {
  std::stringstream items(override);
  std::string item;
  while (std::getline(items, item, ',')) {
    if (item.empty()) continue;
    size_t colon = item.find(':');
    LOOM_CHECK_ARG(colon != std::string::npos, "LOOM_ALGO item '", item,
                   "' is not of the form collective:algorithm");
    std::string funcText = item.substr(0, colon), algoText = item.substr(colon + 1);
    int func = -1;
    for (int f = 0; f < loomNumFuncs; ++f)
      if (funcText == funcName(static_cast<loomFunc_t>(f))) func = f;
    LOOM_CHECK_ARG(func >= 0, "LOOM_ALGO names unknown collective '", funcText, "'");
    const Algorithm* algo = findAlgorithm(static_cast<loomFunc_t>(func), algoText, inputs_.device);
    LOOM_CHECK_ARG(algo != nullptr, "LOOM_ALGO: ", funcText, " has no algorithm '", algoText,
                   "' for ", inputs_.device == DeviceKind::kCuda ? "CUDA" : "CPU",
                   " communicators (choices: ",
                   choicesFor(static_cast<loomFunc_t>(func), inputs_.device), ")");
    LOOM_CHECK_ARG(!algo->needsArena || inputs_.sharedMemory, "LOOM_ALGO: ", funcText, ":",
                   algoText,
                   " needs all ranks on one node (it works through one shared-memory arena) but "
                   "this communicator spans several; valid here: ",
                   channelAlgorithm(static_cast<loomFunc_t>(func)),
                   hasHierarchical(static_cast<loomFunc_t>(func)) ? ", hierarchical" : "");
    // One node: the hierarchical algorithm would be its intra-node phase alone, which is what
    // the table below picks anyway.
    if (algoText == "hierarchical" && inputs_.sharedMemory) continue;
    forced_[func] = algo;
  }
  for (int f = 0; f < loomNumFuncs; ++f) {
    auto func = static_cast<loomFunc_t>(f);
    if (func == loomFuncSendRecv) continue;
    if (inputs_.device == DeviceKind::kCuda) {
      small_[f] = must(func, "ll");
      large_[f] = func == loomFuncBarrier ? small_[f] : must(func, "simple");
      smallMax_[f] = inputs_.llMaxBytes >= 0 && func != loomFuncBarrier
                         ? static_cast<size_t>(inputs_.llMaxBytes)
                         : defaultLLMax(func);
      if (func == loomFuncAllToAllv && inputs_.llMaxBytes < 0) small_[f] = large_[f];
      continue;
    }
    smallMax_[f] = inputs_.directMaxBytes;
    if (!inputs_.sharedMemory) {
      // Ranks on several nodes: algorithms over pair channels, and the hierarchical ones where
      // a node holds several ranks.
      small_[f] = large_[f] = must(func, channelAlgorithm(func));
      if (inputs_.nodesShared && hierarchicalMinBytes(func) > 0) {
        large_[f] = must(func, "hierarchical");
        smallMax_[f] = hierarchicalMinBytes(func) - 1;
      }
    } else {
      small_[f] = must(func, "direct");
      bool reduction = func == loomFuncAllReduce || func == loomFuncReduce;
      large_[f] = reduction ? must(func, "pipelined") : small_[f];
    }
  }
}

const Algorithm* Selector::must(loomFunc_t func, const char* name) const {
  const Algorithm* algo = findAlgorithm(func, name, inputs_.device);
  if (algo == nullptr)
    LOOM_THROW(loomInternalError, "no algorithm ", name, " for ", funcName(func));
  return algo;
}

const Algorithm& Selector::select(loomFunc_t func, size_t bytes) const {
  if (forced_[func] != nullptr) return *forced_[func];
  return *(bytes <= smallMax_[func] ? small_[func] : large_[func]);
}

std::string Selector::explain() const {
  std::ostringstream out;
  out << "algorithm table for " << inputs_.nranks << " ranks"
      << (inputs_.sharedMemory ? " on one node" : " on several nodes")
      << (inputs_.device == DeviceKind::kCuda ? ", CUDA" : "") << ":";
  for (int f = 0; f < loomNumFuncs; ++f) {
    auto func = static_cast<loomFunc_t>(f);
    if (func == loomFuncSendRecv) continue;
    out << " " << funcName(func) << "=";
    if (forced_[f] != nullptr) {
      out << forced_[f]->name << "(forced)";
    } else if (small_[f] != large_[f]) {
      out << small_[f]->name << "<=" << smallMax_[f] << "B<" << large_[f]->name;
    } else {
      out << select(func, 0).name;
    }
  }
  return out.str();
}

}  // namespace loom
