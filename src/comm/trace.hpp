// LOOM_TRACE=DIR: a Chrome/Perfetto trace (JSON array format) of one communicator on one rank,
// DIR/loom-trace-<job>-r<rank>-p<pid>.json. Tracks (Chrome "threads" of the rank's process):
//   collectives        each collective from its start to its end (op, bytes, count, dtype, redop,
//                      algorithm, communicator, call number, result)
//   point-to-point     each send and receive (peer, tag, bytes)
//   send to R, recv from R, local N, device lane
//                      each operation of an executor-run schedule, from its first step to its end
//   waits              each wait of the executor's progress loop longer than LOOM_TRACE_WAIT_US,
//                      with a peer it still waited for
//   device             device-side spans of a backend's kernels (events around them; CUDA)
// scripts/loom_trace_merge.py merges every rank's files into one, a process per rank.
//
// Events are kept as fixed-size records and formatted into the file in batches (when a batch
// fills, at destroy, and before a flight-recorder dump), so the cost per call is a lock, a few
// stores and, amortized, the formatting. The file is valid without its closing bracket (the JSON
// array format allows it), so a crash loses at most the last batch.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "comm/flight_recorder.hpp"
#include "device/native.hpp"
#include "exec/executor.hpp"

namespace loom {

class Trace final : public ExecObserver, public DeviceTimeline {
 public:
  // Opens the trace file in `dir` (created if missing); null with a warning when it cannot.
  static std::unique_ptr<Trace> open(const std::string& dir, const FlightIdentity& identity,
                                     int64_t waitThresholdNs);
  ~Trace();
  Trace(const Trace&) = delete;
  Trace& operator=(const Trace&) = delete;

  // A finished call (the flight recorder reports each one).
  void call(const FlightCall& call);
  void operation(const ScheduleOp& op, const ScheduleLane& lane, int64_t startNs,
                 int64_t endNs) override;
  void waited(int64_t startNs, int64_t endNs, int peer) override;
  int64_t waitThresholdNs() const override { return waitThresholdNs_; }
  void deviceSpan(const char* name, uint64_t call, int64_t startNs, int64_t endNs) override;
  // Writes what is buffered.
  void flush();
  const std::string& path() const { return path_; }

 private:
  enum class Kind : uint8_t { kCall, kOperation, kWait, kDevice };
  struct Event {
    int64_t startNs = 0, endNs = 0;
    uint64_t seq = 0, count = 0, bytes = 0;
    int64_t tag = 0;
    const char* name = nullptr;
    const char* algorithm = nullptr;
    int32_t peer = -1, result = 0, track = 0;
    Kind kind = Kind::kCall;
    uint8_t func = 0, dtype = 0, op = 0, flightKind = 0;
  };
  Trace(int fd, std::string path, const FlightIdentity& identity, int64_t waitThresholdNs);
  void add(const Event& event);
  void writeLocked();
  void writeHeader();
  int trackOf(const ScheduleLane& lane);

  int fd_;
  std::string path_;
  FlightIdentity identity_;
  int64_t waitThresholdNs_;
  std::mutex mutex_;
  std::vector<Event> events_;     // capacity kept: no allocation once warm
  std::vector<int> namedTracks_;  // tracks whose name was written
};

}  // namespace loom
