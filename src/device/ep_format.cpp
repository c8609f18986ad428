#include "device/ep_format.hpp"

namespace loom::ep {

const char* callKindName(CallKind kind) {
  switch (kind) {
    case CallKind::kNone:
      return "nothing";
    case CallKind::kDispatchCounts:
      return "dispatch counts";
    case CallKind::kDispatch:
      return "dispatch";
    case CallKind::kCombine:
      return "combine";
    case CallKind::kLowLatencyDispatch:
      return "low-latency dispatch";
    case CallKind::kLowLatencyCombine:
      return "low-latency combine";
  }
  return "?";
}

}  // namespace loom::ep
