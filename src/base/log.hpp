// One line per event: "host:pid:tid [rank] LOOM LEVEL SUBSYS message". Controlled by
// LOOM_DEBUG with NCCL's levels, any case: NONE, VERSION (the version line only), WARN (default),
// INFO, ABORT (INFO, and abort() at the first warning), TRACE; and LOOM_DEBUG_SUBSYS=INIT,COLL,...
// (default all).
#pragma once

#include <string>

#include "base/error.hpp"

namespace loom {

enum class LogLevel { kNone = 0, kVersion = 1, kWarn = 2, kInfo = 3, kAbort = 4, kTrace = 5 };

// LOOM_DEBUG's level; throws loomInvalidArgument naming the levels for anything else.
LogLevel parseLogLevel(const std::string& text);

enum LogSubsys : unsigned {
  kSubsysInit = 1u << 0,
  kSubsysColl = 1u << 1,
  kSubsysNet = 1u << 2,
  kSubsysBootstrap = 1u << 3,
  kSubsysShm = 1u << 4,
  kSubsysTune = 1u << 5,
  kSubsysAll = ~0u
};

bool logEnabled(LogLevel level, unsigned subsys);
void logLine(LogLevel level, unsigned subsys, int rank, const std::string& message);

}  // namespace loom

// rank is the caller's rank in its communicator, or -1 when there is none yet.
#define LOOM_LOG(level, subsys, rank, ...)                       \
  do {                                                           \
    if (::loom::logEnabled(::loom::LogLevel::level, (subsys)))   \
      ::loom::logLine(::loom::LogLevel::level, (subsys), (rank), \
                      ::loom::detail::concat(__VA_ARGS__));      \
  } while (0)
#define LOOM_WARN(subsys, rank, ...) LOOM_LOG(kWarn, subsys, rank, __VA_ARGS__)
#define LOOM_INFO(subsys, rank, ...) LOOM_LOG(kInfo, subsys, rank, __VA_ARGS__)
#define LOOM_TRACE(subsys, rank, ...) LOOM_LOG(kTrace, subsys, rank, __VA_ARGS__)
