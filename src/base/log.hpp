// One line per event: "host:pid:tid [rank] LOOM LEVEL message". Controlled as NCCL's logging is:
// LOOM_DEBUG with NCCL's levels, any case: NONE, VERSION (the version line only), WARN (default),
// INFO, ABORT (INFO, and abort() at the first warning), TRACE; LOOM_DEBUG_SUBSYS, a comma list of
// subsystems (any case; ^ in front: all but those), by default every subsystem but COLL, whose
// lines come once per call (NCCL's INFO likewise logs init, and collectives only when asked); and
// LOOM_DEBUG_FILE, a file for the lines instead of stderr (%h: host, %p: pid, %%: %).
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
  kSubsysAll = ~0u,
  // Without LOOM_DEBUG_SUBSYS: what happens once per communicator, not once per call.
  kSubsysDefault = kSubsysAll & ~kSubsysColl,
};

// LOOM_DEBUG_SUBSYS's mask; "" is the default. Throws loomInvalidArgument naming the valid names
// for a name it does not know.
unsigned parseLogSubsys(const std::string& text);

// LOOM_DEBUG_FILE's pattern with NCCL_DEBUG_FILE's substitutions: %h the host, %p the pid, %% a
// percent sign; any other %x is kept as it is.
std::string expandLogFileName(const std::string& pattern, const std::string& host, int pid);

// Throws loomInvalidArgument for a malformed LOOM_DEBUG or LOOM_DEBUG_SUBSYS (communicator init
// calls it; the logging itself only warns and goes on with the defaults).
void checkLogSettings();

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
