// loomrun: starts N local ranks of a program, forwards their output line by line with a rank
// prefix, and stops the whole job as soon as one rank fails. With --nnodes > 1 it is one of
// several loomruns, one per node, linked through NodeLink so that a failure on any node stops
// all of them. See usageText() for the interface.
#include <fcntl.h>
#include <poll.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "comm/status_socket.hpp"
#include "loom/loom.h"
#include "loomrun_job.hpp"
#include "loomrun_nodes.hpp"
#include "loomrun_options.hpp"
#include "loomrun_output.hpp"
#include "status_client.hpp"

namespace loom::launcher {
namespace {

using Clock = std::chrono::steady_clock;

// After the last rank exits, output still arriving from its leftover children is forwarded for
// this long; after that loomrun stops listening rather than wait for a daemon forever.
constexpr double kDrainSec = 1.0;
// Cap on one rank's pipe reads per reaping, so a descendant writing flat out cannot stall us.
constexpr int kMaxDrainReads = 64;
constexpr size_t kReadChunk = 64 * 1024;

Clock::time_point after(double seconds) {
  return Clock::now() +
         std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
}

const char* signalName(int sig) {
  switch (sig) {
    case SIGINT:
      return "SIGINT";
    case SIGTERM:
      return "SIGTERM";
    case SIGHUP:
      return "SIGHUP";
    default:
      return "a signal";
  }
}

std::string formatSeconds(double seconds) {
  char text[32];
  std::snprintf(text, sizeof(text), "%g", seconds);
  return text;
}

// Fork/exec rely on 0, 1 and 2 being real descriptors: otherwise a pipe could land on fd 1 and
// dup2 onto itself would leave it close-on-exec.
void ensureStandardFds() {
  for (int fd = 0; fd < 3; ++fd) {
    if (::fcntl(fd, F_GETFD) < 0 && errno == EBADF) {
      int devnull = ::open("/dev/null", O_RDWR);
      if (devnull >= 0 && devnull != fd) ::close(devnull);
    }
  }
}

struct Stream {
  int fd = -1;
  std::optional<LineForwarder> forwarder;
  // stderr only: the line that says why the rank failed, for the failure summary.
  bool watch = false;
  FailureLine failure;
};

struct Rank {
  int localRank = 0;
  int globalRank = 0;
  pid_t pid = -1;      // also its process group id
  bool reaped = true;  // until it is started
  Stream out;
  Stream err;
  std::string outcome;  // "exited with status 3", "killed by signal 9 (Killed)"

  bool hasOpenPipes() const { return out.fd >= 0 || err.fd >= 0; }
};

class Launcher {
 public:
  explicit Launcher(LaunchOptions options)
      : options_(std::move(options)), stdout_(STDOUT_FILENO), stderr_(STDERR_FILENO) {}

  int run();

 private:
  enum class Phase { kRunning, kStopping, kKilled };

  bool setUpSignals();
  void startRanks(const JobInfo& job);
  bool startRank(Rank& rank, const JobInfo& job, int stdinFd);
  void eventLoop();
  std::optional<int> pollTimeoutMs() const;
  void handleSignals();
  void reapChildren();
  void onRankExit(Rank& rank, int status);
  // Reads once; true when data came (more may be waiting). Closes the stream at EOF.
  bool readStream(Stream& stream);
  void closeStream(Stream& stream);
  // Stops the local ranks; `reason` tells the other nodes (if any) why.
  void stop(int exitCode, const std::string& reason);
  // The local ranks are all gone; true when loomrun may exit (the job's outcome is known).
  bool localJobOver();
  void onNodeEvent(const NodeEvent& event);
  void signalRanks(int sig);
  void message(const std::string& text);
  void printStatus();
  // torchrun's "Root Cause": which rank failed first, where, how, and its first error line.
  void failureSummary();

