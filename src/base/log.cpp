#include "base/log.hpp"

#include <fcntl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstdlib>

#include "base/env.hpp"

namespace loom {

namespace {

std::string upper(std::string text) {
  for (char& c : text) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return text;
}

std::string trimmed(const std::string& text) {
  const size_t first = text.find_first_not_of(" \t");
  if (first == std::string::npos) return "";
  return text.substr(first, text.find_last_not_of(" \t") - first + 1);
}

struct SubsysName {
  const char* name;
  unsigned bit;
};
// TUNING is NCCL's spelling of TUNE, accepted so that a copied NCCL_DEBUG_SUBSYS value works.
constexpr SubsysName kSubsysNames[] = {{"INIT", kSubsysInit},   {"COLL", kSubsysColl},
                                       {"NET", kSubsysNet},     {"BOOTSTRAP", kSubsysBootstrap},
                                       {"SHM", kSubsysShm},     {"TUNE", kSubsysTune},
                                       {"TUNING", kSubsysTune}, {"ALL", kSubsysAll}};

}  // namespace

LogLevel parseLogLevel(const std::string& text) {
  static const struct {
    const char* name;
    LogLevel level;
  } levels[] = {{"NONE", LogLevel::kNone},   {"VERSION", LogLevel::kVersion},
                {"WARN", LogLevel::kWarn},   {"INFO", LogLevel::kInfo},
                {"ABORT", LogLevel::kAbort}, {"TRACE", LogLevel::kTrace}};
  const std::string name = upper(text);
  for (const auto& l : levels)
    if (name == l.name) return l.level;
  LOOM_THROW(loomInvalidArgument, "LOOM_DEBUG='", text,
             "' is not a level: use NONE, VERSION, WARN, INFO, ABORT or TRACE (any case)");
}

unsigned parseLogSubsys(const std::string& text) {
  if (trimmed(text).empty()) return kSubsysDefault;
  // NCCL's syntax: "^A,B" is every subsystem but A and B.
  const bool invert = trimmed(text)[0] == '^';
  const std::string list = invert ? trimmed(text).substr(1) : text;
  unsigned mask = 0;
  size_t start = 0;
  while (start <= list.size()) {
    size_t end = list.find(',', start);
    if (end == std::string::npos) end = list.size();
    const std::string word = upper(trimmed(list.substr(start, end - start)));
    start = end + 1;
    if (word.empty()) continue;
    unsigned bit = 0;
    for (const SubsysName& n : kSubsysNames)
      if (word == n.name) bit = n.bit;
    LOOM_CHECK_ARG(bit != 0, "LOOM_DEBUG_SUBSYS='", text, "': '", word,
                   "' is not a subsystem: use a comma list of INIT, COLL, NET, BOOTSTRAP, SHM, "
                   "TUNE or ALL (any case; ^ in front for all but those)");
    mask |= bit;
  }
  return invert ? kSubsysAll & ~mask : mask;
}

std::string expandLogFileName(const std::string& pattern, const std::string& host, int pid) {
  std::string out;
  for (size_t i = 0; i < pattern.size(); ++i) {
    if (pattern[i] != '%' || i + 1 == pattern.size()) {
      out += pattern[i];
      continue;
    }
    const char code = pattern[++i];
    if (code == 'h') {
      out += host;
    } else if (code == 'p') {
      out += std::to_string(pid);
    } else if (code == '%') {
      out += '%';
    } else {
      out += '%';
      out += code;
    }
  }
  return out;
}

void checkLogSettings() {
  parseLogLevel(env::debugLevel());
  parseLogSubsys(env::debugSubsys());
}

namespace {

struct LogConfig {
  LogLevel level = LogLevel::kWarn;
  unsigned subsys = kSubsysDefault;
  std::string host;
  // stderr, or LOOM_DEBUG_FILE's file. Deliberately never closed: any thread may log until the
  // process exits (as with stderr), later than any destructor could know.
  int fd = STDERR_FILENO;
};

void writeLine(int fd, const std::string& line) {
  // One write per line so that lines of concurrent ranks and threads do not interleave.
  const char* p = line.data();
  size_t left = line.size();
  while (left > 0) {
    const ssize_t n = ::write(fd, p, left);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;
    p += n;
    left -= static_cast<size_t>(n);
  }
}

// Logging goes on with the defaults where a setting is malformed; communicator init then fails
// with the same message (checkLogSettings).
void warnEarly(const std::string& why) { writeLine(STDERR_FILENO, "LOOM WARN " + why + "\n"); }

int openLogFile(const LogConfig& c) {
  const std::string pattern = env::debugFile();
  if (pattern.empty() || c.level <= LogLevel::kVersion) return STDERR_FILENO;
  const std::string path = expandLogFileName(pattern, c.host, static_cast<int>(getpid()));
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) {
    warnEarly("LOOM_DEBUG_FILE='" + pattern + "': cannot open " + path + ": " +
              detail::errnoText(errno) + "; logging to stderr");
    return STDERR_FILENO;
  }
  return fd;
}

// Read once: the environment of a process does not change under a running communicator.
const LogConfig& config() {
  static const LogConfig cfg = [] {
    LogConfig c;
    try {
      c.level = parseLogLevel(env::debugLevel());
    } catch (const Error& e) {
      warnEarly(e.what());
    }
    try {
      c.subsys = parseLogSubsys(env::debugSubsys());
    } catch (const Error& e) {
      warnEarly(e.what());
    }
    char host[256] = {0};
    gethostname(host, sizeof(host) - 1);
    c.host = host;
    c.fd = openLogFile(c);
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
  // Warnings are never filtered by subsystem (NCCL's WARN lines are not either).
  if (level == LogLevel::kWarn) return level <= c.level;
  return level <= c.level && (subsys & c.subsys) != 0;
}

void logLine(LogLevel level, unsigned subsys, int rank, const std::string& message) {
  (void)subsys;
  const LogConfig& c = config();
  char prefix[320];
  snprintf(prefix, sizeof(prefix), "%s:%d:%ld [%d] LOOM %s ", c.host.c_str(), getpid(),
           static_cast<long>(syscall(SYS_gettid)), rank, levelName(level));
  writeLine(c.fd, prefix + message + "\n");
  // NCCL_DEBUG=ABORT's meaning: stop at the first warning, with a core to look at.
  if (level == LogLevel::kWarn && c.level == LogLevel::kAbort) abort();
}

}  // namespace loom
