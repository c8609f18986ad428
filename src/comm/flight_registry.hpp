// The process's flight recorders, for what must reach all of them at once: the dumps on a fatal
// signal or SIGUSR2 and loomCommDumpFlight(NULL) (into LOOM_FLIGHT_DIR), and the status socket
// (comm/status_server.hpp), which runs while the process has communicators.
//
// Process-wide by necessity (a signal handler has nothing else to start from): fixed slots of
// atomic pointers, read without locks. A recorder leaves only once no reader (a dump, a status
// reply, a signal handler on any thread) holds it.
//
// Signal handlers are installed with the first communicator, and only when LOOM_FLIGHT_DIR is
// set: SIGUSR2 dumps every communicator, then runs the handler it replaced (if any) and the
// process goes on; SIGSEGV, SIGBUS, SIGFPE, SIGILL and SIGABRT dump, then the previous handler (or
// the default action) runs.
#pragma once

#include <atomic>
#include <cstddef>
#include <memory>
#include <mutex>
#include <string>

#include "comm/flight_recorder.hpp"

namespace loom {

class StatusServer;

class FlightRegistry {
 public:
  static FlightRegistry& process();

  // A communicator's recorder, from its construction to its destruction. More than kSlots at once
  // are not registered (their dumps come only from their own failures).
  void add(FlightRecorder& recorder);
  void remove(FlightRecorder& recorder);
  // Dumps every registered recorder into `dir`; the number written. Signal-safe.
  int dumpAll(const char* dir, const char* reason) noexcept;
  // LOOM_FLIGHT_DIR as read with the first communicator ("" when unset).
  const char* dumpDir() const { return dumpDir_; }

  template <typename Visit>
  void forEach(Visit&& visit) {
    readers_.fetch_add(1);
    for (auto& slot : slots_) {
      FlightRecorder* recorder = slot.load();
      if (recorder != nullptr) visit(*recorder);
    }
    readers_.fetch_sub(1);
  }

 private:
  FlightRegistry() = default;
  void startLocked();
  void installSignals();

  static constexpr size_t kSlots = 1024;
  std::atomic<FlightRecorder*> slots_[kSlots] = {};
  std::atomic<int> readers_{0};
  std::mutex mutex_;
  int live_ = 0;
  bool configured_ = false;
  char dumpDir_[512] = {};
  std::unique_ptr<StatusServer> status_;
};

// A recorder's place in the process's registry for as long as this object lives. A member
// declared after the recorder leaves the registry first, also when the communicator's
// constructor throws (a recorder freed while registered was read by the status thread).
class FlightRegistration {
 public:
  explicit FlightRegistration(FlightRecorder& recorder) : recorder_(recorder) {
    FlightRegistry::process().add(recorder);
  }
  ~FlightRegistration() { FlightRegistry::process().remove(recorder_); }
  FlightRegistration(const FlightRegistration&) = delete;
  FlightRegistration& operator=(const FlightRegistration&) = delete;

 private:
  FlightRecorder& recorder_;
};

}  // namespace loom
