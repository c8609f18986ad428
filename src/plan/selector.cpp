#include "plan/selector.hpp"

#include <cstdint>
#include <sstream>

#include "base/error.hpp"

namespace loom {

namespace {

std::string choicesFor(loomFunc_t func, const std::vector<Algorithm>& candidates) {
  std::string out;
  for (const Algorithm& algo : candidates)
    if (algo.func == func) out += (out.empty() ? "" : ", ") + std::string(algo.name);
  return out.empty() ? "none" : out;
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
// below them (latencies of 0.1-5 ms there are mostly scheduling). Reduce, since its node phases
// run on the arena (2026-11-29, the same method, 3 runs): hierarchical faster at every size from
// 1 MiB at 2 x 2 and 2 x 4 (2 x 2, 64 MiB: 55-61 vs 71-80 ms ring; 2 x 4, 1 MiB: 1.2-1.6 vs
// 1.8-2.2 ms), mixed at 256 KiB. broadcast stays on the ring: a chain crosses each node boundary
// once anyway, and hierarchical broadcast lost at 2 x 4 (4 MiB: 6.1 vs 5.2 ms). alltoall stays
// pairwise: the hierarchical one moves the same network bytes in fewer messages and lost at every
// size at 2 x 2 (16 MiB: 30-42 vs 17-23 ms), winning both runs at 2 x 4 only at 4 MiB, by 4-10%.
size_t hierarchicalMinBytes(loomFunc_t func) {
  switch (func) {
    case loomFuncAllReduce:
    case loomFuncReduce:
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
  const std::vector<Algorithm>& candidates =
      inputs_.native != nullptr ? *inputs_.native : allAlgorithms();
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
    if (algoText.rfind("plan:", 0) == 0) {  // forced once registered (addPlan)
      LOOM_CHECK_ARG(algoText.size() > 5, "LOOM_ALGO item '", item, "' names no plan");
      forcedPlan_[func] = algoText;
      planned_ = true;
      continue;
    }
    const Algorithm* algo = find(static_cast<loomFunc_t>(func), algoText);
    LOOM_CHECK_ARG(algo != nullptr, "LOOM_ALGO: ", funcText, " has no algorithm '", algoText,
                   "' for ", inputs_.device, " communicators (choices: ",
                   choicesFor(static_cast<loomFunc_t>(func), candidates), ")");
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
  if (inputs_.native != nullptr)
    nativeTable();
  else
    hostTable();
}

void Selector::nativeTable() {
  for (const NativeSelectorRow& row : inputs_.nativeRows) {
    if (row.algorithm < 0 || row.algorithm >= static_cast<int>(inputs_.native->size()))
      LOOM_THROW(loomInternalError, "native selector row of ", funcName(row.func),
                 " names algorithm ", row.algorithm);
    tiers_[row.func].push_back({row.maxBytes, &(*inputs_.native)[row.algorithm]});
  }
  for (int f = 0; f < loomNumFuncs; ++f) {
    if (f == loomFuncSendRecv) continue;
    if (tiers_[f].empty())
      LOOM_THROW(loomInternalError, "the ", inputs_.device, " backend has no algorithm for ",
                 funcName(static_cast<loomFunc_t>(f)));
    tiers_[f].back().maxBytes = SIZE_MAX;
  }
}

void Selector::hostTable() {
  for (int f = 0; f < loomNumFuncs; ++f) {
    auto func = static_cast<loomFunc_t>(f);
    if (func == loomFuncSendRecv) continue;
    std::vector<Tier>& tiers = tiers_[f];
    if (!inputs_.sharedMemory) {
      // Ranks on several nodes: algorithms over pair channels, and the hierarchical ones where
      // a node holds several ranks.
      const Algorithm* flat = must(func, channelAlgorithm(func));
      if (inputs_.nodesShared && hierarchicalMinBytes(func) > 0) {
        tiers.push_back({hierarchicalMinBytes(func) - 1, flat});
        tiers.push_back({SIZE_MAX, must(func, "hierarchical")});
      } else {
        tiers.push_back({SIZE_MAX, flat});
      }
      continue;
    }
    const Algorithm* direct = must(func, "direct");
    bool reduction = func == loomFuncAllReduce || func == loomFuncReduce;
    if (reduction) tiers.push_back({inputs_.directMaxBytes, direct});
    tiers.push_back({SIZE_MAX, reduction ? must(func, "pipelined") : direct});
  }
}

void Selector::addPlan(const Algorithm* algo, size_t minBytes, size_t maxBytes) {
  // The narrowest size range first (a small-message plan beside a general one), the latest
  // registered first among equal ranges.
  std::vector<PlanTier>& tiers = plans_[algo->func];
  auto at = tiers.begin();
  while (at != tiers.end() && at->maxBytes - at->minBytes < maxBytes - minBytes) ++at;
  tiers.insert(at, {minBytes, maxBytes, algo});
  if (forcedPlan_[algo->func] == algo->name) forced_[algo->func] = algo;
  planned_ = true;
}

void Selector::setCallback(Callback callback) {
  callback_ = std::move(callback);
  planned_ = true;
}

const Algorithm& Selector::selectPlanned(loomFunc_t func, size_t bytes) const {
  if (!forcedPlan_[func].empty())
    LOOM_THROW(loomInvalidUsage, "LOOM_ALGO forces ", funcName(func), ":", forcedPlan_[func],
               " but no such plan is registered on this communicator (load it with "
               "LOOM_PLAN_DIR or loomCommRegisterPlan first)");
  if (callback_) {
    const std::string name = callback_(func, bytes);
    if (!name.empty()) {
      for (const PlanTier& t : plans_[func])
        if (name == t.algo->name) return *t.algo;
      if (const Algorithm* algo = find(func, name)) return *algo;
      LOOM_THROW(loomInvalidUsage, "the plan selector chose '", name, "' for ", funcName(func),
                 " of ", bytes, " bytes, which is not an algorithm of it here");
    }
  }
  for (const PlanTier& t : plans_[func])
    if (bytes >= t.minBytes && bytes <= t.maxBytes) return *t.algo;
  return builtIn(func, bytes);
}

const Algorithm* Selector::find(loomFunc_t func, const std::string& name) const {
  if (inputs_.native == nullptr) return findAlgorithm(func, name);
  for (const Algorithm& algo : *inputs_.native)
    if (algo.func == func && name == algo.name) return &algo;
  return nullptr;
}

const Algorithm* Selector::must(loomFunc_t func, const char* name) const {
  const Algorithm* algo = find(func, name);
  if (algo == nullptr)
    LOOM_THROW(loomInternalError, "no algorithm ", name, " for ", funcName(func));
  return algo;
}

std::string Selector::explain() const {
  std::ostringstream out;
  out << "algorithm table for " << inputs_.nranks << " ranks"
      << (inputs_.sharedMemory ? " on one node" : " on several nodes") << ", device "
      << inputs_.device << (inputs_.native != nullptr ? " (native)" : "") << ":";
  for (int f = 0; f < loomNumFuncs; ++f) {
    auto func = static_cast<loomFunc_t>(f);
    if (func == loomFuncSendRecv) continue;
    out << " " << funcName(func) << "=";
    if (forced_[f] != nullptr) {
      out << forced_[f]->name << "(forced)";
      continue;
    }
    if (!forcedPlan_[f].empty()) {
      out << forcedPlan_[f] << "(forced, not registered)";
      continue;
    }
    for (const PlanTier& t : plans_[f])
      out << t.algo->name << "[" << t.minBytes << "-" << t.maxBytes << "B] ";
    const std::vector<Tier>& tiers = tiers_[f];
    for (size_t i = 0; i < tiers.size(); ++i) {
      out << tiers[i].algo->name;
      if (i + 1 < tiers.size()) out << "<=" << tiers[i].maxBytes << "B<";
    }
  }
  return out.str();
}

}  // namespace loom
