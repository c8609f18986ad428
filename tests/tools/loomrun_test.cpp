// Runs the built loomrun binary (path from $LOOMRUN or the LOOMRUN_PATH macro) on small /bin/sh
// jobs and checks what it starts, prints and returns. Every run is bounded: the harness kills
// loomrun after kHardLimitSec, so a launcher that hangs fails the test instead of the suite.
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
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

extern char** environ;

namespace {

using Clock = std::chrono::steady_clock;

constexpr double kHardLimitSec = 9;
// Hang guard for jobs that loomrun must stop early; generous so a loaded machine does not flake.
constexpr double kStopLimitSec = 9;

std::string loomrunPath() {
  if (const char* path = std::getenv("LOOMRUN"); path != nullptr && *path != '\0') return path;
#ifdef LOOMRUN_PATH
  return LOOMRUN_PATH;
#else
  return "loomrun";
#endif
}

double secondsSince(Clock::time_point start) {
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
    Clock::time_point deadline = start_ + toDuration(kHardLimitSec);
    while (outFd_ >= 0 || errFd_ >= 0) {
      if (!pump(deadline)) break;
    }
    int status = 0;
    while (true) {
      pid_t done = waitpid(pid_, &status, WNOHANG);
      if (done == pid_) break;
      if (Clock::now() >= deadline) {
        ADD_FAILURE() << "loomrun did not finish within " << kHardLimitSec << " s; killing it";
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
  std::string out_;
  std::string err_;
};

struct Result {
  int status;
  std::string out;
  std::string err;
  double seconds;
};

Result runLoomrun(const std::vector<std::string>& args, const std::vector<std::string>& env = {},
                  const std::string& stdinData = "") {
  Loomrun run(args, env, stdinData);
  int status = run.finish();
  return {status, run.out(), run.err(), run.elapsedSec()};
}

// A job of n ranks, each running the given /bin/sh script.
std::vector<std::string> shJob(int n, const std::string& script,
                               const std::vector<std::string>& options = {}) {
  std::vector<std::string> args = {"-n", std::to_string(n)};
  args.insert(args.end(), options.begin(), options.end());
  args.insert(args.end(), {"/bin/sh", "-c", script});
  return args;
}

std::vector<std::string> lines(const std::string& text) {
  std::vector<std::string> result;
  std::istringstream stream(text);
  for (std::string line; std::getline(stream, line);) result.push_back(line);
  return result;
}

// "[3] rest" -> {3, "rest"}; rank -1 when the line has no prefix.
std::pair<int, std::string> splitPrefix(const std::string& line) {
  if (line.size() < 4 || line[0] != '[') return {-1, line};
  size_t close = line.find("] ");
  if (close == std::string::npos) return {-1, line};
  return {std::stoi(line.substr(1, close - 1)), line.substr(close + 2)};
}

std::map<std::string, std::string> parseFields(const std::string& text) {
  std::map<std::string, std::string> fields;
  std::istringstream stream(text);
  for (std::string word; stream >> word;) {
    size_t eq = word.find('=');
    if (eq != std::string::npos) fields[word.substr(0, eq)] = word.substr(eq + 1);
  }
  return fields;
}

bool isLowerHex(const std::string& text) {
  for (char c : text) {
    if (!std::isxdigit(static_cast<unsigned char>(c)) ||
        std::isupper(static_cast<unsigned char>(c))) {
      return false;
    }
  }
  return true;
}

// True once `pid` no longer runs: gone, or a zombie waiting for a reaper outside our control.
bool waitUntilDead(pid_t pid, double limitSec) {
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

std::vector<pid_t> pidsFromOutput(const std::string& out) {
  std::vector<pid_t> pids;
  for (const std::string& line : lines(out)) pids.push_back(std::stoi(splitPrefix(line).second));
  return pids;
}

const char* kEnvScript =
    "echo R=$RANK W=$WORLD_SIZE LR=$LOCAL_RANK LW=$LOCAL_WORLD_SIZE G=$GROUP_RANK "
    "NR=$NODE_RANK MA=$MASTER_ADDR MP=$MASTER_PORT C=$LOOM_COMM_ID S=$LOOM_JOB_SECRET";

// Runs kEnvScript on n ranks, checks everything that must hold for any job and returns the
// per-rank fields.
std::vector<std::map<std::string, std::string>> checkedEnvJob(
    int n, const std::vector<std::string>& env = {}) {
  Result r = runLoomrun(shJob(n, kEnvScript), env);
  EXPECT_EQ(r.status, 0) << r.err;
  std::vector<std::map<std::string, std::string>> byRank(static_cast<size_t>(n));
  std::set<int> seen;
  for (const std::string& line : lines(r.out)) {
    auto [rank, rest] = splitPrefix(line);
    auto fields = parseFields(rest);
    EXPECT_EQ(fields["R"], std::to_string(rank)) << line;
    EXPECT_TRUE(rank >= 0 && rank < n) << line;
    if (rank < 0 || rank >= n) continue;
    EXPECT_TRUE(seen.insert(rank).second) << "rank " << rank << " printed twice";
    byRank[static_cast<size_t>(rank)] = fields;
  }
  EXPECT_EQ(seen.size(), static_cast<size_t>(n)) << r.out;
  return byRank;
}

TEST(Loomrun, SetsTorchrunAndLoomVariablesForEveryRank) {
  const int n = 4;
  auto byRank = checkedEnvJob(n);
  ASSERT_EQ(byRank.size(), static_cast<size_t>(n));
  const auto& first = byRank[0];
  for (int rank = 0; rank < n; ++rank) {
    auto& f = byRank[static_cast<size_t>(rank)];
    SCOPED_TRACE("rank " + std::to_string(rank));
    EXPECT_EQ(f["W"], "4");
    EXPECT_EQ(f["LR"], std::to_string(rank));
    EXPECT_EQ(f["LW"], "4");
    EXPECT_EQ(f["G"], "0");
    EXPECT_EQ(f["NR"], "0");
    EXPECT_EQ(f["MA"], "127.0.0.1");
    EXPECT_EQ(f["MP"], first.at("MP"));
    EXPECT_EQ(f["C"], first.at("C"));
    EXPECT_EQ(f["S"], first.at("S"));
  }
  int masterPort = std::stoi(first.at("MP"));
  EXPECT_GT(masterPort, 0);
  EXPECT_LT(masterPort, 65536);
  const std::string& commId = first.at("C");
  ASSERT_EQ(commId.rfind("127.0.0.1:", 0), 0u) << commId;
  int commPort = std::stoi(commId.substr(10));
  EXPECT_GT(commPort, 0);
  EXPECT_LT(commPort, 65536);
  EXPECT_NE(commPort, masterPort);
  EXPECT_EQ(first.at("S").size(), 32u);
  EXPECT_TRUE(isLowerHex(first.at("S"))) << first.at("S");
}

TEST(Loomrun, NewSecretForEachRun) {
  auto a = checkedEnvJob(2);
  auto b = checkedEnvJob(2);
  ASSERT_EQ(a[0]["S"].size(), 32u);
  ASSERT_EQ(b[0]["S"].size(), 32u);
  EXPECT_NE(a[0]["S"], b[0]["S"]);
}

TEST(Loomrun, InheritedSecretPassesThroughAndOwnVariablesWin) {
  auto byRank = checkedEnvJob(2, {"LOOM_JOB_SECRET=caller-chosen-secret", "RANK=77",
                                  "WORLD_SIZE=99", "LOOM_COMM_ID=10.0.0.1:1"});
  for (auto& f : byRank) {
    EXPECT_EQ(f["S"], "caller-chosen-secret");
    EXPECT_EQ(f["W"], "2");
    EXPECT_EQ(f["C"].rfind("127.0.0.1:", 0), 0u) << f["C"];
  }
}

TEST(Loomrun, AcceptsAllRankCountSpellings) {
  for (std::vector<std::string> flag : std::vector<std::vector<std::string>>{
           {"-n3"}, {"-n", "3"}, {"-N", "3"}, {"--np", "3"}, {"--np=3"}, {"--nproc-per-node=3"}}) {
    std::vector<std::string> args = flag;
    args.insert(args.end(), {"--", "/bin/sh", "-c", "echo $WORLD_SIZE"});
    Result r = runLoomrun(args);
    EXPECT_EQ(r.status, 0) << flag[0] << ": " << r.err;
    EXPECT_EQ(lines(r.out).size(), 3u) << flag[0];
    for (const std::string& line : lines(r.out)) EXPECT_EQ(splitPrefix(line).second, "3");
  }
}

TEST(Loomrun, PrefixesStdoutAndStderrSeparately) {
  Result r = runLoomrun(shJob(3, "echo out-$RANK; echo err-$RANK >&2"));
  EXPECT_EQ(r.status, 0);
  std::vector<std::string> outLines = lines(r.out);
  std::vector<std::string> errLines = lines(r.err);
  std::set<std::string> out(outLines.begin(), outLines.end());
  std::set<std::string> err(errLines.begin(), errLines.end());
  EXPECT_EQ(out, (std::set<std::string>{"[0] out-0", "[1] out-1", "[2] out-2"})) << r.out;
  EXPECT_EQ(err, (std::set<std::string>{"[0] err-0", "[1] err-1", "[2] err-2"})) << r.err;
}

TEST(Loomrun, PrintsFinalPartialLine) {
  Result r = runLoomrun(shJob(1, "printf 'first\\nno newline'; printf 'e1\\ne2' >&2"));
  EXPECT_EQ(r.status, 0);
  EXPECT_EQ(r.out, "[0] first\n[0] no newline\n");
  EXPECT_EQ(r.err, "[0] e1\n[0] e2\n");
}

TEST(Loomrun, NoPrefixPassesOutputThrough) {
  Result r = runLoomrun(shJob(2, "echo plain-$RANK; printf tail", {"--no-prefix"}));
  EXPECT_EQ(r.status, 0);
  EXPECT_NE(r.out.find("plain-0\n"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("plain-1\n"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find('['), std::string::npos) << r.out;
  EXPECT_EQ(r.out.size(), std::string("plain-0\ntailplain-1\ntail").size());
}

TEST(Loomrun, OnlyRankZeroReadsStdin) {
  Result r = runLoomrun(shJob(2, "cat"), {}, "hello\n");
  EXPECT_EQ(r.status, 0);
  EXPECT_EQ(r.out, "[0] hello\n");
}

TEST(Loomrun, FailingRankStatusPropagatesAndOthersAreStopped) {
  Result r =
      runLoomrun(shJob(4, "if [ $RANK = 2 ]; then echo bye >&2; exit 3; fi; exec sleep 100"));
  EXPECT_EQ(r.status, 3);
  EXPECT_LT(r.seconds, kStopLimitSec);
  EXPECT_NE(r.err.find("[2] bye\nloomrun: rank 2 exited with status 3; stopping the other ranks\n"),
            std::string::npos)
      << r.err;
}

TEST(Loomrun, ProcessesStartedByRanksAreStopped) {
  Result r = runLoomrun(
      shJob(3, "sleep 100 & echo $!; if [ $RANK = 1 ]; then sleep 0.2; exit 1; fi; wait"));
  EXPECT_EQ(r.status, 1);
  EXPECT_LT(r.seconds, kStopLimitSec);
  std::vector<pid_t> pids = pidsFromOutput(r.out);
  EXPECT_EQ(pids.size(), 3u) << r.out;
  for (pid_t pid : pids) EXPECT_TRUE(waitUntilDead(pid, 5)) << "background sleep " << pid;
}

TEST(Loomrun, RankKilledBySignalGives128PlusSignal) {
  Result r = runLoomrun(shJob(3, "if [ $RANK = 1 ]; then kill -9 $$; fi; exec sleep 100"));
  EXPECT_EQ(r.status, 128 + 9);
  EXPECT_LT(r.seconds, kStopLimitSec);
  EXPECT_NE(r.err.find("loomrun: rank 1 killed by signal 9 (Killed); stopping the other ranks"),
            std::string::npos)
      << r.err;
}

TEST(Loomrun, GraceEndsWithSigkillForRanksIgnoringSigterm) {
  // Rank 0 fails only after the others have had ample time to install their trap.
  Result r = runLoomrun(shJob(
      3, "trap '' TERM; if [ $RANK = 0 ]; then sleep 0.5; exit 5; fi; echo trapped; sleep 100",
      {"--grace", "0.3"}));
  EXPECT_EQ(r.status, 5);
  // The ranks ignored SIGTERM, so only the SIGKILL after the grace period could end them.
  EXPECT_GE(r.seconds, 0.5 + 0.3);
  EXPECT_LT(r.seconds, kStopLimitSec);
  EXPECT_EQ(lines(r.out).size(), 2u) << r.out;
}

TEST(Loomrun, TimeoutStopsAllRanksWith124) {
  Result r = runLoomrun(shJob(2, "exec sleep 100", {"--timeout", "0.5"}));
  EXPECT_EQ(r.status, 124);
  EXPECT_GE(r.seconds, 0.4);
  EXPECT_LT(r.seconds, kStopLimitSec);
  EXPECT_NE(r.err.find("loomrun: timeout after 0.5 s; stopping all ranks\n"), std::string::npos)
      << r.err;
}

TEST(Loomrun, TimeoutFromEnvironment) {
  Result r = runLoomrun(shJob(2, "exec sleep 100"), {"LOOMRUN_TIMEOUT=0.3"});
  EXPECT_EQ(r.status, 124);
  EXPECT_LT(r.seconds, kStopLimitSec);
}

TEST(Loomrun, JobWithinTimeoutSucceeds) {
  Result r = runLoomrun(shJob(2, "echo ok", {"--timeout", "5"}));
  EXPECT_EQ(r.status, 0);
  EXPECT_EQ(lines(r.out).size(), 2u);
}

void expectSignalStopsJob(int sig, const std::string& name) {
  Loomrun run(shJob(3, "echo ready; exec sleep 100"));
  ASSERT_TRUE(run.waitForLines(3, kStopLimitSec)) << run.out();
  run.signal(sig);
  EXPECT_EQ(run.finish(), 128 + sig);
  EXPECT_LT(run.elapsedSec(), kStopLimitSec);
  EXPECT_NE(run.err().find("loomrun: received " + name + "; stopping all ranks"), std::string::npos)
      << run.err();
}

TEST(Loomrun, SigtermToLoomrunStopsRanks) { expectSignalStopsJob(SIGTERM, "SIGTERM"); }

TEST(Loomrun, SigintToLoomrunStopsRanks) { expectSignalStopsJob(SIGINT, "SIGINT"); }

TEST(Loomrun, RanksDieWhenLoomrunIsKilled) {
  Loomrun run(shJob(2, "echo $$; exec sleep 100"));
  ASSERT_TRUE(run.waitForLines(2, kStopLimitSec)) << run.out();
  std::vector<pid_t> pids = pidsFromOutput(run.out());
  run.signal(SIGKILL);
  EXPECT_EQ(run.finish(), 128 + 9);
  for (pid_t pid : pids) EXPECT_TRUE(waitUntilDead(pid, 5)) << "rank process " << pid;
}

TEST(Loomrun, MissingProgramExits127) {
  Result r = runLoomrun({"-n", "2", "/nonexistent/loomrun-test-program"});
  EXPECT_EQ(r.status, 127);
  EXPECT_NE(r.err.find("cannot execute '/nonexistent/loomrun-test-program'"), std::string::npos)
      << r.err;
}

TEST(Loomrun, UsageErrorsExit2) {
  const std::vector<std::vector<std::string>> cases = {
      {},
      {"true"},
      {"-n"},
      {"-n", "0", "true"},
      {"-n", "-1", "true"},
      {"-n", "abc", "true"},
      {"-n", "2"},
      {"-n", "2", "--"},
      {"--bogus", "-n", "2", "true"},
      {"-n", "2", "--timeout", "soon", "true"},
      {"-n", "2", "--grace", "-1", "true"},
  };
  for (const auto& args : cases) {
    std::string joined;
    for (const auto& a : args) joined += a + " ";
    Result r = runLoomrun(args);
    EXPECT_EQ(r.status, 2) << "args: " << joined;
    EXPECT_NE(r.err.find("Usage: loomrun"), std::string::npos) << "args: " << joined;
    EXPECT_TRUE(r.out.empty()) << "args: " << joined;
  }
  Result badEnv = runLoomrun({"-n", "1", "true"}, {"LOOMRUN_TIMEOUT=later"});
  EXPECT_EQ(badEnv.status, 2);
}

TEST(Loomrun, MultiNodeFlagsAreRejectedForNow) {
  for (const char* flag : {"--nnodes", "--node-rank", "--master"}) {
    Result r = runLoomrun({flag, "1", "-n", "2", "true"});
    EXPECT_EQ(r.status, 2) << flag;
    EXPECT_NE(r.err.find("not supported yet"), std::string::npos) << r.err;
  }
}

TEST(Loomrun, HelpExits0) {
  Result r = runLoomrun({"--help"});
  EXPECT_EQ(r.status, 0);
  EXPECT_NE(r.out.find("Usage: loomrun"), std::string::npos);
}

TEST(Loomrun, EightRanksWithLotsOfOutputLoseNoLines) {
  const int n = 8;
  const int perRank = 5000;
  std::string script = "i=0; while [ $i -lt " + std::to_string(perRank) +
                       " ]; do echo \"out $RANK $i\"; echo \"err $RANK $i\" >&2; i=$((i+1)); done";
  Result r = runLoomrun(shJob(n, script));
  ASSERT_EQ(r.status, 0) << r.err.substr(0, 500);
  for (const auto& [text, kind] : {std::pair{&r.out, "out"}, std::pair{&r.err, "err"}}) {
    std::vector<int> next(n, 0);
    size_t count = 0;
    for (const std::string& line : lines(*text)) {
      auto [rank, rest] = splitPrefix(line);
      ASSERT_TRUE(rank >= 0 && rank < n) << line;
      // Each rank's lines must arrive whole and in order.
      ASSERT_EQ(rest, std::string(kind) + " " + std::to_string(rank) + " " +
                          std::to_string(next[static_cast<size_t>(rank)]++));
      ++count;
    }
    EXPECT_EQ(count, static_cast<size_t>(n * perRank)) << kind;
  }
}

}  // namespace
