// The text of a LOOM_TRACE file (comm/trace.hpp): recorded spans as Chrome/Perfetto JSON events,
// formatted into one large buffer and written with write(2) a few hundred KiB at a time.
//
// Formatting, not recording, was most of a span's cost (FdWriter: a character at a time, a write(2)
// every 4 KiB): here the text that is the same for every event of a file (pid, comm, job) is made
// once and copied with memcpy, and numbers are written two digits at a time.
//
// One thread at a time (the trace's writer lock); nothing here is safe in a signal handler.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "comm/flight_recorder.hpp"

namespace loom {

// The tracks (Chrome "threads", tid) of a rank's process.
constexpr int kTrackCalls = 1, kTrackPointToPoint = 2, kTrackWaits = 3, kTrackDevice = 4;
constexpr int kTrackSendTo = 100000, kTrackRecvFrom = 200000, kTrackLocal = 300000,
              kTrackDeviceLane = 400000;

// One recorded span as the hot path stores it: fixed size, integers and static strings only.
struct TraceEvent {
  enum class Kind : uint8_t { kCall, kOperation, kWait, kDevice };
  int64_t startNs = 0, endNs = 0;
  uint64_t seq = 0, count = 0, bytes = 0;
  int64_t tag = 0;
  const char* text = nullptr;  // calls: the algorithm (null: none); others: the span's name
  int32_t peer = -1, result = 0, track = 0;
  Kind kind = Kind::kCall;
  uint8_t func = 0, dtype = 0, op = 0, flightKind = 0;
};

class TraceText {
 public:
  TraceText(int fd, const FlightIdentity& identity);
  TraceText(const TraceText&) = delete;
  TraceText& operator=(const TraceText&) = delete;

  // The array's opening: the process's name and sort index, the clock offset for the merge.
  void header(int64_t realtimeOffsetNs);
  // One span (and its track's name, the first time the track appears).
  void event(const TraceEvent& e);
  // The closing marker and bracket (strict JSON readers need them).
  void end(int64_t nowNs);
  // Writes what is formatted; false once a write failed (the rest is then dropped).
  bool flush();

 private:
  void reserve(size_t n);
  void append(const char* text, size_t n);
  void append(const std::string& text) { append(text.data(), text.size()); }
  void literal(const char* text);  // a constant of this file's, no escaping
  void string(const char* s);      // quoted and escaped; null as ""
  void uint(uint64_t v);
  void integer(int64_t v);
  void micros(int64_t ns);
  void trackName(int track);
  void callArgs(const TraceEvent& e);

  int fd_;
  FlightIdentity identity_;
  std::unique_ptr<char[]> buffer_;
  size_t capacity_, used_ = 0;
  bool failed_ = false;
  std::string pidTid_;    // ,"ph":"X","pid":P,"tid":
  std::string callTail_;  // ,"comm":"C","job":"J","result":
  std::vector<int> namedTracks_;
};

}  // namespace loom