  LaunchOptions options_;
  // A copy of our stdout that ranks inherit (LOOMRUN_STDOUT_FD) while their lines are prefixed:
  // a rank writing machine-readable output (loom-bench --csv) writes it there unprefixed.
  int rawStdout_ = -1;
  OutputSink stdout_;
  OutputSink stderr_;
  std::vector<Rank> ranks_;
  std::optional<NodeLink> nodes_;  // multi-node jobs only
  int signalFd_ = -1;
  sigset_t originalMask_{};

  Phase phase_ = Phase::kRunning;
  int exitCode_ = 0;
  std::optional<Clock::time_point> jobDeadline_;
  std::optional<Clock::time_point> killDeadline_;
  std::optional<Clock::time_point> drainDeadline_;
  int firstFailed_ = -1;  // index into ranks_ of the rank whose failure stopped the job
};

void Launcher::message(const std::string& text) { stderr_.write("loomrun: " + text + "\n"); }

void Launcher::printStatus() {
  std::vector<int> pids;
  for (const Rank& rank : ranks_)
    if (!rank.reaped) pids.push_back(rank.pid);
  const std::string dir = statusDirectory(std::getenv("LOOM_STATUS_DIR"));
  message("status of the running ranks (SIGUSR1):\n" +
          tool::statusReport(tool::queryStatus(dir, pids, "status", 1000)));
}

bool Launcher::setUpSignals() {
  // Signals arrive through a signalfd so that poll(2) sees child exits, Ctrl-C and timeouts in
  // one place. They are blocked before any fork so no SIGCHLD can be lost; ranks get the
  // original mask back before exec.
  // An inherited SIG_IGN for SIGCHLD would make the kernel reap ranks behind our back, leaving
  // no exit status to report.
  ::signal(SIGCHLD, SIG_DFL);
  sigset_t watched;
  sigemptyset(&watched);
  sigaddset(&watched, SIGCHLD);
  // SIGUSR1: print every rank's calls in flight (their status sockets), the job goes on.
  sigaddset(&watched, SIGUSR1);
  for (int sig : {SIGINT, SIGTERM, SIGHUP}) {
    // Respect an inherited SIG_IGN (nohup, background jobs of a non-interactive shell): a
    // blocked signal would otherwise still reach the signalfd.
    struct sigaction current {};
    if (::sigaction(sig, nullptr, &current) == 0 && current.sa_handler == SIG_IGN) continue;
    sigaddset(&watched, sig);
  }
  sigset_t blocked = watched;
  // Blocking SIGPIPE turns a vanished reader of our stdout into EPIPE without changing the
  // disposition the ranks inherit.
  sigaddset(&blocked, SIGPIPE);
  if (::sigprocmask(SIG_BLOCK, &blocked, &originalMask_) != 0) {
    message(std::string("sigprocmask: ") + std::strerror(errno));
    return false;
  }
  signalFd_ = ::signalfd(-1, &watched, SFD_NONBLOCK | SFD_CLOEXEC);
  if (signalFd_ < 0) {
    message(std::string("signalfd: ") + std::strerror(errno));
    return false;
  }
  return true;
}

int Launcher::run() {
  JobInfo job;
  std::string error;
  if (options_.multiNode()) {
    // Before the signal setup: until the ranks start, Ctrl-C may simply end loomrun.
    nodes_.emplace();
    if (!nodes_->establish(options_, job, error)) {
      message(error);
      return 1;
    }
  } else if (!prepareJob(options_, job, error)) {
    message(error);
    return 1;
  }
  if (!setUpSignals()) return 1;
  if (options_.timeoutSec > 0) jobDeadline_ = after(options_.timeoutSec);
  startRanks(job);
  eventLoop();

  if (phase_ != Phase::kRunning) signalRanks(SIGKILL);  // descendants that outlived the drain
  for (Rank& rank : ranks_) {
    closeStream(rank.out);
    closeStream(rank.err);
  }
  if (firstFailed_ >= 0) failureSummary();
  return phase_ == Phase::kRunning ? 0 : exitCode_;
}

void Launcher::failureSummary() {
  char host[256] = {0};
  ::gethostname(host, sizeof(host) - 1);
  const Rank& rank = ranks_[static_cast<size_t>(firstFailed_)];
  std::string text = "job failed. Root cause (first rank to fail):\n";
  text += "  rank      : " + std::to_string(rank.globalRank) + " (local rank " +
          std::to_string(rank.localRank) + ")\n";
  text += "  host      : " + std::string(host) + "\n";
  text += "  pid       : " + std::to_string(rank.pid) + "\n";
  text += "  exit      : " + rank.outcome + "\n";
  const std::string first = rank.err.failure.line();
  text += "  first error: " + (first.empty() ? std::string("(its stderr was empty)") : first);
  message(text);
}

void Launcher::startRanks(const JobInfo& job) {
  // Only rank 0 reads our stdin, like mpirun, so ranks do not race for input. A terminal is not
  // passed on at all: ranks live in their own process groups and would be stopped by SIGTTIN.
  int devnull = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
  bool stdinUsable = ::isatty(STDIN_FILENO) == 0;

  ranks_.resize(static_cast<size_t>(options_.nprocPerNode));
  for (int local = 0; local < options_.nprocPerNode; ++local) {
    Rank& rank = ranks_[static_cast<size_t>(local)];
    rank.localRank = local;
    rank.globalRank = options_.globalRank(local);
    int stdinFd = (local == 0 && stdinUsable) ? STDIN_FILENO : devnull;
    if (!startRank(rank, job, stdinFd)) {
      stop(1, "cannot start rank " + std::to_string(rank.globalRank));
      break;
    }
  }
  if (devnull >= 0) ::close(devnull);
}

bool Launcher::startRank(Rank& rank, const JobInfo& job, int stdinFd) {
  // Everything the child needs is built before fork; after it only async-signal-safe calls run.
  int outPipe[2];
  int errPipe[2];
  if (::pipe2(outPipe, O_CLOEXEC) != 0) {
    message("cannot start rank " + std::to_string(rank.globalRank) +
            ": pipe: " + std::strerror(errno));
    return false;
  }
  if (::pipe2(errPipe, O_CLOEXEC) != 0) {
    message("cannot start rank " + std::to_string(rank.globalRank) +
            ": pipe: " + std::strerror(errno));
    ::close(outPipe[0]);
    ::close(outPipe[1]);
    return false;
  }

  std::vector<std::string> envStrings = rankEnvironment(options_, job, rank.localRank);
  if (options_.prefix && rawStdout_ < 0) rawStdout_ = ::fcntl(STDOUT_FILENO, F_DUPFD_CLOEXEC, 3);
  struct stat pipeStat {};
  if (rawStdout_ >= 0 && ::fstat(outPipe[1], &pipeStat) == 0) {
    // With the pipe's identity, so that only a program whose stdout is still this very pipe
    // (not one further down a shell pipeline) bypasses it.
    envStrings.push_back("LOOMRUN_STDOUT_FD=" + std::to_string(rawStdout_) + ":" +
                         std::to_string(pipeStat.st_ino));
  }
  std::vector<char*> envp;
  for (std::string& entry : envStrings) envp.push_back(entry.data());
  envp.push_back(nullptr);
  std::vector<char*> argv;
  for (std::string& word : options_.command) argv.push_back(word.data());
  argv.push_back(nullptr);
  std::string execError = "loomrun: cannot execute '" + options_.command[0] + "': ";

  pid_t parent = ::getpid();
  pid_t pid = ::fork();
  if (pid == 0) {
    ::sigprocmask(SIG_SETMASK, &originalMask_, nullptr);
    // Own process group: stopping a rank with kill(-pgid) also reaches the processes it started.
    ::setpgid(0, 0);
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (::getppid() != parent) ::_exit(1);  // loomrun died before prctl took effect
    if (stdinFd >= 0 && stdinFd != STDIN_FILENO) ::dup2(stdinFd, STDIN_FILENO);
    ::dup2(outPipe[1], STDOUT_FILENO);
    ::dup2(errPipe[1], STDERR_FILENO);
    if (rawStdout_ >= 0) ::fcntl(rawStdout_, F_SETFD, 0);  // inherited across exec
    ::execvpe(argv[0], argv.data(), envp.data());
    // One write, so the message arrives whole even if a sibling's failure stops us right away.
    int code = (errno == ENOENT || errno == ENOTDIR) ? 127 : 126;
    char text[512];
    int length =
        std::snprintf(text, sizeof(text), "%s%s\n", execError.c_str(), std::strerror(errno));
    if (length > 0) {
      (void)!::write(STDERR_FILENO, text, std::min(static_cast<size_t>(length), sizeof(text) - 1));
    }
    ::_exit(code);
  }
  ::close(outPipe[1]);
  ::close(errPipe[1]);
  if (pid < 0) {
    message("cannot start rank " + std::to_string(rank.globalRank) +
            ": fork: " + std::strerror(errno));
    ::close(outPipe[0]);
    ::close(errPipe[0]);
    return false;
  }
  ::setpgid(pid, pid);  // also here, so kill(-pid) works even before the child has run
  rank.pid = pid;
  rank.reaped = false;

  // Appended piecewise: GCC 12 warns falsely (-Wrestrict) on "literal" + std::string.
  std::string prefix;
  if (options_.prefix) {
    prefix = "[";
    prefix += std::to_string(rank.globalRank);
    prefix += "] ";
  }
  rank.out.fd = outPipe[0];
  rank.out.forwarder.emplace(&stdout_, prefix);
  rank.err.fd = errPipe[0];
  rank.err.forwarder.emplace(&stderr_, prefix);
  rank.err.watch = true;
  for (int fd : {outPipe[0], errPipe[0]}) {
    ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) | O_NONBLOCK);
  }
  return true;
}

