#include "base/env.hpp"

#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <sstream>

#include "base/dtype.hpp"
#include "base/error.hpp"

namespace loom::env {

namespace {

constexpr int64_t kKiB = 1024, kMiB = 1024 * kKiB, kGiB = 1024 * kMiB;
constexpr int64_t kInt64Max = INT64_MAX;

std::string getString(const char* name, const char* fallback) {
  auto value = get(name);
  return value ? *value : std::string(fallback);
}

// "from 4096 to 1 GiB", "2 or more": the range as the messages and docs say it.
std::string describeRange(int64_t min, int64_t max, int64_t multiple) {
  auto bytesText = [](int64_t v) {
    if (v >= kGiB && v % kGiB == 0) return std::to_string(v / kGiB) + " GiB";
    if (v >= kMiB && v % kMiB == 0) return std::to_string(v / kMiB) + " MiB";
    if (v >= 64 * kKiB && v % kKiB == 0) return std::to_string(v / kKiB) + " KiB";
    return std::to_string(v);
  };
  std::string text = max == kInt64Max ? std::to_string(min) + " or more"
                                      : "from " + bytesText(min) + " to " + bytesText(max);
  if (multiple > 1) text = "a multiple of " + std::to_string(multiple) + " " + text;
  return text;
}

}  // namespace

std::optional<std::string> get(const char* name) {
  const char* value = std::getenv(name);
  if (value == nullptr || value[0] == '\0') return std::nullopt;
  return std::string(value);
}

int64_t getInt(const char* name, int64_t fallback) {
  auto value = get(name);
  if (!value) return fallback;
  char* end = nullptr;
  errno = 0;
  long long parsed = std::strtoll(value->c_str(), &end, 0);
  if (end == value->c_str() || *end != '\0')
    LOOM_THROW(loomInvalidArgument, name, "='", *value, "' is not an integer");
  if (errno == ERANGE)
    LOOM_THROW(loomInvalidArgument, name, "='", *value, "' is too large for a 64-bit integer");
  return parsed;
}

int64_t getIntIn(const char* name, int64_t fallback, int64_t min, int64_t max, int64_t multiple) {
  const int64_t value = getInt(name, fallback);
  if (value < min || value > max || (multiple > 1 && value % multiple != 0))
    LOOM_THROW(loomInvalidArgument, name, "=", *get(name), " is out of range: use ",
               describeRange(min, max, multiple));
  return value;
}

bool getFlag(const char* name, bool fallback) {
  auto value = get(name);
  if (!value) return fallback;
  if (*value == "0" || *value == "1") return *value == "1";
  LOOM_THROW(loomInvalidArgument, name, "='", *value, "' is not 0 or 1");
}

std::string getWord(const char* name, const char* fallback,
                    std::initializer_list<const char*> words) {
  const std::string value = getString(name, fallback);
  std::string choices;
  for (const char* w : words) {
    if (value == w) return value;
    choices += std::string(choices.empty() ? "" : ", ") + w;
  }
  LOOM_THROW(loomInvalidArgument, name, "='", value, "' is not one of ", choices);
}

std::string debugLevel() { return getString("LOOM_DEBUG", "WARN"); }
std::string debugSubsys() { return getString("LOOM_DEBUG_SUBSYS", ""); }
std::string debugFile() { return getString("LOOM_DEBUG_FILE", ""); }

int64_t timeoutMs() {
  // Seconds in the variable, like NCCL's and Gloo's timeouts; fractions allowed ("0.5"). Below a
  // millisecond it would round to no time at all; past 10^9 s (30 years) the deadline arithmetic
  // would overflow.
  auto value = get("LOOM_TIMEOUT");
  if (!value) return 600 * 1000;
  char* end = nullptr;
  double seconds = std::strtod(value->c_str(), &end);
  if (end == value->c_str() || *end != '\0' || !std::isfinite(seconds) || seconds < 0.001 ||
      seconds > 1e9)
    LOOM_THROW(loomInvalidArgument, "LOOM_TIMEOUT='", *value,
               "' is not a number of seconds from 0.001 to 1e9");
  return static_cast<int64_t>(seconds * 1000.0 + 0.5);
}

std::string algoOverride() { return getString("LOOM_ALGO", ""); }
std::string planDir() { return getString("LOOM_PLAN_DIR", ""); }
int64_t checkMode() { return getIntIn("LOOM_CHECK", 1, 0, 2); }
// A slot is whole pages of the shared arena, several per rank: 1 GiB is already 4 GiB a rank.
int64_t shmChunkBytes() { return getIntIn("LOOM_SHM_CHUNK_BYTES", 512 * kKiB, 4096, kGiB, 4096); }
// -1: the measured table by rank count.
int64_t directMaxBytes() { return getIntIn("LOOM_DIRECT_MAX_BYTES", -1, -1, kInt64Max); }
int64_t p2pBufferBytes() { return getIntIn("LOOM_P2P_BUFFER_BYTES", 256 * kKiB, 4096, kGiB, 4096); }
int64_t streamingMinBytes() { return getIntIn("LOOM_STREAMING_MIN_BYTES", 8 * kMiB, 0, kInt64Max); }
std::string accumType() {
  std::string name = getString("LOOM_ACCUM_TYPE", "");
  LOOM_CHECK_ARG(name.empty() || dtypeFromName(name).has_value(), "LOOM_ACCUM_TYPE='", name,
                 "' is not a data type name (float, half, double, bfloat16, ...)");
  return name;
}
// 0: sized from the creation sizes (src/ep/expert_parallel.cpp).
int64_t epBufferBytes() { return getIntIn("LOOM_EP_BUFFER_BYTES", 0, 0, 16 * kGiB); }
std::string jobSecret() { return getString("LOOM_JOB_SECRET", ""); }
std::string commId() { return getString("LOOM_COMM_ID", ""); }
std::string socketIfname() { return getString("LOOM_SOCKET_IFNAME", ""); }
int64_t socketStreams() { return getIntIn("LOOM_SOCKET_STREAMS", 2, 1, 64); }
std::string nodeId() { return getString("LOOM_NODE_ID", ""); }
std::string device() { return getString("LOOM_DEVICE", "cpu"); }
std::string clusterSplit() { return getString("LOOM_CLUSTER_SPLIT", ""); }
// 0: by the call's size (1/8 of it, 1 to 4 MiB).
int64_t heteroChunkBytes() { return getIntIn("LOOM_HETERO_CHUNK_BYTES", 0, 0, kGiB); }
std::string besideWait() {
  return getWord("LOOM_BESIDE_WAIT", "auto", {"block", "spin", "thread", "auto"});
}

std::string heteroAlgo() {
  return getWord("LOOM_HETERO_ALGO", "auto", {"auto", "flat", "composed"});
}
bool deviceBlocking() { return getFlag("LOOM_DEVICE_BLOCKING", false); }
std::string devicePlugins() { return getString("LOOM_DEVICE_PLUGIN", ""); }
std::string transport() { return getWord("LOOM_TRANSPORT", "tcp", {"tcp", "rudp"}); }
int64_t rudpPaths() { return getIntIn("LOOM_RUDP_PATHS", 2, 1, 16); }
int64_t rudpWindowBytes() {
  return getIntIn("LOOM_RUDP_WINDOW_BYTES", 4 * kMiB, 64 * kKiB, 4 * kGiB, 8);
}
int64_t rudpRetries() { return getIntIn("LOOM_RUDP_RETRIES", 15, 1, 1000); }
int64_t rudpRtoMaxMs() { return getIntIn("LOOM_RUDP_RTO_MAX_MS", 1000, 10, 60000); }
bool rudpGso() { return getFlag("LOOM_RUDP_GSO", true); }
std::string rudpFollowCaller() {
  return getWord("LOOM_RUDP_FOLLOW_CALLER", "auto", {"auto", "1", "0"});
}
bool rudpCallerReceives() { return getFlag("LOOM_RUDP_CALLER_RECEIVES", true); }

std::string flightDir() { return getString("LOOM_FLIGHT_DIR", ""); }
int64_t flightEntries() { return getIntIn("LOOM_FLIGHT_ENTRIES", 1024, 1, int64_t{1} << 24); }
std::string traceDir() { return getString("LOOM_TRACE", ""); }
int64_t traceWaitUs() { return getIntIn("LOOM_TRACE_WAIT_US", 100, 0, kInt64Max); }
bool statusEnabled() { return getFlag("LOOM_STATUS", true); }
std::string statusDir() { return getString("LOOM_STATUS_DIR", ""); }

std::string rudpFaults() {
  const std::string value = getString("LOOM_RUDP_FAULTS", "");
  std::istringstream in(value);
  for (std::string item; std::getline(in, item, ',');) {
    const size_t eq = item.find('=');
    const std::string key = item.substr(0, eq);
    const std::string number = eq == std::string::npos ? "" : item.substr(eq + 1);
    char* end = nullptr;
    const double p = std::strtod(number.c_str(), &end);
    LOOM_CHECK_ARG((key == "drop" || key == "dup" || key == "delay") && !number.empty() &&
                       *end == '\0' && p >= 0 && p <= 1,
                   "LOOM_RUDP_FAULTS='", value, "': '", item,
                   "' is not drop=P, dup=P or delay=P with P from 0 to 1");
  }
  return value;
}

void checkAll() {
  timeoutMs();
  checkMode();
  shmChunkBytes();
  directMaxBytes();
  p2pBufferBytes();
  streamingMinBytes();
  epBufferBytes();
  accumType();
  socketStreams();
  heteroChunkBytes();
  heteroAlgo();
  besideWait();
  deviceBlocking();
  transport();
  rudpPaths();
  rudpWindowBytes();
  rudpRetries();
  rudpRtoMaxMs();
  rudpGso();
  rudpFollowCaller();
  rudpCallerReceives();
  rudpFaults();
  flightEntries();
  traceWaitUs();
  statusEnabled();
}

std::string settingsDifference(const std::string& mine, int myRank, const std::string& theirs,
                               int theirRank, char separator) {
  std::istringstream a(mine), b(theirs);
  std::string x, y;
  for (;;) {
    const bool moreMine = static_cast<bool>(std::getline(a, x, separator));
    const bool moreTheirs = static_cast<bool>(std::getline(b, y, separator));
    if (!moreMine && !moreTheirs) return "the same items";  // only when the lines are equal
    if (!moreMine) x = "nothing";
    if (!moreTheirs) y = "nothing";
    if (x != y)
      return x + " on rank " + std::to_string(myRank) + ", " + y + " on rank " +
             std::to_string(theirRank);
  }
}

}  // namespace loom::env
