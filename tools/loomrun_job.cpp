#include "loomrun_job.hpp"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <string_view>

extern char** environ;

namespace loom::launcher {
namespace {

// Names loomrun sets for every rank; inherited values are dropped so that a launcher started from
// inside another job (or torchrun) cannot leak its own rank numbers into ours.
constexpr const char* kOwnedNames[] = {
    "RANK",         "WORLD_SIZE",      "LOCAL_RANK",         "LOCAL_WORLD_SIZE",
    "GROUP_RANK",   "NODE_RANK",       "MASTER_ADDR",        "MASTER_PORT",
    "LOOM_COMM_ID", "LOOM_JOB_SECRET", "LOOMRUN_WORLD_SIZE",
};

bool isOwned(std::string_view entry) {
  size_t eq = entry.find('=');
  std::string_view name = entry.substr(0, eq);
  for (const char* owned : kOwnedNames) {
    if (name == owned) return true;
  }
  return false;
}

// Binds all sockets before closing any, so the ports are distinct from each other. Another
// process may still grab one before the ranks bind it; that window is inherent to handing ports
// over through the environment, as torchrun does too.
bool pickFreePorts(const std::string& host, int count, std::vector<int>& ports,
                   std::string& error) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  int rc = ::getaddrinfo(host.c_str(), "0", &hints, &found);
  if (rc != 0 || found == nullptr) {
    error = "cannot resolve '" + host + "': " + ::gai_strerror(rc);
    return false;
  }
  std::vector<int> fds;
  bool ok = true;
  for (int i = 0; i < count && ok; ++i) {
    int fd = ::socket(found->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) {
      error = std::string("socket: ") + std::strerror(errno);
      ok = false;
      break;
    }
    fds.push_back(fd);
    sockaddr_storage addr{};
    socklen_t len = sizeof(addr);
    if (::bind(fd, found->ai_addr, found->ai_addrlen) != 0 ||
        ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
      error = "cannot find a free port on " + host + ": " + std::strerror(errno);
      ok = false;
      break;
    }
    ports.push_back(addr.ss_family == AF_INET6
                        ? ntohs(reinterpret_cast<sockaddr_in6*>(&addr)->sin6_port)
                        : ntohs(reinterpret_cast<sockaddr_in*>(&addr)->sin_port));
  }
  ::freeaddrinfo(found);
  for (int fd : fds) ::close(fd);
  return ok;
}

bool isHexSecret(const std::string& text) {
  if (text.size() != 32) return false;
  for (char c : text) {
    if (!std::isxdigit(static_cast<unsigned char>(c))) return false;
  }
  return true;
}

bool randomHex(size_t bytes, std::string& hex, std::string& error) {
  std::string raw(bytes, '\0');
  size_t filled = 0;
  while (filled < bytes) {
    ssize_t n = ::getrandom(raw.data() + filled, bytes - filled, 0);
    if (n < 0) {
      if (errno == EINTR) continue;
      error = std::string("getrandom: ") + std::strerror(errno);
      return false;
    }
    filled += static_cast<size_t>(n);
  }
  static constexpr char kDigits[] = "0123456789abcdef";
  hex.clear();
  for (char c : raw) {
    auto byte = static_cast<unsigned char>(c);
    hex += kDigits[byte >> 4];
    hex += kDigits[byte & 0xf];
  }
  return true;
}

}  // namespace

bool pickJobPorts(const std::string& host, JobInfo& job, std::string& error) {
  std::vector<int> ports;
  if (!pickFreePorts(host, 2, ports, error)) return false;
  job.masterPort = ports[0];
  std::string shownHost = host.find(':') != std::string::npos ? "[" + host + "]" : host;
  job.commId = shownHost + ":" + std::to_string(ports[1]);
  return true;
}

bool sharedSecret(std::string& secret, std::string& error) {
  const char* inherited = std::getenv("LOOM_JOB_SECRET");
  if (inherited == nullptr || *inherited == '\0') {
    error =
        "a job on several nodes needs the same LOOM_JOB_SECRET (32 hex digits) on every node, "
        "e.g. export LOOM_JOB_SECRET=$(openssl rand -hex 16) before starting each loomrun";
    return false;
  }
  if (!isHexSecret(inherited)) {
    error = "LOOM_JOB_SECRET must be 32 hex digits (e.g. from 'openssl rand -hex 16')";
    return false;
  }
  secret = inherited;
  return true;
}

bool prepareJob(const LaunchOptions& options, JobInfo& job, std::string& error) {
  if (!pickJobPorts(options.masterAddr, job, error)) return false;

  // A secret set by the caller is kept so that ranks started by several loomruns (or by a test
  // harness) can join the same job.
  const char* inherited = std::getenv("LOOM_JOB_SECRET");
  if (inherited != nullptr && *inherited != '\0') {
    job.secret = inherited;
    return true;
  }
  return randomHex(16, job.secret, error);
}

std::vector<std::string> rankEnvironment(const LaunchOptions& options, const JobInfo& job,
                                         int localRank) {
  std::vector<std::string> env;
  for (char** entry = environ; *entry != nullptr; ++entry) {
    if (!isOwned(*entry)) env.emplace_back(*entry);
  }
  auto add = [&env](const char* name, const std::string& value) {
    env.push_back(std::string(name) + "=" + value);
  };
  add("RANK", std::to_string(options.globalRank(localRank)));
  add("WORLD_SIZE", std::to_string(options.worldSize()));
  add("LOCAL_RANK", std::to_string(localRank));
  add("LOCAL_WORLD_SIZE", std::to_string(options.nprocPerNode));
  add("GROUP_RANK", std::to_string(options.nodeRank));
  add("NODE_RANK", std::to_string(options.nodeRank));
  add("MASTER_ADDR", options.masterAddr);
  add("MASTER_PORT", std::to_string(job.masterPort));
  add("LOOM_COMM_ID", job.commId);
  add("LOOM_JOB_SECRET", job.secret);
  // The ranks loomrun runs in all: loomCommInitFromEnv fails at once when the job asks for
  // another world size (LOOM_WORLD_SIZE set by hand), instead of waiting for ranks that never come.
  add("LOOMRUN_WORLD_SIZE", std::to_string(options.worldSize()));
  return env;
}

}  // namespace loom::launcher
