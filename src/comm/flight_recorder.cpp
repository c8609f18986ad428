#include "comm/flight_recorder.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>

#include "algorithms/context.hpp"
#include "base/dtype.hpp"
#include "base/wait.hpp"
#include "comm/trace.hpp"
#include "transport/shm/shm_arena.hpp"

// Dump format (version 1), one JSON object; each call on a line of its own, oldest first:
//   {"loom_flight":1,"job":"3fa2...","comm":"name","rank":2,"nranks":4,"host":"h","pid":123,
//    "reason":"...","dumped_ns":..,"realtime_offset_ns":..,"last_entered":17,"last_finished":16,
//    "capacity":1024,"calls":[
//   {"id":40,"seq":17,"kind":"collective","op":"allreduce","count":256,"dtype":"float32",
//    "redop":"sum","root":-1,"peer":-1,"tag":0,"bytes":1024,"algorithm":"ring","state":"started",
//    "queued_ns":..,"started_ns":..,"ended_ns":0,"result":0,"waiting_for":3},
//   ...]}
// Times are the host's steady clock in ns; realtime_offset_ns turns them into wall-clock time.

namespace loom {

namespace {

int64_t nowNs() { return static_cast<int64_t>(steadyNowNs()); }

int64_t realtimeOffsetNs() {
  timespec real{};
  clock_gettime(CLOCK_REALTIME, &real);
  const int64_t steady = nowNs();
  return (static_cast<int64_t>(real.tv_sec) * 1000000000 + real.tv_nsec) - steady;
}

// Appends `text` to the fixed buffer at `at` (kept NUL-terminated); signal-safe.
size_t append(char* buffer, size_t size, size_t at, const char* text) {
  while (*text != '\0' && at + 1 < size) buffer[at++] = *text++;
  buffer[at] = '\0';
  return at;
}

size_t appendInt(char* buffer, size_t size, size_t at, int64_t value) {
  char digits[24];
  int n = 0;
  uint64_t v = value < 0 ? 0 - static_cast<uint64_t>(value) : static_cast<uint64_t>(value);
  do {
    digits[n++] = static_cast<char>('0' + v % 10);
    v /= 10;
  } while (v != 0);
  if (value < 0) digits[n++] = '-';
  char text[24];
  for (int i = 0; i < n; ++i) text[i] = digits[n - 1 - i];
  text[n] = '\0';
  return append(buffer, size, at, text);
}

}  // namespace

const char* flightKindName(FlightKind kind) {
  switch (kind) {
    case FlightKind::kCollective:
      return "collective";
    case FlightKind::kSend:
      return "send";
    case FlightKind::kRecv:
      return "recv";
  }
  return "unknown";
}

const char* flightStateName(FlightState state) {
  switch (state) {
    case FlightState::kQueued:
      return "queued";
    case FlightState::kStarted:
      return "started";
    case FlightState::kDone:
      return "done";
    case FlightState::kFailed:
      return "failed";
  }
  return "unknown";
}

FlightCall collectiveCall(loomFunc_t func, size_t count, loomDataType_t dtype, loomRedOp_t op,
                          int root, size_t bytes, uint64_t seq, const char* algorithm) {
  FlightCall call;
  call.kind = FlightKind::kCollective;
  call.state = FlightState::kStarted;
  call.func = func;
  call.count = count;
  call.dtype = dtype;
  call.op = op;
  call.root = func == loomFuncBroadcast || func == loomFuncReduce || func == loomFuncGather ||
                      func == loomFuncScatter
                  ? root
                  : -1;
  call.bytes = bytes;
  call.seq = seq;
  call.algorithm = algorithm;
  return call;
}

FlightRecorder::FlightRecorder(size_t capacity, const FlightIdentity& identity)
    : identity_(identity),
      capacity_(std::max<size_t>(capacity, 1)),
      entries_(new Entry[capacity_]),
      wakeTraceEvery_(std::max<uint64_t>(capacity_ / 2, 1)) {}

FlightRecorder::~FlightRecorder() { traceTo(nullptr); }

void FlightRecorder::traceTo(Trace* trace) {
  if (trace_ != nullptr) {
    trace_->takeCallsFrom(nullptr);  // its writer no longer reads this ring
    traceFinished();
  }
  trace_ = trace;
  if (trace_ != nullptr) trace_->takeCallsFrom(this);
}

FlightRecorder::Entry& FlightRecorder::entryOf(uint64_t id) const {
  return entries_[(id - 1) % capacity_];
}

uint64_t FlightRecorder::begin(const FlightCall& call) {
  const uint64_t id = next_.fetch_add(1, std::memory_order_relaxed) + 1;
  Entry& e = entryOf(id);
  if (trace_ != nullptr) {
    if (id % wakeTraceEvery_ == 0) trace_->callsWaiting();
    if (id > capacity_) traceBeforeReuse(e, id - capacity_);
  }
  constexpr auto relaxed = std::memory_order_relaxed;
  e.id.store(0, relaxed);  // readers skip it while it is rewritten
  std::atomic_thread_fence(std::memory_order_release);
  const int64_t now = call.startedNs != 0 ? call.startedNs : nowNs();
  e.seq.store(call.seq, relaxed);
  e.count.store(call.count, relaxed);
  e.bytes.store(call.bytes, relaxed);
  e.tag.store(call.tag, relaxed);
  e.queuedNs.store(now, relaxed);
  e.startedNs.store(call.state == FlightState::kStarted ? now : 0, relaxed);
  e.endedNs.store(0, relaxed);
  e.algorithm.store(call.algorithm, relaxed);
  e.root.store(call.root, relaxed);
  e.peer.store(call.peer, relaxed);
  e.result.store(loomSuccess, relaxed);
  e.waitingFor.store(-1, relaxed);
  e.kind.store(static_cast<uint8_t>(call.kind), relaxed);
  e.state.store(static_cast<uint8_t>(call.state), relaxed);
  e.func.store(static_cast<uint8_t>(call.func), relaxed);
  e.dtype.store(static_cast<uint8_t>(call.dtype), relaxed);
  e.op.store(static_cast<uint8_t>(call.op), relaxed);
  e.id.store(id, std::memory_order_release);
  if (call.kind == FlightKind::kCollective && call.state == FlightState::kStarted) {
    current_.store(id, relaxed);
    waitingFor_.store(-1, relaxed);
    if (call.seq != 0) lastEntered_.store(call.seq, relaxed);
    if (published_ != nullptr && call.seq != 0) {
      published_->func.store(static_cast<uint32_t>(call.func), relaxed);
      published_->enteredNs.store(now, relaxed);
      published_->entered.store(call.seq, std::memory_order_release);
    }
  }
  return id;
}

void FlightRecorder::start(uint64_t id, uint64_t seq, const char* algorithm) {
  Entry& e = entryOf(id);
  constexpr auto relaxed = std::memory_order_relaxed;
  if (e.id.load(std::memory_order_acquire) != id) return;  // overwritten: the ring wrapped
  const int64_t now = nowNs();
  if (seq != 0) e.seq.store(seq, relaxed);
  if (algorithm != nullptr) e.algorithm.store(algorithm, relaxed);
  e.startedNs.store(now, relaxed);
  e.state.store(static_cast<uint8_t>(FlightState::kStarted), std::memory_order_release);
  if (e.kind.load(relaxed) != static_cast<uint8_t>(FlightKind::kCollective)) return;
  current_.store(id, relaxed);
  waitingFor_.store(-1, relaxed);
  const uint64_t number = e.seq.load(relaxed);
  lastEntered_.store(number, relaxed);
  if (published_ != nullptr) {
    published_->func.store(e.func.load(relaxed), relaxed);
    published_->enteredNs.store(now, relaxed);
    published_->entered.store(number, std::memory_order_release);
  }
}

void FlightRecorder::finish(uint64_t id, loomResult_t result) {
  Entry& e = entryOf(id);
  constexpr auto relaxed = std::memory_order_relaxed;
  if (e.id.load(std::memory_order_acquire) != id) return;
  const int64_t now = nowNs();
  const bool collective = e.kind.load(relaxed) == static_cast<uint8_t>(FlightKind::kCollective);
  if (collective && current_.load(relaxed) == id)
    e.waitingFor.store(waitingFor_.load(relaxed), relaxed);
  e.result.store(result, relaxed);
  e.endedNs.store(now, relaxed);
  if (e.startedNs.load(relaxed) == 0) e.startedNs.store(now, relaxed);
  e.state.store(
      static_cast<uint8_t>(result == loomSuccess ? FlightState::kDone : FlightState::kFailed),
      std::memory_order_release);
  if (collective && result == loomSuccess) {
    const uint64_t number = e.seq.load(relaxed);
    lastFinished_.store(number, relaxed);
    if (published_ != nullptr) published_->finished.store(number, std::memory_order_release);
  }
}

// The entry about to be rewritten: a finished call whose span the trace has not taken yet makes
// every finished call go to the trace now (about once per capacity_ calls).
void FlightRecorder::traceBeforeReuse(const Entry& e, uint64_t held) const {
  if (e.id.load(std::memory_order_acquire) != held ||
      e.traced.load(std::memory_order_relaxed) == held)
    return;
  const auto state = static_cast<FlightState>(e.state.load(std::memory_order_relaxed));
  if (state == FlightState::kDone || state == FlightState::kFailed) traceFinished();
}

// Hands the trace every finished call it has not had, oldest first. traceFrom_ moves past the
// calls handed over or gone; one still in flight stops it there, so later passes look again.
void FlightRecorder::traceFinished() const {
  std::lock_guard<std::mutex> lock(traceMutex_);
  const uint64_t last = next_.load(std::memory_order_acquire);
  // One id further back than forEach: the entry begin() is about to rewrite.
  uint64_t id = std::max(traceFrom_, last > capacity_ ? last - capacity_ : uint64_t{1});
  bool passed = true;  // every id before this one is handed over or gone
  FlightCall call;
  // Handed over in batches: one lock of the trace's pool per batch, not per call (on a 1 KiB
  // allreduce the per-call lock was a third of what the trace cost the calling thread).
  std::array<TraceEvent, 64> batch;
  size_t batched = 0;
  for (; id <= last; ++id) {
    Entry& e = entryOf(id);
    const uint64_t held = e.id.load(std::memory_order_acquire);
    bool done = held > id || e.traced.load(std::memory_order_relaxed) == id;  // gone or handed
    if (!done && held == id && read((id - 1) % capacity_, call) && call.id == id &&
        (call.state == FlightState::kDone || call.state == FlightState::kFailed)) {
      batch[batched++] = Trace::callEvent(call);
      if (batched == batch.size()) {
        trace_->add(batch.data(), batched);
        batched = 0;
      }
      e.traced.store(id, std::memory_order_relaxed);
      done = true;
    }
    // Not done: in flight, or its entry is being written.
    passed = passed && done;
    if (passed) traceFrom_ = id + 1;
  }
  if (batched > 0) trace_->add(batch.data(), batched);
}

void FlightRecorder::failInFlight(loomResult_t result) {
  const uint64_t last = next_.load(std::memory_order_acquire);
  const uint64_t first = last > capacity_ ? last - capacity_ + 1 : 1;
  for (uint64_t id = first; id <= last; ++id) {
    const Entry& e = entryOf(id);
    const auto state = static_cast<FlightState>(e.state.load(std::memory_order_acquire));
    if (state == FlightState::kQueued || state == FlightState::kStarted) finish(id, result);
  }
}

bool FlightRecorder::current(FlightCall& out) const {
  const uint64_t id = current_.load(std::memory_order_relaxed);
  return id != 0 && read((id - 1) % capacity_, out) && out.id == id &&
         out.state == FlightState::kStarted;
}

bool FlightRecorder::read(size_t slot, FlightCall& out) const {
  const Entry& e = entries_[slot];
  constexpr auto relaxed = std::memory_order_relaxed;
  const uint64_t id = e.id.load(std::memory_order_acquire);
  if (id == 0) return false;
  out.id = id;
  out.seq = e.seq.load(relaxed);
  out.count = e.count.load(relaxed);
  out.bytes = e.bytes.load(relaxed);
  out.tag = e.tag.load(relaxed);
  out.queuedNs = e.queuedNs.load(relaxed);
  out.startedNs = e.startedNs.load(relaxed);
  out.endedNs = e.endedNs.load(relaxed);
  out.algorithm = e.algorithm.load(relaxed);
  out.root = e.root.load(relaxed);
  out.peer = e.peer.load(relaxed);
  out.result = e.result.load(relaxed);
  out.kind = static_cast<FlightKind>(e.kind.load(relaxed));
  out.state = static_cast<FlightState>(e.state.load(relaxed));
  out.func = static_cast<loomFunc_t>(e.func.load(relaxed));
  out.dtype = static_cast<loomDataType_t>(e.dtype.load(relaxed));
  out.op = static_cast<loomRedOp_t>(e.op.load(relaxed));
  out.waitingFor = e.waitingFor.load(relaxed);
  // A call in flight on the caller's thread: the peer its health check last looked at.
  if (out.kind == FlightKind::kCollective && out.state == FlightState::kStarted &&
      current_.load(relaxed) == id)
    out.waitingFor = waitingFor_.load(relaxed);
  std::atomic_thread_fence(std::memory_order_acquire);
  return e.id.load(relaxed) == id;
}

namespace {

void writeCall(FdWriter& out, const FlightCall& c) {
  bool first = true;
  out.raw("{");
  out.key("id", first).uint(c.id);
  out.key("seq", first).uint(c.seq);
  out.key("kind", first).string(flightKindName(c.kind));
  out.key("op", first)
      .string(c.kind == FlightKind::kCollective ? funcName(c.func) : flightKindName(c.kind));
  out.key("count", first).uint(c.count);
  out.key("dtype", first).string(dtypeName(c.dtype));
  if (c.func == loomFuncAllReduce || c.func == loomFuncReduce || c.func == loomFuncReduceScatter)
    out.key("redop", first).string(opName(c.op));
  out.key("root", first).integer(c.root);
  out.key("peer", first).integer(c.peer);
  out.key("tag", first).integer(c.tag);
  out.key("bytes", first).uint(c.bytes);
  out.key("algorithm", first).string(c.algorithm);
  out.key("state", first).string(flightStateName(c.state));
  out.key("queued_ns", first).integer(c.queuedNs);
  out.key("started_ns", first).integer(c.startedNs);
  out.key("ended_ns", first).integer(c.endedNs);
  out.key("result", first).integer(c.result);
  out.key("waiting_for", first).integer(c.waitingFor);
  out.raw("}");
}

void writeIdentity(FdWriter& out, const FlightIdentity& id, bool& first) {
  out.key("job", first).string(id.job.c_str());
  out.key("comm", first).string(id.name.c_str());
  out.key("rank", first).integer(id.rank);
  out.key("nranks", first).integer(id.nranks);
  out.key("host", first).string(id.host.c_str());
  out.key("pid", first).integer(id.pid);
}

}  // namespace

void FlightRecorder::writeJson(FdWriter& out, const char* reason) const {
  bool first = true;
  out.raw("{");
  out.key("loom_flight", first).uint(1);
  writeIdentity(out, identity_, first);
  out.key("reason", first).string(reason);
  out.key("dumped_ns", first).integer(nowNs());
  out.key("realtime_offset_ns", first).integer(realtimeOffsetNs());
  out.key("last_entered", first).uint(lastEntered());
  out.key("last_finished", first).uint(lastFinished());
  out.key("capacity", first).uint(capacity_);
  out.raw(",\"calls\":[");
  bool firstCall = true;
  forEach([&](const FlightCall& c) {
    out.raw(firstCall ? "\n" : ",\n");
    firstCall = false;
    writeCall(out, c);
  });
  out.raw("]}\n");
}

void FlightRecorder::writeStatus(FdWriter& out) const {
  bool first = true;
  out.raw("{");
  writeIdentity(out, identity_, first);
  out.key("now_ns", first).integer(nowNs());
  out.key("last_entered", first).uint(lastEntered());
  out.key("last_finished", first).uint(lastFinished());
  out.raw(",\"in_flight\":[");
  bool firstCall = true;
  forEach([&](const FlightCall& c) {
    if (c.state != FlightState::kQueued && c.state != FlightState::kStarted) return;
    if (!firstCall) out.raw(",");
    firstCall = false;
    writeCall(out, c);
  });
  out.raw("]}\n");
}

void FlightRecorder::flushTrace() const {
  if (trace_ == nullptr) return;
  traceFinished();
  trace_->flush();
}

bool FlightRecorder::dump(const char* dir, const char* reason) const noexcept {
  if (dir == nullptr || dir[0] == '\0') return false;
  char path[768], temp[800];
  size_t at = append(path, sizeof(path), 0, dir);
  at = append(path, sizeof(path), at, "/loom-flight-");
  at = append(path, sizeof(path), at, identity_.job.c_str());
  at = append(path, sizeof(path), at, "-r");
  at = appendInt(path, sizeof(path), at, identity_.rank);
  append(path, sizeof(path), at, ".json");
  size_t t = append(temp, sizeof(temp), 0, path);
  t = append(temp, sizeof(temp), t, ".tmp.");
  appendInt(temp, sizeof(temp), t, getpid());
  ::mkdir(dir, 0755);  // one level, as LOOM_TRACE's; an existing directory is fine
  const int fd = ::open(temp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) return false;
  bool ok = false;
  {
    FdWriter out(fd);
    writeJson(out, reason);
    ok = out.flush();
  }
  ::close(fd);
  if (!ok || ::rename(temp, path) != 0) {
    ::unlink(temp);
    return false;
  }
  return true;
}

}  // namespace loom
