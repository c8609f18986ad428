// The harness of the multi-process fault tests (faults_test.cpp, hangs_test.cpp): a job whose
// ranks (fault_rank) the test starts itself, with fork and exec (loomrun would kill the survivors
// when one rank dies), reads what each prints and how it exits, and kills whatever still runs at
// the end, so a hang fails the test within its bound instead of stalling CI.
#pragma once

#include <fcntl.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <map>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "loom/loom.h"

extern char** environ;

namespace loom::test {

using Clock = std::chrono::steady_clock;

inline double secondsSince(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

inline uint16_t freePort() {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(addr);
  if (bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 ||
      getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0)
    ADD_FAILURE() << "no free port: " << strerror(errno);
  close(fd);
  return ntohs(addr.sin_port);
}

inline std::string randomHex(size_t chars) {
  std::random_device device;
  std::string out;
  for (size_t i = 0; i < chars; ++i) out += "0123456789abcdef"[device() % 16];
  return out;
}

// The "result ..." line of a rank: its fields, with msg last (it may hold spaces).
struct Result {
  bool present = false;
  int code = -1;
  long long elapsedMs = -1;
  long iters = -1;
  std::string msg;
};

inline Result parseResult(const std::string& out) {
  Result r;
  size_t at = out.find("result rank=");
  if (at == std::string::npos) return r;
  std::string line = out.substr(at, out.find('\n', at) - at);
  auto field = [&](const char* key) -> std::string {
    size_t k = line.find(std::string(" ") + key + "=");
    if (k == std::string::npos) return "";
    k += strlen(key) + 2;
    return std::string(key) == "msg" ? line.substr(k) : line.substr(k, line.find(' ', k) - k);
  };
  r.present = true;
  r.code = std::atoi(field("code").c_str());
  r.elapsedMs = std::atoll(field("elapsed_ms").c_str());
  r.iters = std::atol(field("iters").c_str());
  r.msg = field("msg");
  return r;
}

struct Rank {
  pid_t pid = -1;
  int outFd = -1, errFd = -1;
  std::string out, err;
  bool exited = false;
  int status = 0;
  Clock::time_point exitedAt;
  Result result() const { return parseResult(out); }
  bool exitedCleanly() const { return exited && WIFEXITED(status) && WEXITSTATUS(status) == 0; }
  bool killedBy(int signal) const {
    return exited && WIFSIGNALED(status) && WTERMSIG(status) == signal;
  }
};

// One job: world size, rendezvous address and secret shared by its ranks, started one by one.
class Job {
 public:
  Job(int worldSize, const char* timeoutSeconds)
      : size_(worldSize), ranks_(worldSize), port_(freePort()), secret_(randomHex(32)) {
    env_ = {{"LOOM_WORLD_SIZE", std::to_string(worldSize)},
            {"LOOM_COMM_ID", "127.0.0.1:" + std::to_string(port_)},
            {"LOOM_JOB_SECRET", secret_},
            {"LOOM_TIMEOUT", timeoutSeconds}};
  }
  ~Job() { killAll(); }
  void setEnv(const std::string& name, const std::string& value) { env_[name] = value; }
  uint16_t port() const { return port_; }
  const std::string& secret() const { return secret_; }
  Rank& operator[](int rank) { return ranks_[rank]; }

  void start(int rank, const std::vector<std::string>& args) {
    // Everything the child needs is built before fork: after it only exec may run.
    std::vector<std::string> envText;
    for (char** e = environ; *e != nullptr; ++e) {
      std::string entry = *e;
      std::string name = entry.substr(0, entry.find('='));
      if (name.rfind("LOOM_", 0) == 0 || name == "RANK" || name == "WORLD_SIZE" ||
          name == "MASTER_ADDR" || name == "MASTER_PORT")
        continue;
      envText.push_back(entry);
    }
    for (const auto& [name, value] : env_) envText.push_back(name + "=" + value);
    envText.push_back("LOOM_RANK=" + std::to_string(rank));
    std::vector<std::string> argText{FAULT_RANK_PATH};
    argText.insert(argText.end(), args.begin(), args.end());
    std::vector<char*> argv, envp;
    for (auto& a : argText) argv.push_back(a.data());
    argv.push_back(nullptr);
    for (auto& e : envText) envp.push_back(e.data());
    envp.push_back(nullptr);
    int out[2], err[2];
    ASSERT_EQ(pipe2(out, O_CLOEXEC), 0);
    ASSERT_EQ(pipe2(err, O_CLOEXEC), 0);
    pid_t pid = fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      dup2(out[1], STDOUT_FILENO);
      dup2(err[1], STDERR_FILENO);
      execve(argv[0], argv.data(), envp.data());
      _exit(127);
    }
    close(out[1]);
    close(err[1]);
    Rank& r = ranks_[rank];
    r.pid = pid;
    r.outFd = out[0];
    r.errFd = err[0];
  }

  void startAll(const std::vector<std::string>& args) {
    for (int r = 0; r < size_; ++r) start(r, args);
  }

  // Collects output until every started rank (but `besides`) exited and closed its pipes, or
  // `seconds` passed (false). Whatever still runs then is killed.
  bool wait(double seconds, int besides = -1) {
    Clock::time_point start = Clock::now();
    bool allDone = false;
    while (!allDone && secondsSince(start) < seconds) {
      std::vector<pollfd> fds;
      std::vector<std::string*> sinks;
      for (Rank& r : ranks_) {
        for (auto [fd, sink] : {std::pair{r.outFd, &r.out}, std::pair{r.errFd, &r.err}}) {
          if (fd < 0) continue;
          fds.push_back({fd, POLLIN, 0});
          sinks.push_back(sink);
        }
      }
      if (!fds.empty()) poll(fds.data(), fds.size(), 20);
      for (size_t i = 0; i < fds.size(); ++i) {
        if (fds[i].revents == 0) continue;
        char buffer[4096];
        ssize_t n = read(fds[i].fd, buffer, sizeof(buffer));
        if (n > 0) {
          sinks[i]->append(buffer, static_cast<size_t>(n));
        } else {
          closeFd(fds[i].fd);
        }
      }
      if (fds.empty()) std::this_thread::sleep_for(std::chrono::milliseconds(20));
      allDone = reap(besides);
    }
    killAll();
    return allDone;
  }

  std::string describe() const {
    std::string text;
    for (int r = 0; r < size_; ++r) {
      const Rank& k = ranks_[r];
      if (k.pid < 0) continue;
      text += "--- rank " + std::to_string(r) + " status " + std::to_string(k.status) +
              "\nstdout: " + k.out + "stderr: " + k.err.substr(0, 4000) + "\n";
    }
    return text;
  }

 private:
  void closeFd(int fd) {
    for (Rank& r : ranks_) {
      if (r.outFd == fd) r.outFd = -1;
      if (r.errFd == fd) r.errFd = -1;
    }
    close(fd);
  }
  // True when every started rank (but `besides`) has exited and its output is read.
  bool reap(int besides) {
    bool all = true;
    for (Rank& r : ranks_) {
      if (r.pid < 0 || &r - ranks_.data() == besides) continue;
      if (!r.exited && waitpid(r.pid, &r.status, WNOHANG) == r.pid) {
        r.exited = true;
        r.exitedAt = Clock::now();
      }
      all &= r.exited && r.outFd < 0 && r.errFd < 0;
    }
    return all;
  }
  void killAll() {
    for (Rank& r : ranks_) {
      if (r.pid > 0 && !r.exited) {
        kill(r.pid, SIGKILL);
        waitpid(r.pid, &r.status, 0);
        r.exited = true;
        r.exitedAt = Clock::now();
      }
      for (int fd : {r.outFd, r.errFd})
        if (fd >= 0) close(fd);
      r.outFd = r.errFd = -1;
    }
  }

  int size_;
  std::vector<Rank> ranks_;
  uint16_t port_;
  std::string secret_;
  std::map<std::string, std::string> env_;
};

inline bool isPeerFailure(int code) { return code == loomRemoteError || code == loomTimeout; }

}  // namespace loom::test
