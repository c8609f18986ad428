// The flight recorder of one communicator: its last N calls (collectives, sends and receives) in a
// fixed ring, always on, as PyTorch's flight recorder keeps them per process group. Each entry
// holds the call's number, op, count, bytes, dtype, peer or root, algorithm, state (queued,
// started, done, failed), the peer its last wait was for, and its timestamps.
//
// Nothing is allocated per call: the ring is allocated once. Every field is an atomic written
// relaxed (plain stores on x86), so a reader on another thread or in a signal handler (the dumps,
// comm/flight_registry.hpp; the status socket, comm/status_server.hpp) never races; an entry
// being rewritten while it is read is skipped (its id changes under the reader).
//
// Dumps are JSON (one call per line), written with FdWriter only: safe in a signal handler.
// `loom-info --flight DIR` reads every rank's dump and says what happened (tools/flight_report.*).
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>

#include "base/fd_writer.hpp"
#include "loom/loom.h"

namespace loom {

struct CallProgress;  // transport/shm/shm_arena.hpp: what a rank's peers on its host see of it
class Trace;          // comm/trace.hpp

enum class FlightKind : uint8_t { kCollective = 0, kSend = 1, kRecv = 2 };
enum class FlightState : uint8_t { kQueued = 0, kStarted = 1, kDone = 2, kFailed = 3 };
const char* flightKindName(FlightKind kind);
const char* flightStateName(FlightState state);

// One call as the recorder keeps it.
struct FlightCall {
  uint64_t id = 0;   // the recorder's own number, from 1, in the order calls began on this rank
  uint64_t seq = 0;  // collectives: the call's number on the communicator (the same on every rank;
                     // 0 while a stream-ordered call waits for its turn); sends and receives: the
                     // n-th point-to-point operation of this rank
  FlightKind kind = FlightKind::kCollective;
  FlightState state = FlightState::kQueued;
  loomFunc_t func = loomFuncAllReduce;
  loomDataType_t dtype = loomFloat32;
  loomRedOp_t op = loomSum;
  int32_t root = -1;  // rooted collectives
  int32_t peer = -1;  // sends and receives (-2: any source)
  int64_t tag = 0;
  uint64_t count = 0;               // elements, as the C API received them
  uint64_t bytes = 0;               // this rank's bytes (the larger of what it sends and receives)
  const char* algorithm = nullptr;  // a static name (the selector's), or null
  int64_t queuedNs = 0, startedNs = 0, endedNs = 0;  // steady clock; 0: not (yet)
  int32_t result = loomSuccess;                      // failed calls: why
  int32_t waitingFor = -1;  // started calls: the peer its last wait was for (-1: none known)
};

// Who the recorder belongs to; the same job id on every rank of the communicator.
struct FlightIdentity {
  std::string name;  // the communicator's name (config), may be empty
  std::string job;   // 16 hex digits shared by the communicator's ranks
  std::string host;
  int rank = 0;
  int nranks = 1;
  int pid = 0;
};

class FlightRecorder {
 public:
  FlightRecorder(size_t capacity, const FlightIdentity& identity);
  ~FlightRecorder();
  FlightRecorder(const FlightRecorder&) = delete;
  FlightRecorder& operator=(const FlightRecorder&) = delete;

  // A call begins (state as given, usually queued or started; at call.startedNs when the caller
  // has read the clock already, else now); returns its id for the updates.
  uint64_t begin(const FlightCall& call);
  // It starts running: its number (collectives whose number is taken late; 0 keeps it) and
  // algorithm (null keeps it).
  void start(uint64_t id, uint64_t seq, const char* algorithm);
  // It ended: done on loomSuccess, else failed with that result.
  void finish(uint64_t id, loomResult_t result);
  // The collective in flight waits for `peer` (the health check's argument; -1: none in
  // particular). Cheap: one relaxed store.
  void waitingFor(int peer) { waitingFor_.store(peer, std::memory_order_relaxed); }
  // Every call still queued or started is failed with `result` (the communicator failed).
  void failInFlight(loomResult_t result);
  // Where the last collective entered and finished are published for the peers on this host.
  void publishTo(CallProgress* progress) { published_ = progress; }
  // Every finished call also goes to `trace` as a span (LOOM_TRACE; null: none), read from this
  // ring, not recorded twice: by the trace's writer thread, which begin() wakes every half turn
  // of the ring, so that the calling thread seldom pays for a span; by begin() itself when it is
  // about to rewrite an entry whose span was not taken yet (the writer fell behind); at
  // flushTrace(); and at the recorder's end (so `trace` must outlive the recorder, or be detached
  // with traceTo(nullptr) first). A call whose entry is rewritten while it is still in flight
  // (LOOM_FLIGHT_ENTRIES later calls) has no span, as it has no entry.
  void traceTo(Trace* trace);
  // Hands the trace every finished call it has not had yet (its writer thread calls this).
  void traceFinished() const;
  // The calls finished since the last time, and the trace's other spans, to its file (LOOM_TRACE;
  // else nothing). Not signal-safe.
  void flushTrace() const;

