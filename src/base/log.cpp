#include "base/log.hpp"

#include <sys/syscall.h>
#include <unistd.h>

#include <cctype>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <mutex>

#include "base/env.hpp"

namespace loom {

LogLevel parseLogLevel(const std::string& text) {
  std::string upper = text;
  for (char& c : upper) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  static const struct {
    const char* name;
    LogLevel level;
  } levels[] = {{"NONE", LogLevel::kNone},   {"VERSION", LogLevel::kVersion},
                {"WARN", LogLevel::kWarn},   {"INFO", LogLevel::kInfo},
                {"ABORT", LogLevel::kAbort}, {"TRACE", LogLevel::kTrace}};
  for (const auto& l : levels)
    if (upper == l.name) return l.level;
  LOOM_THROW(loomInvalidArgument, "LOOM_DEBUG='", text,
             "' is not a level: use NONE, VERSION, WARN, INFO, ABORT or TRACE (any case)");
}

namespace {

struct LogConfig {
  LogLevel level = LogLevel::kWarn;
  unsigned subsys = kSubsysAll;
  std::string host;
};

unsigned parseSubsys(const std::string& text) {
  if (text.empty() || text == "ALL") return kSubsysAll;
  struct Name {
    const char* name;
    unsigned bit;
  };
  static const Name names[] = {{"INIT", kSubsysInit}, {"COLL", kSubsysColl},
                               {"NET", kSubsysNet},   {"BOOTSTRAP", kSubsysBootstrap},
                               {"SHM", kSubsysShm},   {"TUNE", kSubsysTune}};
  unsigned mask = 0;
  size_t start = 0;
  while (start <= text.size()) {
    size_t end = text.find(',', start);
    if (end == std::string::npos) end = text.size();
    std::string word = text.substr(start, end - start);
    for (const Name& n : names)
      if (word == n.name) mask |= n.bit;
    start = end + 1;
  }
  return mask == 0 ? kSubsysAll : mask;
}

// Read once: the environment of a process does not change under a running communicator.
const LogConfig& config() {
  static const LogConfig cfg = [] {
    LogConfig c;
    try {
      c.level = parseLogLevel(env::debugLevel());
    } catch (const Error& e) {
      // Logging goes on at the default; communicator init fails with this message (api layer).
      std::string line = std::string("LOOM WARN ") + e.what() + "\n";
      fwrite(line.data(), 1, line.size(), stderr);
    }
    c.subsys = parseSubsys(env::debugSubsys());
    char host[256] = {0};
    gethostname(host, sizeof(host) - 1);
    c.host = host;
    return c;
  }();
  return cfg;
}

const char* levelName(LogLevel level) {
  switch (level) {
    case LogLevel::kVersion:
      return "VERSION";
    case LogLevel::kWarn:
      return "WARN";
    case LogLevel::kInfo:
      return "INFO";
    case LogLevel::kTrace:
      return "TRACE";
    default:
      return "";
  }
}

}  // namespace

bool logEnabled(LogLevel level, unsigned subsys) {
  const LogConfig& c = config();
  // The version line shows at VERSION and from INFO up, not at the default WARN.
  if (level == LogLevel::kVersion)
    return c.level == LogLevel::kVersion || c.level >= LogLevel::kInfo;
  return level <= c.level && (subsys & c.subsys) != 0;
}

void logLine(LogLevel level, unsigned subsys, int rank, const std::string& message) {
  (void)subsys;
  const LogConfig& c = config();
  char prefix[320];
  snprintf(prefix, sizeof(prefix), "%s:%d:%ld [%d] LOOM %s ", c.host.c_str(), getpid(),
           static_cast<long>(syscall(SYS_gettid)), rank, levelName(level));
  std::string line = prefix + message + "\n";
  // One write per line so that lines of concurrent ranks and threads do not interleave.
  fwrite(line.data(), 1, line.size(), stderr);
  fflush(stderr);
  // NCCL_DEBUG=ABORT's meaning: stop at the first warning, with a core to look at.
  if (level == LogLevel::kWarn && c.level == LogLevel::kAbort) abort();
}

}  // namespace loom