std::optional<int> Launcher::pollTimeoutMs() const {
  std::optional<Clock::time_point> next;
  auto consider = [&next](const std::optional<Clock::time_point>& deadline) {
    if (deadline && (!next || *deadline < *next)) next = deadline;
  };
  if (phase_ == Phase::kRunning) consider(jobDeadline_);
  if (phase_ == Phase::kStopping) consider(killDeadline_);
  // A drain deadline already past matters only to a multi-node loomrun that waits for the other
  // nodes' verdict; it must not turn poll into a busy loop.
  if (phase_ != Phase::kStopping && drainDeadline_ && *drainDeadline_ > Clock::now()) {
    consider(drainDeadline_);
  }
  std::optional<int> linkMs;
  if (nodes_) linkMs = nodes_->nextWakeMs();
  if (!next) return linkMs;
  auto remaining = std::chrono::duration<double, std::milli>(*next - Clock::now()).count();
  int ms = remaining <= 0 ? 0 : static_cast<int>(std::ceil(std::min(remaining, 1e9)));
  return linkMs ? std::min(ms, *linkMs) : ms;
}

void Launcher::eventLoop() {
  std::vector<pollfd> fds;
  std::vector<Stream*> streams;  // streams[i] belongs to fds[i + 1]
  while (true) {
    bool allReaped = true;
    bool anyOpen = false;
    for (const Rank& rank : ranks_) {
      allReaped = allReaped && rank.reaped;
      anyOpen = anyOpen || rank.hasOpenPipes();
    }
    Clock::time_point now = Clock::now();
    if (allReaped && !anyOpen && localJobOver()) return;
    if (allReaped && !drainDeadline_) drainDeadline_ = after(kDrainSec);
    if (allReaped && phase_ != Phase::kStopping && now >= *drainDeadline_ && localJobOver()) {
      return;
    }

    if (phase_ == Phase::kRunning && jobDeadline_ && now >= *jobDeadline_) {
      message("timeout after " + formatSeconds(options_.timeoutSec) + " s; stopping all ranks");
      stop(124, "timeout after " + formatSeconds(options_.timeoutSec) + " s");
    }
    if (phase_ == Phase::kStopping && now >= *killDeadline_) {
      signalRanks(SIGKILL);
      phase_ = Phase::kKilled;
      drainDeadline_ = after(kDrainSec);
    }

    fds.clear();
    streams.clear();
    fds.push_back({signalFd_, POLLIN, 0});
    for (Rank& rank : ranks_) {
      for (Stream* stream : {&rank.out, &rank.err}) {
        if (stream->fd < 0) continue;
        fds.push_back({stream->fd, POLLIN, 0});
        streams.push_back(stream);
      }
    }
    size_t linkFdsAt = fds.size();
    if (nodes_) nodes_->appendPollFds(fds);
    std::optional<int> timeout = pollTimeoutMs();
    int ready = ::poll(fds.data(), fds.size(), timeout.value_or(-1));
    if (ready < 0) {
      if (errno == EINTR) continue;
      message(std::string("poll: ") + std::strerror(errno));
      stop(1, std::string("poll: ") + std::strerror(errno));
      signalRanks(SIGKILL);
      return;
    }
    // Signals first: a rank that just exited has its remaining output drained before loomrun
    // reports it, so the rank's last words come before loomrun's verdict.
    if (fds[0].revents != 0) handleSignals();
    for (size_t i = 1; i < linkFdsAt; ++i) {
      // The descriptor may have been drained and closed while handling the signals above.
      Stream& stream = *streams[i - 1];
      if (fds[i].revents != 0 && stream.fd == fds[i].fd) readStream(stream);
    }
    if (nodes_) {
      if (std::optional<NodeEvent> event = nodes_->service()) onNodeEvent(*event);
    }
  }
}

