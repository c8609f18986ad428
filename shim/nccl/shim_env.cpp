#include "shim_env.hpp"

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <sstream>

namespace loom::nccl_shim::env {
namespace {

std::string get(const char* name, const char* fallback) {
  const char* value = std::getenv(name);
  return value != nullptr && *value != '\0' ? std::string(value) : std::string(fallback);
}

std::string lower(std::string text) {
  std::transform(text.begin(), text.end(), text.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return text;
}

int debugRank() {
  const std::string level = lower(get("LOOM_DEBUG", "warn"));
  if (level == "none" || level == "version") return 0;
  if (level == "warn") return 1;
  return 2;  // info, abort, trace
}

}  // namespace

std::string device() { return lower(get("LOOM_NCCL_DEVICE", "cuda")); }
// The CI stand-in for the real NCCL (LOOM_NCCL_STANDIN, shim/nccl/CMakeLists.txt) is the shim
// built again: it must run everything itself, never fall back, and print no report of its own.
#if defined(LOOM_NCCL_STANDIN)
constexpr bool kStandIn = true;
#else
constexpr bool kStandIn = false;
#endif

std::string fallbackPath() { return kStandIn ? "off" : get("LOOM_NCCL_FALLBACK", ""); }

std::vector<std::string> forceFallback() {
  std::vector<std::string> ops;
  if (kStandIn) return ops;
  std::stringstream list(lower(get("LOOM_NCCL_FORCE_FALLBACK", "")));
  for (std::string op; std::getline(list, op, ',');) {
    op.erase(std::remove_if(op.begin(), op.end(), [](unsigned char c) { return std::isspace(c); }),
             op.end());
    if (!op.empty()) ops.push_back(op);
  }
  return ops;
}

bool report() { return !kStandIn && get("LOOM_NCCL_REPORT", "0") != "0"; }
int loomCheck() { return std::atoi(get("LOOM_CHECK", "0").c_str()); }
bool warnEnabled() { return debugRank() >= 1; }
bool infoEnabled() { return debugRank() >= 2; }

}  // namespace loom::nccl_shim::env
