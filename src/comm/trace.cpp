#include "comm/trace.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <ctime>
#include <utility>

#include "base/log.hpp"
#include "base/wait.hpp"

namespace loom {

namespace {

int trackOf(const ScheduleLane& lane) {
  switch (lane.kind) {
    case LaneKind::kSendTo:
      return kTrackSendTo + lane.peer;
    case LaneKind::kRecvFrom:
      return kTrackRecvFrom + lane.peer;
    case LaneKind::kLocal:
      return kTrackLocal + std::max(lane.peer, 0);
    case LaneKind::kDevice:
      return kTrackDeviceLane;
  }
  return kTrackLocal;
}

}  // namespace

std::unique_ptr<Trace> Trace::open(const std::string& dir, const FlightIdentity& identity,
                                   int64_t waitThresholdNs) {
  ::mkdir(dir.c_str(), 0755);  // one level; an existing directory is fine
  const std::string path = dir + "/loom-trace-" + identity.job + "-r" +
                           std::to_string(identity.rank) + "-p" + std::to_string(identity.pid) +
                           ".json";
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) {
    LOOM_WARN(kSubsysInit, identity.rank, "LOOM_TRACE: cannot write ", path, ": ",
              std::strerror(errno), "; this communicator is not traced");
    return nullptr;
  }
  return std::unique_ptr<Trace>(new Trace(fd, path, identity, waitThresholdNs));
}

Trace::Trace(int fd, std::string path, const FlightIdentity& identity, int64_t waitThresholdNs)
    : fd_(fd), path_(std::move(path)), waitThresholdNs_(waitThresholdNs), text_(fd, identity) {
  full_.reserve(kMaxChunks);
  spare_.reserve(kMaxChunks);
  writing_.reserve(kMaxChunks);
  // Two chunks now: the first chunk filled is handed on without an allocation on the caller.
  filling_ = std::make_unique<Chunk>();
  spare_.push_back(std::make_unique<Chunk>());
  chunks_ = 2;
  timespec real{};
  clock_gettime(CLOCK_REALTIME, &real);
  const int64_t offset = (static_cast<int64_t>(real.tv_sec) * 1000000000 + real.tv_nsec) -
                         static_cast<int64_t>(steadyNowNs());
  text_.header(offset);
  text_.flush();
  writer_ = std::thread([this] { writerLoop(); });
}

Trace::~Trace() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  writerWake_.notify_one();
  writer_.join();
  write(Write::kEverything);
  text_.end(static_cast<int64_t>(steadyNowNs()));
  text_.flush();
  ::close(fd_);
}

void Trace::add(const TraceEvent* events, size_t n) {
  std::unique_lock<std::mutex> lock(mutex_);
  bool wake = false;
  for (size_t i = 0; i < n; ++i) {
    if (filling_->used == kChunkEvents) {
      while (!handOnFillingLocked(full_)) {
        // The pool is at its cap (spans come faster than the writer writes them): this thread
        // writes the oldest chunk. Never drops a span; waits at most for another writer.
        lock.unlock();
        write(Write::kOldestChunk);
        lock.lock();
      }
      if (writerAsleep_ && full_.size() >= kWakeChunks) {
        writerAsleep_ = false;
        wake = true;
      }
    }
    filling_->events[filling_->used++] = events[i];
  }
  lock.unlock();
  if (wake) writerWake_.notify_one();
}

void Trace::takeCallsFrom(const FlightRecorder* calls) {
  std::lock_guard<std::mutex> lock(callsMutex_);
  calls_ = calls;
}

void Trace::callsWaiting() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    callsWaiting_ = true;
    if (!writerAsleep_) return;  // it looks again before it sleeps
    writerAsleep_ = false;
  }
  writerWake_.notify_one();
}

void Trace::writerLoop() {
  std::unique_lock<std::mutex> lock(mutex_);
  for (;;) {
    writerAsleep_ = true;
    writerWake_.wait(lock, [this] {
      return stopping_ || !writerAsleep_ || callsWaiting_ || full_.size() >= kWakeChunks;
    });
    if (stopping_) return;
    writerAsleep_ = false;
    const bool takeCalls = std::exchange(callsWaiting_, false);
    lock.unlock();
    if (takeCalls) {
      std::lock_guard<std::mutex> reading(callsMutex_);
      if (calls_ != nullptr) calls_->traceFinished();
    }
    write(Write::kFullChunks);
    lock.lock();
  }
}