bool Launcher::localJobOver() {
  if (!nodes_) return true;
  if (phase_ == Phase::kRunning) {
    // Our ranks all succeeded: the job is over once every other node says so too.
    if (std::optional<NodeEvent> event = nodes_->reportLocalSuccess()) onNodeEvent(*event);
  }
  // After a failure here the others have been told; there is nothing to wait for.
  return phase_ != Phase::kRunning || nodes_->concluded();
}

void Launcher::onNodeEvent(const NodeEvent& event) {
  if (event.kind == NodeEvent::Kind::kFinished) return;
  if (phase_ != Phase::kRunning) return;
  message(event.reason + "; stopping the local ranks");
  stop(event.exitCode, "");
}

void Launcher::handleSignals() {
  signalfd_siginfo info;
  while (::read(signalFd_, &info, sizeof(info)) == static_cast<ssize_t>(sizeof(info))) {
    int sig = static_cast<int>(info.ssi_signo);
    if (sig == SIGCHLD) continue;  // reaped below, whatever the count of coalesced signals
    if (sig == SIGUSR1) {
      printStatus();
      continue;
    }
    if (phase_ == Phase::kRunning) {
      message(std::string("received ") + signalName(sig) + "; stopping all ranks");
      stop(128 + sig, std::string("loomrun received ") + signalName(sig));
    } else {
      // A second Ctrl-C means the user does not want to wait for the grace period.
      message(std::string("received ") + signalName(sig) + " again; killing all ranks");
      signalRanks(SIGKILL);
      phase_ = Phase::kKilled;
      drainDeadline_ = after(kDrainSec);
    }
  }
  reapChildren();
}