  // The collective in flight on the caller's thread, if any (for timeout messages).
  bool current(FlightCall& out) const;

  const FlightIdentity& identity() const { return identity_; }
  uint64_t lastEntered() const { return lastEntered_.load(std::memory_order_relaxed); }
  uint64_t lastFinished() const { return lastFinished_.load(std::memory_order_relaxed); }
  size_t capacity() const { return capacity_; }

  // The entries still held, oldest first, each read consistently (skipped when being rewritten).
  // Safe in a signal handler; visit(const FlightCall&) must be too.
  template <typename Visit>
  void forEach(Visit&& visit) const;

  // The whole record as JSON (flight_recorder.cpp has the format). Signal-safe.
  void writeJson(FdWriter& out, const char* reason) const;
  // A one-line JSON summary for the status socket: identity, last entered and finished, and the
  // calls in flight. Signal-safe (not used from handlers).
  void writeStatus(FdWriter& out) const;
  // Writes writeJson into dir/loom-flight-<job>-r<rank>.json (through a temporary file, renamed).
  // Signal-safe; false when the file could not be written.
  bool dump(const char* dir, const char* reason) const noexcept;

 private:
  struct Entry;
  bool read(size_t slot, FlightCall& out) const;
  Entry& entryOf(uint64_t id) const;
  void traceBeforeReuse(const Entry& e, uint64_t held) const;

  FlightIdentity identity_;  // never changes: signal handlers read its strings
  size_t capacity_;
  std::unique_ptr<Entry[]> entries_;
  std::atomic<uint64_t> next_{0};  // ids handed out
  std::atomic<uint64_t> lastEntered_{0}, lastFinished_{0};
  std::atomic<uint64_t> current_{0};  // id of the collective in flight on the caller's thread
  std::atomic<int32_t> waitingFor_{-1};
  CallProgress* published_ = nullptr;
  Trace* trace_ = nullptr;
  uint64_t wakeTraceEvery_;         // calls between two wakes of the trace's writer: half a turn
  mutable std::mutex traceMutex_;   // one thread at a time hands spans over; traceFrom_
  mutable uint64_t traceFrom_ = 1;  // every call before it was handed over or is gone
};

struct FlightRecorder::Entry {
  std::atomic<uint64_t> id{0};  // 0 while written
  std::atomic<uint64_t> seq{0}, count{0}, bytes{0};
  std::atomic<int64_t> tag{0}, queuedNs{0}, startedNs{0}, endedNs{0};
  std::atomic<const char*> algorithm{nullptr};
  std::atomic<int32_t> root{-1}, peer{-1}, result{0}, waitingFor{-1};
  std::atomic<uint8_t> kind{0}, state{0}, func{0}, dtype{0}, op{0};
  std::atomic<uint64_t> traced{0};  // LOOM_TRACE: the id whose span was handed to the trace
};

template <typename Visit>
void FlightRecorder::forEach(Visit&& visit) const {
  const uint64_t last = next_.load(std::memory_order_acquire);
  const uint64_t first = last > capacity_ ? last - capacity_ + 1 : 1;
  FlightCall call;
  for (uint64_t id = first; id <= last; ++id)
    if (read((id - 1) % capacity_, call) && call.id == id) visit(call);
}

// Records one call on a recorder for the length of a scope: begun by start() (the call's number
// and algorithm are known only inside the communicator's failure guard), done by done(); a scope
// left by an exception after start() records the call failed with the communicator's error.
class FlightScope {
 public:
  FlightScope(FlightRecorder& recorder, const std::atomic<loomResult_t>& error)
      : recorder_(recorder), error_(error) {}
  ~FlightScope() {
    if (id_ != 0) {
      const loomResult_t e = error_.load(std::memory_order_relaxed);
      recorder_.finish(id_, e == loomSuccess ? loomInternalError : e);
    }
  }
  FlightScope(const FlightScope&) = delete;
  FlightScope& operator=(const FlightScope&) = delete;
  void start(const FlightCall& call) { id_ = recorder_.begin(call); }
  void done() {
    if (id_ != 0) recorder_.finish(id_, loomSuccess);
    id_ = 0;
  }
  uint64_t id() const { return id_; }

 private:
  FlightRecorder& recorder_;
  const std::atomic<loomResult_t>& error_;
  uint64_t id_ = 0;
};

// The entry of a collective about to run (kind, op, sizes, algorithm), started now.
FlightCall collectiveCall(loomFunc_t func, size_t count, loomDataType_t dtype, loomRedOp_t op,
                          int root, size_t bytes, uint64_t seq, const char* algorithm);

}  // namespace loom
