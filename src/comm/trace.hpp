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
// Call spans are not recorded here: the flight recorder keeps every call anyway, and the trace's
// writer thread takes its finished calls from its ring, woken by the recorder every half turn of
// the ring (flight_recorder.hpp: traceTo); the calling thread pays for a call's span only when
// the writer falls a whole turn behind. The executor's and the device's
// spans are recorded as one fixed-size TraceEvent each, stored into a chunk of a small pool under
// a lock held for a few stores; no text, no allocation once the pool is warm. The JSON text
// (trace_text.hpp) is made later, in batches: by the trace's own writer thread as soon as
// kWakeChunks chunks are full, by the status thread about once a second (every span held), when a
// call fails, at destroy, and by a recording thread only when the pool is at its cap (the writer
// fell behind: it then writes the oldest chunk itself, so nothing is dropped and nothing waits on
// a thread that may be starved of CPU). The file is valid without its closing bracket (the JSON
// array format allows it), so a crash loses at most what was held since the last write.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "comm/flight_recorder.hpp"
#include "comm/trace_text.hpp"
#include "device/native.hpp"
#include "exec/executor.hpp"

namespace loom {

class Trace final : public ExecObserver, public DeviceTimeline {
 public:
  // Small chunks: a recording thread that writes one when the pool is full stops for ~70 us, not
  // for the ~0.5 ms of 4096 spans, which made its peers' waits sleep (1 KiB allreduce, 8 ranks on 2
  // cores, 20,000 calls: 1.4x with the trace; 1.03-1.2x with these).
  static constexpr size_t kChunkEvents = 512;  // 40 KiB of TraceEvent
  static constexpr size_t kMaxChunks = 64;     // the cap: 32,768 spans between two writes
  // Full chunks that wake the writer thread. Without it a 1 KiB allreduce (~3.3 us, 8 ranks on a
  // core each) filled the pool ten times a second between the status thread's ticks, and the
  // calling threads formatted most spans themselves: 1.04-1.07x the time without the trace.
  static constexpr size_t kWakeChunks = 4;
  // Opens the trace file in `dir` (created if missing); null with a warning when it cannot.
  static std::unique_ptr<Trace> open(const std::string& dir, const FlightIdentity& identity,
                                     int64_t waitThresholdNs);
  ~Trace();
  Trace(const Trace&) = delete;
  Trace& operator=(const Trace&) = delete;

  // Finished calls (the flight recorder hands them over a batch at a time, one lock a batch).
  static TraceEvent callEvent(const FlightCall& call);
  void add(const TraceEvent* events, size_t n);
  // The recorder whose finished calls the writer thread takes when callsWaiting() wakes it (null:
  // none; returns once the writer no longer reads the previous one).
  void takeCallsFrom(const FlightRecorder* calls);
  void callsWaiting();
  void operation(const ScheduleOp& op, const ScheduleLane& lane, int64_t startNs,
                 int64_t endNs) override;
  void waited(int64_t startNs, int64_t endNs, int peer) override;
  int64_t waitThresholdNs() const override { return waitThresholdNs_; }
  void deviceSpan(const char* name, uint64_t call, int64_t startNs, int64_t endNs) override;
  // Writes every span recorded so far into the file.
  void flush() { write(Write::kEverything); }
  const std::string& path() const { return path_; }

 private:
  struct Chunk {
    size_t used = 0;
    TraceEvent events[kChunkEvents];
  };
  using ChunkPtr = std::unique_ptr<Chunk>;

  Trace(int fd, std::string path, const FlightIdentity& identity, int64_t waitThresholdNs);
  void add(const TraceEvent& event) { add(&event, 1); }
  bool handOnFillingLocked(std::vector<ChunkPtr>& into);
  enum class Write { kOldestChunk, kFullChunks, kEverything };
  // Formats and writes the chunks `what` names, oldest first.
  void write(Write what);
  bool takeChunks(Write what);
  void writerLoop();

  int fd_;
  std::string path_;
  int64_t waitThresholdNs_;
  std::mutex mutex_;  // the chunks: filling_, full_, spare_, chunks_; stopping_
  ChunkPtr filling_;
  std::vector<ChunkPtr> full_;   // oldest first; every vector here reserved for kMaxChunks
  std::vector<ChunkPtr> spare_;  // empty, ready to fill
  size_t chunks_ = 0;            // allocated, at most kMaxChunks
  std::mutex writeMutex_;        // one writer at a time, so the file keeps the recording order;
                                 // writing_ and text_
  std::vector<ChunkPtr> writing_;
  TraceText text_;
  std::condition_variable writerWake_;  // kWakeChunks full, callsWaiting_, or stopping_
  bool writerAsleep_ = false;           // notify only then: a recording thread seldom pays for it
  bool callsWaiting_ = false;
  std::mutex callsMutex_;  // calls_, held by the writer while it takes calls
  const FlightRecorder* calls_ = nullptr;
  bool stopping_ = false;
  std::thread writer_;  // last: starts once everything above exists
};

}  // namespace loom