void Launcher::reapChildren() {
  while (true) {
    int status = 0;
    pid_t pid = ::waitpid(-1, &status, WNOHANG);
    if (pid < 0 && errno == EINTR) continue;
    if (pid <= 0) return;
    for (Rank& rank : ranks_) {
      if (rank.pid == pid && !rank.reaped) {
        onRankExit(rank, status);
        break;
      }
    }
  }
}

void Launcher::onRankExit(Rank& rank, int status) {
  rank.reaped = true;
  for (Stream* stream : {&rank.out, &rank.err}) {
    for (int reads = 0; reads < kMaxDrainReads && readStream(*stream); ++reads) {
    }
  }

  if (WIFEXITED(status) && WEXITSTATUS(status) == 0) return;
  if (phase_ != Phase::kRunning) return;  // most likely our own SIGTERM; already reported why
  std::string who = "rank " + std::to_string(rank.globalRank);
  if (WIFSIGNALED(status)) {
    int sig = WTERMSIG(status);
    std::string what =
        who + " killed by signal " + std::to_string(sig) + " (" + strsignal(sig) + ")";
    rank.outcome = what.substr(who.size() + 1);
    firstFailed_ = static_cast<int>(&rank - ranks_.data());
    message(what + "; stopping the other ranks");
    stop(128 + sig, what);
  } else {
    std::string what = who + " exited with status " + std::to_string(WEXITSTATUS(status));
    rank.outcome = what.substr(who.size() + 1);
    firstFailed_ = static_cast<int>(&rank - ranks_.data());
    message(what + "; stopping the other ranks");
    stop(WEXITSTATUS(status), what);
  }
}

