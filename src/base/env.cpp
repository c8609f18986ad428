#include "base/env.hpp"

#include <cstdlib>

#include "base/error.hpp"

namespace loom::env {

std::optional<std::string> get(const char* name) {
  const char* value = std::getenv(name);
  if (value == nullptr || value[0] == '\0') return std::nullopt;
  return std::string(value);
}

int64_t getInt(const char* name, int64_t fallback) {
  auto value = get(name);
  if (!value) return fallback;
  char* end = nullptr;
  long long parsed = std::strtoll(value->c_str(), &end, 0);
  if (end == value->c_str() || *end != '\0')
    LOOM_THROW(loomInvalidArgument, name, "='", *value, "' is not an integer");
  return parsed;
}

static std::string getString(const char* name, const char* fallback) {
  auto value = get(name);
  return value ? *value : std::string(fallback);
}

std::string debugLevel() { return getString("LOOM_DEBUG", "WARN"); }
std::string debugSubsys() { return getString("LOOM_DEBUG_SUBSYS", "ALL"); }

int64_t timeoutMs() {
  // Seconds in the variable, like NCCL's and Gloo's timeouts; fractions allowed ("0.5").
  auto value = get("LOOM_TIMEOUT");
  if (!value) return 600 * 1000;
  char* end = nullptr;
  double seconds = std::strtod(value->c_str(), &end);
  if (end == value->c_str() || *end != '\0' || seconds <= 0)
    LOOM_THROW(loomInvalidArgument, "LOOM_TIMEOUT='", *value,
               "' is not a positive number of seconds");
  return static_cast<int64_t>(seconds * 1000.0 + 0.5);
}

std::string algoOverride() { return getString("LOOM_ALGO", ""); }
int64_t checkMode() {
  int64_t mode = getInt("LOOM_CHECK", 1);
  if (mode < 0 || mode > 2)
    LOOM_THROW(loomInvalidArgument, "LOOM_CHECK=", mode, " is not 0 (off), 1 or 2");
  return mode;
}
int64_t shmChunkBytes() { return getInt("LOOM_SHM_CHUNK_BYTES", 512 * 1024); }
int64_t directMaxBytes() { return getInt("LOOM_DIRECT_MAX_BYTES", -1); }
int64_t p2pBufferBytes() { return getInt("LOOM_P2P_BUFFER_BYTES", 256 * 1024); }
int64_t streamingMinBytes() { return getInt("LOOM_STREAMING_MIN_BYTES", 8 << 20); }
std::string accumType() { return getString("LOOM_ACCUM_TYPE", ""); }
std::string jobSecret() { return getString("LOOM_JOB_SECRET", ""); }
std::string commId() { return getString("LOOM_COMM_ID", ""); }
std::string socketIfname() { return getString("LOOM_SOCKET_IFNAME", ""); }
int64_t socketStreams() { return getInt("LOOM_SOCKET_STREAMS", 2); }
std::string nodeId() { return getString("LOOM_NODE_ID", ""); }
std::string device() { return getString("LOOM_DEVICE", "cpu"); }
std::string clusterSplit() { return getString("LOOM_CLUSTER_SPLIT", ""); }
int64_t heteroChunkBytes() { return getInt("LOOM_HETERO_CHUNK_BYTES", 0); }
std::string heteroAlgo() { return getString("LOOM_HETERO_ALGO", "auto"); }
bool deviceBlocking() { return getInt("LOOM_DEVICE_BLOCKING", 0) != 0; }
std::string devicePlugins() { return getString("LOOM_DEVICE_PLUGIN", ""); }
std::string transport() { return getString("LOOM_TRANSPORT", "tcp"); }
int64_t rudpPaths() { return getInt("LOOM_RUDP_PATHS", 2); }
int64_t rudpWindowBytes() { return getInt("LOOM_RUDP_WINDOW_BYTES", 4 << 20); }
int64_t rudpRetries() { return getInt("LOOM_RUDP_RETRIES", 15); }
int64_t rudpRtoMaxMs() { return getInt("LOOM_RUDP_RTO_MAX_MS", 1000); }
bool rudpGso() { return getInt("LOOM_RUDP_GSO", 1) != 0; }
std::string rudpFollowCaller() { return getString("LOOM_RUDP_FOLLOW_CALLER", "auto"); }
bool rudpCallerReceives() { return getInt("LOOM_RUDP_CALLER_RECEIVES", 1) != 0; }
std::string flightDir() { return getString("LOOM_FLIGHT_DIR", ""); }
int64_t flightEntries() {
  const int64_t entries = getInt("LOOM_FLIGHT_ENTRIES", 1024);
  if (entries < 1 || entries > (int64_t{1} << 24))
    LOOM_THROW(loomInvalidArgument, "LOOM_FLIGHT_ENTRIES=", entries,
               " is out of range (1 to 2^24)");
  return entries;
}
std::string traceDir() { return getString("LOOM_TRACE", ""); }
int64_t traceWaitUs() {
  const int64_t us = getInt("LOOM_TRACE_WAIT_US", 100);
  if (us < 0) LOOM_THROW(loomInvalidArgument, "LOOM_TRACE_WAIT_US=", us, " is negative");
  return us;
}
bool statusEnabled() { return getInt("LOOM_STATUS", 1) != 0; }
std::string statusDir() { return getString("LOOM_STATUS_DIR", ""); }
std::string rudpFaults() { return getString("LOOM_RUDP_FAULTS", ""); }

}  // namespace loom::env
