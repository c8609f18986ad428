// Runs the built loomrun binary (path from $LOOMRUN or the LOOMRUN_PATH macro) with captured
// output, for the loomrun tests. Every run is bounded: finish() kills loomrun after
// kHardLimitSec, so a launcher that hangs fails the test instead of the suite.
#pragma once

#include <fcntl.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <csignal>
#include <cstdlib>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

extern char** environ;

namespace loomrun_test {

using Clock = std::chrono::steady_clock;

// A job script that prints the variables loomrun gives every rank.
inline const char* const kEnvScript =
    "echo R=$RANK W=$WORLD_SIZE LR=$LOCAL_RANK LW=$LOCAL_WORLD_SIZE G=$GROUP_RANK "
    "NR=$NODE_RANK MA=$MASTER_ADDR MP=$MASTER_PORT C=$LOOM_COMM_ID S=$LOOM_JOB_SECRET";

constexpr double kHardLimitSec = 9;
// Hang guard for jobs that loomrun must stop early; generous so a loaded machine does not flake.
constexpr double kStopLimitSec = 9;

inline std::string loomrunPath() {
  if (const char* path = std::getenv("LOOMRUN"); path != nullptr && *path != '\0') return path;
#ifdef LOOMRUN_PATH
  return LOOMRUN_PATH;
#else
  return "loomrun";
#endif
}

inline double secondsSince(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// One loomrun process with its stdout and stderr captured.
class Loomrun {
 public:
  // env entries are "NAME=value"; LOOM_JOB_SECRET and LOOMRUN_TIMEOUT from the test's own
  // environment are dropped so that each test sees loomrun's defaults unless it sets them.
  Loomrun(const std::vector<std::string>& args, const std::vector<std::string>& env = {},
          const std::string& stdinData = "") {
    std::vector<std::string> argvStrings = {loomrunPath()};
    argvStrings.insert(argvStrings.end(), args.begin(), args.end());
    std::vector<std::string> envStrings;
    for (char** entry = environ; *entry != nullptr; ++entry) {
      std::string text = *entry;
      if (text.rfind("LOOM_JOB_SECRET=", 0) == 0 || text.rfind("LOOMRUN_TIMEOUT=", 0) == 0) {
        continue;
      }
      envStrings.push_back(text);
    }
    envStrings.insert(envStrings.end(), env.begin(), env.end());
    std::vector<char*> argv;
    std::vector<char*> envp;
    for (std::string& s : argvStrings) argv.push_back(s.data());
    for (std::string& s : envStrings) envp.push_back(s.data());
    argv.push_back(nullptr);
    envp.push_back(nullptr);

    int outPipe[2];
    int errPipe[2];
    int inPipe[2];
    if (pipe2(outPipe, O_CLOEXEC) != 0 || pipe2(errPipe, O_CLOEXEC) != 0 ||
        pipe2(inPipe, O_CLOEXEC) != 0) {
      ADD_FAILURE() << "pipe2 failed";
      return;
    }
    // Small enough to fit in the pipe buffer, so it can be written before the child runs.
    if (!stdinData.empty()) {
      EXPECT_EQ(write(inPipe[1], stdinData.data(), stdinData.size()),
                static_cast<ssize_t>(stdinData.size()));
    }
    close(inPipe[1]);
    start_ = Clock::now();
    pid_ = fork();
    if (pid_ == 0) {
      // gtest may have changed dispositions; loomrun must see the defaults a shell would give.
      ::signal(SIGINT, SIG_DFL);
      ::signal(SIGTERM, SIG_DFL);
      ::signal(SIGHUP, SIG_DFL);
      ::signal(SIGPIPE, SIG_DFL);
      dup2(inPipe[0], 0);
      dup2(outPipe[1], 1);
      dup2(errPipe[1], 2);
      execve(argv[0], argv.data(), envp.data());
      _exit(99);
    }
    close(inPipe[0]);
    close(outPipe[1]);
    close(errPipe[1]);
    outFd_ = outPipe[0];
    errFd_ = errPipe[0];
  }

  ~Loomrun() {
    if (pid_ > 0 && !exited_) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
    if (outFd_ >= 0) close(outFd_);
    if (errFd_ >= 0) close(errFd_);
  }

  // Collects output until `stdout` holds `count` lines or `limitSec` passes.
  bool waitForLines(size_t count, double limitSec) {
    Clock::time_point deadline = Clock::now() + toDuration(limitSec);
    while (Clock::now() < deadline) {
      if (static_cast<size_t>(std::count(out_.begin(), out_.end(), '\n')) >= count) return true;
      if (!pump(deadline)) break;
    }
    return static_cast<size_t>(std::count(out_.begin(), out_.end(), '\n')) >= count;
  }

  void signal(int sig) { kill(pid_, sig); }

  // Reads all output and reaps loomrun; kills it after the hard limit. Returns the exit status
  // in shell form (128+signal when killed).
  int finish() {
    Clock::time_point deadline = start_ + toDuration(hardLimitSec_);
    while (outFd_ >= 0 || errFd_ >= 0) {
      if (!pump(deadline)) break;
    }
    int status = 0;
    while (true) {
      pid_t done = waitpid(pid_, &status, WNOHANG);
      if (done == pid_) break;
      if (Clock::now() >= deadline) {
        ADD_FAILURE() << "loomrun did not finish within " << hardLimitSec_ << " s; killing it";
        kill(pid_, SIGKILL);
        waitpid(pid_, &status, 0);
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    exited_ = true;
    elapsedSec_ = secondsSince(start_);
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  }

  // For the few tests that wait out one of loomrun's own bounds on purpose.
  void setHardLimit(double seconds) { hardLimitSec_ = seconds; }
  const std::string& out() const { return out_; }
  const std::string& err() const { return err_; }
  double elapsedSec() const { return elapsedSec_; }

 private:
  static Clock::duration toDuration(double seconds) {
    return std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
  }

  // One poll round; false when both pipes are closed or the deadline passed.
  bool pump(Clock::time_point deadline) {
    std::vector<pollfd> fds;
    if (outFd_ >= 0) fds.push_back({outFd_, POLLIN, 0});
    if (errFd_ >= 0) fds.push_back({errFd_, POLLIN, 0});
    auto remaining = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    if (fds.empty() || remaining.count() <= 0) return false;
    if (poll(fds.data(), fds.size(), static_cast<int>(remaining.count()) + 1) <= 0) return true;
    for (const pollfd& pfd : fds) {
      if (pfd.revents == 0) continue;
      bool isOut = pfd.fd == outFd_;
      char buffer[65536];
      ssize_t n = read(pfd.fd, buffer, sizeof(buffer));
      if (n > 0) {
        (isOut ? out_ : err_).append(buffer, static_cast<size_t>(n));
      } else {
        close(pfd.fd);
        (isOut ? outFd_ : errFd_) = -1;
      }
    }
    return true;
  }

  pid_t pid_ = -1;
  int outFd_ = -1;
  int errFd_ = -1;
  bool exited_ = false;
  Clock::time_point start_;
  double elapsedSec_ = 0;
  double hardLimitSec_ = kHardLimitSec;
  std::string out_;
  std::string err_;
};

struct Result {
  int status;
  std::string out;
  std::string err;
  double seconds;
};

inline Result runLoomrun(const std::vector<std::string>& args,
                         const std::vector<std::string>& env = {},
                         const std::string& stdinData = "") {
  Loomrun run(args, env, stdinData);
  int status = run.finish();
  return {status, run.out(), run.err(), run.elapsedSec()};
}

// A job of n ranks, each running the given /bin/sh script.
inline std::vector<std::string> shJob(int n, const std::string& script,
                                      const std::vector<std::string>& options = {}) {
  std::vector<std::string> args = {"-n", std::to_string(n)};
  args.insert(args.end(), options.begin(), options.end());
  args.insert(args.end(), {"/bin/sh", "-c", script});
  return args;
}

inline std::vector<std::string> lines(const std::string& text) {
  std::vector<std::string> result;
  std::istringstream stream(text);
  for (std::string line; std::getline(stream, line);) result.push_back(line);
  return result;
}

// "[3] rest" -> {3, "rest"}; rank -1 when the line has no prefix.
inline std::pair<int, std::string> splitPrefix(const std::string& line) {
  if (line.size() < 4 || line[0] != '[') return {-1, line};
  size_t close = line.find("] ");
  if (close == std::string::npos) return {-1, line};
  return {std::stoi(line.substr(1, close - 1)), line.substr(close + 2)};
}

inline std::map<std::string, std::string> parseFields(const std::string& text) {
  std::map<std::string, std::string> fields;
  std::istringstream stream(text);
  for (std::string word; stream >> word;) {
    size_t eq = word.find('=');
    if (eq != std::string::npos) fields[word.substr(0, eq)] = word.substr(eq + 1);
  }
  return fields;
}

inline bool isLowerHex(const std::string& text) {
  for (char c : text) {
    if (!std::isxdigit(static_cast<unsigned char>(c)) ||
        std::isupper(static_cast<unsigned char>(c))) {
      return false;
    }
  }
  return true;
}

// True once `pid` no longer runs: gone, or a zombie waiting for a reaper outside our control.
inline bool waitUntilDead(pid_t pid, double limitSec) {
  Clock::time_point start = Clock::now();
  while (secondsSince(start) < limitSec) {
    std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
    std::string content;
    if (!stat || !std::getline(stat, content)) return true;
    size_t paren = content.rfind(')');
    if (paren != std::string::npos && paren + 2 < content.size() && content[paren + 2] == 'Z') {
      return true;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return false;
}

inline std::vector<pid_t> pidsFromOutput(const std::string& out) {
  std::vector<pid_t> pids;
  for (const std::string& line : lines(out)) pids.push_back(std::stoi(splitPrefix(line).second));
  return pids;
}

}  // namespace loomrun_test
