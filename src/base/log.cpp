#include "base/log.hpp"

#include <sys/syscall.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <mutex>

#include "base/env.hpp"

namespace loom {

namespace {

struct LogConfig {
  LogLevel level = LogLevel::kWarn;
  unsigned subsys = kSubsysAll;
  std::string host;
};

LogLevel parseLevel(const std::string& text) {
  if (text == "NONE") return LogLevel::kNone;
  if (text == "INFO") return LogLevel::kInfo;
  if (text == "TRACE") return LogLevel::kTrace;
  return LogLevel::kWarn;
}

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
    c.level = parseLevel(env::debugLevel());
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
}

}  // namespace loom