// The chunk filling moves to `into` and a spare one (or a new one, below the cap) takes its
// place; false, moving nothing, when the pool is at its cap without a spare.
bool Trace::handOnFillingLocked(std::vector<ChunkPtr>& into) {
  if (spare_.empty()) {
    if (chunks_ == kMaxChunks) return false;
    spare_.push_back(std::make_unique<Chunk>());
    ++chunks_;
  }
  into.push_back(std::move(filling_));
  filling_ = std::move(spare_.back());
  spare_.pop_back();
  return true;
}

void Trace::write(Write what) {
  std::lock_guard<std::mutex> writing(writeMutex_);
  for (;;) {
    const bool taken = takeChunks(what);
    // Formatted without the chunks' lock: recording goes on meanwhile.
    for (const ChunkPtr& chunk : writing_)
      for (size_t i = 0; i < chunk->used; ++i) text_.event(chunk->events[i]);
    text_.flush();
    {
      std::lock_guard<std::mutex> lock(mutex_);
      for (ChunkPtr& chunk : writing_) {
        chunk->used = 0;
        spare_.push_back(std::move(chunk));
      }
    }
    writing_.clear();
    if (taken) return;
  }
}

// Moves the chunks to write into writing_: the oldest full one, every full one, or every full one
// and the one filling. False when the one filling had to stay (no chunk to replace it: write the
// full ones and come again).
bool Trace::takeChunks(Write what) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (what == Write::kOldestChunk) {
    if (!full_.empty()) {
      writing_.push_back(std::move(full_.front()));
      full_.erase(full_.begin());
    }
    return true;
  }
  for (ChunkPtr& chunk : full_) writing_.push_back(std::move(chunk));
  full_.clear();
  return what == Write::kFullChunks || filling_->used == 0 || handOnFillingLocked(writing_);
}

TraceEvent Trace::callEvent(const FlightCall& c) {
  TraceEvent e;
  e.kind = TraceEvent::Kind::kCall;
  e.startNs = c.startedNs != 0 ? c.startedNs : c.queuedNs;
  e.endNs = c.endedNs;
  e.seq = c.seq;
  e.count = c.count;
  e.bytes = c.bytes;
  e.tag = c.tag;
  e.text = c.algorithm;
  e.peer = c.peer;
  e.result = c.result;
  e.func = static_cast<uint8_t>(c.func);
  e.dtype = static_cast<uint8_t>(c.dtype);
  e.op = static_cast<uint8_t>(c.op);
  e.flightKind = static_cast<uint8_t>(c.kind);
  e.track = c.kind == FlightKind::kCollective ? kTrackCalls : kTrackPointToPoint;
  return e;
}

void Trace::operation(const ScheduleOp& op, const ScheduleLane& lane, int64_t startNs,
                      int64_t endNs) {
  TraceEvent e;
  e.kind = TraceEvent::Kind::kOperation;
  e.startNs = startNs;
  e.endNs = endNs;
  e.text = opKindName(op.kind);
  e.bytes = op.bytes;
  e.peer = op.peer;
  e.track = trackOf(lane);
  add(e);
}

void Trace::waited(int64_t startNs, int64_t endNs, int peer) {
  TraceEvent e;
  e.kind = TraceEvent::Kind::kWait;
  e.startNs = startNs;
  e.endNs = endNs;
  e.text = "wait";
  e.peer = peer;
  e.track = kTrackWaits;
  add(e);
}

void Trace::deviceSpan(const char* name, uint64_t call, int64_t startNs, int64_t endNs) {
  TraceEvent e;
  e.kind = TraceEvent::Kind::kDevice;
  e.startNs = startNs;
  e.endNs = endNs;
  e.text = name;
  e.seq = call;
  e.track = kTrackDevice;
  add(e);
}

}  // namespace loom
