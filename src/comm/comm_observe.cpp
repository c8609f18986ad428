// What a communicator shows of itself: its flight recorder and trace (set up here, fed by a few
// hooks in comm.cpp, device_calls.cpp and p2p_engine.cpp), the dumps when it fails, and the
// message of a wait that timed out, which says what is known of the peer it waited for: dead,
// stopped (SIGSTOP, a debugger), blocked or running late, and the call it last entered.
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <sstream>

#include "base/dtype.hpp"
#include "base/env.hpp"
#include "base/log.hpp"
#include "comm/comm.hpp"
#include "comm/flight_registry.hpp"
#include "comm/trace.hpp"
#include "transport/checked_channel.hpp"

namespace loom {

namespace {

// The state letter of /proc/<pid>/stat ('R', 'S', 'D', 'T', 't', 'Z', ...), or 0 if unreadable.
char processState(int pid) {
  char path[64];
  std::snprintf(path, sizeof(path), "/proc/%d/stat", pid);
  const int fd = ::open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return 0;
  char text[512];
  const ssize_t n = ::read(fd, text, sizeof(text) - 1);
  ::close(fd);
  if (n <= 0) return 0;
  text[n] = '\0';
  const char* paren = std::strrchr(text, ')');  // the command name may hold spaces and parens
  return paren != nullptr && paren[1] == ' ' ? paren[2] : 0;
}

std::string seconds(int64_t ns) {
  char text[32];
  std::snprintf(text, sizeof(text), "%.1f s", static_cast<double>(ns) / 1e9);
  return text;
}

}  // namespace

void Comm::setUpFlight() {
  FlightIdentity identity;
  identity.name = config_.name;
  char job[24];
  std::snprintf(job, sizeof(job), "%016llx", static_cast<unsigned long long>(id_.jobNonce));
  identity.job = job;
  identity.host = ranks_[rank_].hostname;
  identity.rank = rank_;
  identity.nranks = nranks_;
  identity.pid = ranks_[rank_].pid;
  flight_ = std::make_unique<FlightRecorder>(static_cast<size_t>(env::flightEntries()), identity);
  flight_->publishTo(&transports_->arena().progress(nodes_.localIndex(rank_)));
  health_.describeTimeoutsWith([this](int peer) { return describeWait(peer); });
  const std::string traceDir = env::traceDir();
  if (!traceDir.empty()) trace_ = Trace::open(traceDir, identity, env::traceWaitUs() * 1000);
  flight_->traceTo(trace_.get());
  flightRegistration_ = std::make_unique<FlightRegistration>(*flight_);
}

void Comm::recordStart(FlightScope& scope, const CollArgs& args, const Algorithm& algo) {
  const CallExtents extents = callExtents(args, rank_, nranks_);
  FlightCall call = collectiveCall(args.func, args.count, args.dtype, args.op, args.root,
                                   std::max(extents.sendBytes, extents.recvBytes),
                                   main_->checker().calls(), algo.name);
  call.startedNs = health_.clockStartedNs();  // beginOperation() read the clock
  scope.start(call);
  if (native() && trace_) native()->setCallNumber(main_->checker().calls());
}

uint64_t Comm::recordQueued(const Group& group, const CollArgs& args, const Algorithm* algo) {
  // The call's sizes as the group that runs it sees them (an exchange's alltoallv has a count
  // per member of the group, not per rank of the communicator).
  const CallExtents extents = callExtents(args, group.rank(), group.size());
  FlightCall call = collectiveCall(args.func, args.count, args.dtype, args.op, args.root,
                                   std::max(extents.sendBytes, extents.recvBytes), 0,
                                   algo != nullptr ? algo->name : "pipelined");
  call.state = FlightState::kQueued;
  return flight_->begin(call);
}

void Comm::recordFailure(const Error& error) {
  if (!flight_) return;  // failed before the recorder existed (init)
  flight_->failInFlight(error.code());
  flight_->flushTrace();
  FlightRegistry& registry = FlightRegistry::process();
  if (registry.dumpDir()[0] == '\0') return;
  // Every communicator of the process: a hang in one may come from another.
  const std::string reason = std::string(loomGetErrorString(error.code())) + ": " + error.what();
  if (registry.dumpAll(registry.dumpDir(), reason.c_str()) > 0)
    LOOM_WARN(kSubsysColl, rank_, "flight records written to ", registry.dumpDir(),
              " (loom-info --flight ", registry.dumpDir(), " reads them)");
  else
    LOOM_WARN(kSubsysColl, rank_, "LOOM_FLIGHT_DIR=", registry.dumpDir(),
              ": no flight record could be written there (", std::strerror(errno), ")");
}

char Comm::processLetter(int peer) const {
  const RankInfo& info = ranks_[peer];
  if (!nodes_.sameNode(peer, rank_) || info.pidNamespace != ranks_[rank_].pidNamespace ||
      info.pid <= 0)
    return 0;
  const int fd = health_.pidfd(peer);
  pollfd p{fd, POLLIN, 0};
  const bool gone = fd >= 0 ? ::poll(&p, 1, 0) > 0 : ::kill(info.pid, 0) != 0 && errno == ESRCH;
  return gone ? 'X' : processState(info.pid);
}

std::string Comm::describePeer(int peer, uint64_t mySeq) const {
  const RankInfo& info = ranks_[peer];
  std::ostringstream out;
  out << "rank " << peer << " (pid " << info.pid << " on " << info.hostname << ")";
  if (!nodes_.sameNode(peer, rank_)) {
    out << ": on another host, whose processes cannot be seen from here";
    const auto* channel = dynamic_cast<const CheckedChannel*>((*main_->ctx().channels)[peer]);
    if (channel != nullptr && channel->receivedSeq() > 0)
      out << "; the last of its calls that reached this rank is #" << channel->receivedSeq();
    return out.str();
  }
  std::string state = "alive";
  bool stopped = false;
  if (const char letter = processLetter(peer); letter != 0) {
    if (letter == 'X' || letter == 'Z') return out.str() + ": dead (the process exited)";
    if (letter == 'T') state = "stopped (process state T: SIGSTOP or a debugger holds it)";
    if (letter == 't') state = "stopped by a debugger (process state t)";
    stopped = letter == 'T' || letter == 't';
    if (letter == 'D') state = "alive but blocked in the kernel (process state D)";
    if (letter == 'R' || letter == 'S') state = "alive and running";
  }
  out << ": " << state;
  const CallProgress& progress = transports_->arena().progress(nodes_.localIndex(peer));
  const uint64_t entered = progress.entered.load(std::memory_order_acquire);
  const uint64_t finished = progress.finished.load(std::memory_order_relaxed);
  const int64_t since =
      static_cast<int64_t>(steadyNowNs()) - progress.enteredNs.load(std::memory_order_relaxed);
  const char* func =
      funcName(static_cast<loomFunc_t>(progress.func.load(std::memory_order_relaxed)));
  if (progress.destroyed.load(std::memory_order_acquire) != 0) {
    out << "; it destroyed its communicator";
    if (entered != 0)
      out << " after entering " << func << " #" << entered
          << (finished >= entered ? " (finished)" : " (not finished)");
  } else if (entered == 0) {
    out << "; it has not entered any collective of this communicator";
  } else if (entered < mySeq) {
    out << (stopped ? "" : ", late") << "; the last collective it entered is " << func << " #"
        << entered
        << (finished >= entered ? " (finished)" : " (still in it, for " + seconds(since) + ")")
        << " and it has not entered #" << mySeq;
  } else if (entered == mySeq) {
    out << "; it entered this call " << seconds(since) << " ago and waits inside it too";
  } else {
    out << "; it is ahead, in " << func << " #" << entered;
  }
  return out.str();
}

std::string Comm::leavingNote() const {
  const CallProgress& mine = transports_->arena().progress(nodes_.localIndex(rank_));
  const uint64_t entered = mine.entered.load(std::memory_order_acquire);
  if (entered == 0) return "destroyed its communicator before entering any collective";
  const uint64_t finished = mine.finished.load(std::memory_order_relaxed);
  return std::string("destroyed its communicator after entering ") +
         funcName(static_cast<loomFunc_t>(mine.func.load(std::memory_order_relaxed))) + " #" +
         std::to_string(entered) + (finished >= entered ? " (finished)" : " (not finished)");
}

uint64_t Comm::enteredCall(int peer) const {
  return transports_->arena()
      .progress(nodes_.localIndex(peer))
      .entered.load(std::memory_order_acquire);
}

std::string Comm::ranksBehind(uint64_t seq, int except) const {
  // A rank that entered the call and then died or was stopped in it holds the ring up as much as
  // one that never came.
  std::string behind;
  for (int r = 0; r < nranks_; ++r) {
    if (r == rank_ || r == except || !nodes_.sameNode(r, rank_)) continue;
    const bool destroyed = transports_->arena()
                               .progress(nodes_.localIndex(r))
                               .destroyed.load(std::memory_order_acquire) != 0;
    const char letter = enteredCall(r) < seq || destroyed ? 'B' : processLetter(r);
    if (letter == 'B' || letter == 'X' || letter == 'Z' || letter == 'T' || letter == 't')
      behind += (behind.empty() ? "" : "; ") + describePeer(r, seq);
  }
  return behind;
}

std::string Comm::describeWait(int peer) const {
  std::ostringstream out;
  FlightCall call;
  const bool known = flight_ && flight_->current(call);
  const uint64_t seq = known ? call.seq : main_->checker().calls();
  out << "timed out after " << config_.timeoutMs / 1000.0 << " s in ";
  if (known)
    out << funcName(call.func) << " #" << seq << " (" << call.count << " x "
        << dtypeName(call.dtype) << (call.algorithm != nullptr ? ", " : "")
        << (call.algorithm != nullptr ? call.algorithm : "") << ")";
  else
    out << "collective #" << seq;
  out << " of communicator " << (config_.name.empty() ? "" : "'" + config_.name + "' ") << "("
      << nranks_ << " ranks, id " << (flight_ ? flight_->identity().job : "?") << ", this is rank "
      << rank_ << ") waiting for ";
  if (peer >= 0 && peer < nranks_) {
    out << describePeer(peer, seq);
    // In a ring the peer waited for may have entered the call and wait itself, for a rank
    // further along: name the ranks of this host that have not come as far.
    if (nodes_.sameNode(peer, rank_) && enteredCall(peer) >= seq) {
      const std::string behind = ranksBehind(seq, peer);
      if (!behind.empty()) out << "; the call is held up by " << behind;
    }
  } else {
    // No peer in particular: the ranks of this host that have not come as far as this call.
    const std::string behind = ranksBehind(seq);
    out << (behind.empty() ? std::string("peers") : behind);
  }
  out << " (LOOM_TIMEOUT / config timeoutMs)";
  return out.str();
}

}  // namespace loom
