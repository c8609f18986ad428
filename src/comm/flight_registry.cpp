#include "comm/flight_registry.hpp"

#include <execinfo.h>
#include <signal.h>
#include <unistd.h>

#include <cstring>
#include <thread>

#include "base/env.hpp"
#include "comm/status_server.hpp"
#include "comm/status_socket.hpp"

namespace loom {

namespace {

constexpr int kFatalSignals[] = {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT};
constexpr int kSignalCount = NSIG;

// The dispositions Loom replaced, so a fatal signal still ends the process as it would have.
// Written once, before the handlers are installed; read only by the handlers.
struct sigaction gPrevious[kSignalCount];
std::atomic<bool> gFatalDumped{false};

void say(const char* text) { (void)!::write(STDERR_FILENO, text, std::strlen(text)); }

const char* signalText(int sig) {
  switch (sig) {
    case SIGUSR2:
      return "SIGUSR2 (dump requested)";
    case SIGSEGV:
      return "fatal signal SIGSEGV";
    case SIGBUS:
      return "fatal signal SIGBUS";
    case SIGFPE:
      return "fatal signal SIGFPE";
    case SIGILL:
      return "fatal signal SIGILL";
    case SIGABRT:
      return "fatal signal SIGABRT";
  }
  return "signal";
}

void onSignal(int sig, siginfo_t* info, void* context) {
  const int savedErrno = errno;
  FlightRegistry& registry = FlightRegistry::process();
  if (sig == SIGUSR2) {
    if (registry.dumpAll(registry.dumpDir(), signalText(sig)) > 0) {
      say("loom: SIGUSR2: flight records written to ");
      say(registry.dumpDir());
      say("\n");
    }
    // Whoever handled SIGUSR2 before (the application, another copy of Loom) still does.
    const struct sigaction& previous = gPrevious[SIGUSR2];
    errno = savedErrno;
    if ((previous.sa_flags & SA_SIGINFO) != 0 && previous.sa_sigaction != nullptr)
      previous.sa_sigaction(sig, info, context);
    else if (previous.sa_handler != SIG_DFL && previous.sa_handler != SIG_IGN &&
             previous.sa_handler != nullptr)
      previous.sa_handler(sig);
    return;
  }
  // Once, however many threads fault together; then what would have happened without Loom.
  if (!gFatalDumped.exchange(true)) {
    registry.dumpAll(registry.dumpDir(), signalText(sig));
    // The faulting thread's native stack: a Python or torch job otherwise shows only the Python
    // line that called into Loom. backtrace() was warmed up when the handlers were installed,
    // so it does not load libgcc (or allocate) here.
    say("loom: ");
    say(signalText(sig));
    say("; native stack of the faulting thread:\n");
    void* frames[64];
    backtrace_symbols_fd(frames, backtrace(frames, 64), STDERR_FILENO);
  }
  ::sigaction(sig, &gPrevious[sig], nullptr);
  errno = savedErrno;
  if (sig == SIGABRT || sig == SIGFPE) ::raise(sig);
  // SIGSEGV, SIGBUS, SIGILL: returning re-runs the faulting instruction under the old handler.
}

}  // namespace

FlightRegistry& FlightRegistry::process() {
  // Never destroyed: a signal handler or a late communicator may reach it during exit.
  static FlightRegistry* registry = new FlightRegistry();
  return *registry;
}

void FlightRegistry::add(FlightRecorder& recorder) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (!configured_) {
    configured_ = true;
    const std::string dir = env::flightDir();
    std::strncpy(dumpDir_, dir.c_str(), sizeof(dumpDir_) - 1);
    if (dumpDir_[0] != '\0') installSignals();
  }
  for (auto& slot : slots_) {
    FlightRecorder* empty = nullptr;
    if (slot.compare_exchange_strong(empty, &recorder)) break;
  }
  if (live_++ == 0) startLocked();
}

void FlightRegistry::remove(FlightRecorder& recorder) {
  std::unique_ptr<StatusServer> stopped;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    for (auto& slot : slots_) {
      FlightRecorder* mine = &recorder;
      if (slot.compare_exchange_strong(mine, nullptr)) break;
    }
    if (--live_ == 0) stopped = std::move(status_);
  }
  stopped.reset();  // joins its thread (which may be inside forEach): outside the lock
  // A reader that loaded the pointer before it was cleared is done with it once it leaves.
  while (readers_.load() != 0) std::this_thread::yield();
}

int FlightRegistry::dumpAll(const char* dir, const char* reason) noexcept {
  int written = 0;
  forEach([&](const FlightRecorder& recorder) {
    if (recorder.dump(dir, reason)) ++written;
  });
  return written;
}

void FlightRegistry::startLocked() {
  if (!env::statusEnabled()) return;
  const std::string configured = env::statusDir();
  StatusServer::Handlers handlers;
  handlers.status = [this](FdWriter& out) {
    forEach([&](const FlightRecorder& recorder) { recorder.writeStatus(out); });
  };
  handlers.dump = [this](const char* dir) {
    return dumpAll(dir, "requested through the status socket");
  };
  // A rank that stops calling (a compute loop, a hang elsewhere) or exits without destroying its
  // communicator still leaves its trace up to its last second on disk.
  handlers.tick = [this] {
    forEach([](const FlightRecorder& recorder) { recorder.flushTrace(); });
  };
  status_ = StatusServer::start(statusDirectory(configured.c_str()), std::move(handlers));
}

void FlightRegistry::installSignals() {
  void* warm[1];
  backtrace(warm, 1);  // loads what backtrace() needs now, not inside a signal handler
  struct sigaction action {};
  action.sa_sigaction = onSignal;
  sigemptyset(&action.sa_mask);
  action.sa_flags = SA_RESTART | SA_SIGINFO;
  ::sigaction(SIGUSR2, &action, &gPrevious[SIGUSR2]);  // the previous handler still runs after
  for (int sig : kFatalSignals) {
    struct sigaction current {};
    if (::sigaction(sig, nullptr, &current) != 0) continue;
    // An ignored signal stays ignored; a handler of the application's runs after our dump.
    if ((current.sa_flags & SA_SIGINFO) == 0 && current.sa_handler == SIG_IGN) continue;
    gPrevious[sig] = current;
    ::sigaction(sig, &action, nullptr);
  }
}

}  // namespace loom