bool Launcher::readStream(Stream& stream) {
  if (stream.fd < 0) return false;
  char buffer[kReadChunk];
  ssize_t n = ::read(stream.fd, buffer, sizeof(buffer));
  if (n > 0) {
    stream.forwarder->feed(buffer, static_cast<size_t>(n));
    if (stream.watch) stream.failure.feed(buffer, static_cast<size_t>(n));
    return true;
  }
  if (n == 0 || (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) closeStream(stream);
  return false;
}

void Launcher::closeStream(Stream& stream) {
  if (stream.fd < 0) return;
  ::close(stream.fd);
  stream.fd = -1;
  stream.forwarder->finish();
}

void Launcher::stop(int exitCode, const std::string& reason) {
  if (phase_ != Phase::kRunning) return;
  exitCode_ = exitCode;
  phase_ = Phase::kStopping;
  if (nodes_) nodes_->reportFailure(exitCode, reason);
  killDeadline_ = after(options_.graceSec);
  signalRanks(SIGTERM);
}

void Launcher::signalRanks(int sig) {
  for (const Rank& rank : ranks_) {
    if (rank.pid <= 0) continue;
    // A reaped rank's group is only signalled while its pipes are open, i.e. while something it
    // started is known to be alive; an empty group's id could otherwise belong to someone else.
    if (rank.reaped && !rank.hasOpenPipes()) continue;
    if (::kill(-rank.pid, sig) != 0 && errno == ESRCH && !rank.reaped) ::kill(rank.pid, sig);
  }
}

}  // namespace
}  // namespace loom::launcher

int main(int argc, char** argv) {
  using loom::launcher::ParseOutcome;
  loom::launcher::ParseResult parsed =
      loom::launcher::parseCommandLine(argc, argv, std::getenv("LOOMRUN_TIMEOUT"));
  if (parsed.outcome == ParseOutcome::kHelp) {
    std::fputs(loom::launcher::usageText().c_str(), stdout);
    return 0;
  }
  if (parsed.outcome == ParseOutcome::kVersion) {
    std::printf("loomrun (Loom) %d.%d.%d\n", LOOM_MAJOR, LOOM_MINOR, LOOM_PATCH);
    return 0;
  }
  if (parsed.outcome == ParseOutcome::kUsageError) {
    std::fprintf(stderr, "loomrun: %s\n%sRun 'loomrun --help' for details.\n", parsed.error.c_str(),
                 loom::launcher::shortUsage());
    return 2;
  }
  loom::launcher::ensureStandardFds();
  loom::launcher::Launcher launcher(std::move(parsed.options));
  return launcher.run();
}
