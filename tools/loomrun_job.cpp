#include "loomrun_job.hpp"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <string_view>

extern char** environ;

namespace loom::launcher {
namespace {

constexpr const char* kLoopback = "127.0.0.1";

// Names loomrun sets for every rank; inherited values are dropped so that a launcher started from
// inside another job (or torchrun) cannot leak its own rank numbers into ours.
constexpr const char* kOwnedNames[] = {
    "RANK",      "WORLD_SIZE",  "LOCAL_RANK",  "LOCAL_WORLD_SIZE", "GROUP_RANK",
    "NODE_RANK", "MASTER_ADDR", "MASTER_PORT", "LOOM_COMM_ID",     "LOOM_JOB_SECRET",
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
bool pickFreePorts(int count, std::vector<int>& ports, std::string& error) {
  std::vector<int> fds;
  bool ok = true;
  for (int i = 0; i < count && ok; ++i) {
    int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) {
      error = std::string("socket: ") + std::strerror(errno);
      ok = false;
      break;
    }
    fds.push_back(fd);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = 0;
    ::inet_pton(AF_INET, kLoopback, &addr.sin_addr);
    socklen_t len = sizeof(addr);
    if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 ||
        ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
      error = std::string("cannot find a free port on 127.0.0.1: ") + std::strerror(errno);
      ok = false;
      break;
    }
    ports.push_back(ntohs(addr.sin_port));
  }
  for (int fd : fds) ::close(fd);
  return ok;
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

bool prepareJob(const LaunchOptions& options, JobInfo& job, std::string& error) {
  std::vector<int> ports;
  if (!pickFreePorts(2, ports, error)) return false;
  job.masterPort = ports[0];
  job.commId = options.masterAddr + ":" + std::to_string(ports[1]);

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
  return env;
}

}  // namespace loom::launcher
