#include "device/cuda/cuda_env.hpp"

#include <string>
#include <utility>

#include "base/env.hpp"

namespace loom::env {

// Checked where read (base/env.hpp): a bad value fails the CUDA communicator's init, naming it.
int64_t cudaSlotBytes() {
  return getIntIn("LOOM_CUDA_SLOT_BYTES", 256 * 1024, 4096, int64_t{1} << 30, 16);
}
std::string cudaTransport() {
  return getWord("LOOM_CUDA_TRANSPORT", "auto", {"auto", "p2p", "host"});
}
int64_t cudaMaxBlocks() { return getIntIn("LOOM_CUDA_MAX_BLOCKS", 64, 1, 64); }
int64_t cudaLLMaxBytes() { return getIntIn("LOOM_CUDA_LL_MAX_BYTES", -1, -1, INT64_MAX); }
bool cudaWindows() { return getFlag("LOOM_CUDA_WINDOWS", true); }
int64_t cudaWindowMinBytes() { return getIntIn("LOOM_CUDA_WINDOW_MIN_BYTES", 0, 0, INT64_MAX); }
int64_t cudaCopyEngineMinBytes() { return getIntIn("LOOM_CUDA_CE_MIN_BYTES", -1, -1, INT64_MAX); }
int64_t cudaOneShotMaxBytes() {
  return getIntIn("LOOM_CUDA_ONESHOT_MAX_BYTES", 256 * 1024, -1, INT64_MAX);
}
int64_t cudaPlanLLMaxBytes() {
  return getIntIn("LOOM_CUDA_PLAN_LL_MAX_BYTES", 256 * 1024, 0, INT64_MAX);
}
int64_t cudaPlanPartGroups() { return getIntIn("LOOM_CUDA_PLAN_PART_GROUPS", 0, 0, 64); }
int64_t cudaPlanSliceBytes() {
  return getIntIn("LOOM_CUDA_PLAN_SLICE_BYTES", 64 * 1024, 16, int64_t{1} << 30, 16);
}

std::string cudaSharedSettings() {
  const std::pair<const char*, std::string> settings[] = {
      {"LOOM_CUDA_TRANSPORT", cudaTransport()},
      {"LOOM_CUDA_SLOT_BYTES", std::to_string(cudaSlotBytes())},
      {"LOOM_CUDA_MAX_BLOCKS", std::to_string(cudaMaxBlocks())},
      {"LOOM_CUDA_LL_MAX_BYTES", std::to_string(cudaLLMaxBytes())},
      {"LOOM_CUDA_WINDOWS", cudaWindows() ? "1" : "0"},
      {"LOOM_CUDA_WINDOW_MIN_BYTES", std::to_string(cudaWindowMinBytes())},
      {"LOOM_CUDA_CE_MIN_BYTES", std::to_string(cudaCopyEngineMinBytes())},
      {"LOOM_CUDA_ONESHOT_MAX_BYTES", std::to_string(cudaOneShotMaxBytes())},
      {"LOOM_CUDA_PLAN_LL_MAX_BYTES", std::to_string(cudaPlanLLMaxBytes())},
      {"LOOM_CUDA_PLAN_SLICE_BYTES", std::to_string(cudaPlanSliceBytes())},
      {"LOOM_CUDA_PLAN_PART_GROUPS", std::to_string(cudaPlanPartGroups())}};
  std::string line;
  for (const auto& [name, value] : settings) {
    if (!line.empty()) line += ',';
    line.append(name).append("=").append(value);
  }
  return line;
}

}  // namespace loom::env
