#include "plan/selector.hpp"

#include <sstream>

#include "base/error.hpp"

namespace loom {

namespace {

std::string choicesFor(loomFunc_t func) {
  std::string out;
  for (const Algorithm& algo : allAlgorithms())
    if (algo.func == func) out += (out.empty() ? "" : ", ") + std::string(algo.name);
  return out;
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
    const Algorithm* algo = findAlgorithm(static_cast<loomFunc_t>(func), algoText);
    LOOM_CHECK_ARG(algo != nullptr, "LOOM_ALGO: ", funcText, " has no algorithm '", algoText,
                   "' (choices: ", choicesFor(static_cast<loomFunc_t>(func)), ")");
    LOOM_CHECK_ARG(!algo->needsArena || inputs_.sharedMemory, "LOOM_ALGO: ", funcText, ":",
                   algoText, " needs all ranks on one host");
    forced_[func] = algo;
  }
  for (int f = 0; f < loomNumFuncs; ++f) {
    auto func = static_cast<loomFunc_t>(f);
    if (func == loomFuncSendRecv) continue;
    bool ringOnly = !inputs_.sharedMemory;
    bool hasRing =
        func == loomFuncAllReduce || func == loomFuncAllGather || func == loomFuncReduceScatter;
    if (ringOnly) {
      small_[f] = large_[f] = hasRing ? must(func, "ring") : nullptr;
    } else {
      small_[f] = must(func, "direct");
      bool reduction = func == loomFuncAllReduce || func == loomFuncReduce;
      large_[f] = reduction ? must(func, "pipelined") : small_[f];
    }
  }
}

const Algorithm* Selector::must(loomFunc_t func, const char* name) {
  const Algorithm* algo = findAlgorithm(func, name);
  if (algo == nullptr)
    LOOM_THROW(loomInternalError, "no algorithm ", name, " for ", funcName(func));
  return algo;
}

const Algorithm& Selector::select(loomFunc_t func, size_t bytes) const {
  if (forced_[func] != nullptr) return *forced_[func];
  const Algorithm* algo = bytes <= inputs_.directMaxBytes ? small_[func] : large_[func];
  if (algo == nullptr)
    LOOM_THROW(loomInvalidUsage, funcName(func),
               " across hosts needs the network transport, which this build does not have yet");
  return *algo;
}

std::string Selector::explain() const {
  std::ostringstream out;
  out << "algorithm table for " << inputs_.nranks << " ranks"
      << (inputs_.sharedMemory ? " on one host" : " across hosts") << ":";
  for (int f = 0; f < loomNumFuncs; ++f) {
    auto func = static_cast<loomFunc_t>(f);
    if (func == loomFuncSendRecv) continue;
    out << " " << funcName(func) << "=";
    if (forced_[f] != nullptr) {
      out << forced_[f]->name << "(forced)";
    } else if (inputs_.sharedMemory && (func == loomFuncAllReduce || func == loomFuncReduce)) {
      out << "direct<=" << inputs_.directMaxBytes << "B<pipelined";
    } else {
      out << select(func, 0).name;
    }
  }
  return out.str();
}

}  // namespace loom
