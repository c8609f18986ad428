// LOOM_TRACE's bookkeeping: every finished call of the flight recorder reaches the trace (its
// writer takes them, the caller at the ring's wrap when the writer fell behind), and a full pool
// of spans is written, not dropped (comm/trace.hpp).
#include "comm/trace.hpp"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <chrono>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <thread>

#include "comm/flight_recorder.hpp"
#include "json_reader.hpp"

namespace loom {
namespace {

using tool::Json;

FlightIdentity traceIdentity() {
  FlightIdentity id;
  id.name = "grp";
  id.job = "00000000000000cd";
  id.host = "hostA";
  id.rank = 0;
  id.nranks = 2;
  id.pid = 2000;
  return id;
}

std::string traceDir() {
  char pattern[] = "/tmp/loom-trace-test-XXXXXX";
  return mkdtemp(pattern);
}

// The events of a closed trace file.
std::vector<Json> eventsOf(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  const Json events = Json::parse(text.str());
  return events.items();
}

// A call whose entry is rewritten after it finished reaches the trace all the same, and one that
// finished after later calls (a receive posted early) too, once each.
TEST(TraceFromTheRecorder, EveryFinishedCallThroughTheRingsWraps) {
  const std::string dir = traceDir();
  std::string path;
  {
    std::unique_ptr<Trace> trace = Trace::open(dir, traceIdentity(), 0);
    ASSERT_NE(trace, nullptr);
    path = trace->path();
    FlightRecorder r(4, traceIdentity());  // after the trace: hands it its last calls at its end
    r.traceTo(trace.get());
    auto call = [](uint64_t seq) {
      return collectiveCall(loomFuncAllReduce, 8, loomFloat32, loomSum, -1, 32, seq, "direct");
    };
    for (uint64_t seq = 1; seq <= 10; ++seq) r.finish(r.begin(call(seq)), loomSuccess);
    const uint64_t late = r.begin(call(11));
    r.finish(r.begin(call(12)), loomSuccess);
    r.flushTrace();  // 11 in flight: the status thread's pass goes past it, and comes back
    r.finish(r.begin(call(13)), loomSuccess);
    r.finish(late, loomSuccess);
    for (uint64_t seq = 14; seq <= 17; ++seq) r.finish(r.begin(call(seq)), loomSuccess);
    const uint64_t failed = r.begin(call(18));
    r.failInFlight(loomTimeout);
    (void)failed;
  }
  std::map<int64_t, int> seen;
  std::string lastResult;
  for (const Json& e : eventsOf(path)) {
    if (e["ph"].str() != "X" || e["cat"].str() != "call") continue;
    ++seen[e["args"]["seq"].integer()];
    if (e["args"]["seq"].integer() == 18) lastResult = e["args"]["result"].str();
  }
  ASSERT_EQ(seen.size(), 18u);
  for (const auto& [seq, times] : seen) EXPECT_EQ(times, 1) << "call " << seq;
  EXPECT_EQ(seen.begin()->first, 1);
  EXPECT_EQ(lastResult, loomGetErrorString(loomTimeout));
  std::system(("rm -rf " + dir).c_str());
}

// More spans than the pool holds, with no status thread to write them: the recording thread
// writes the oldest chunks itself and every span is in the file.
TEST(Trace, WritesEverySpanWhenItsPoolIsFull) {
  const std::string dir = traceDir();
  const size_t spans = Trace::kMaxChunks * Trace::kChunkEvents + Trace::kChunkEvents / 2 + 3;
  std::string path;
  {
    std::unique_ptr<Trace> trace = Trace::open(dir, traceIdentity(), 0);
    ASSERT_NE(trace, nullptr);
    path = trace->path();
    ScheduleOp op;
    op.kind = OpKind::kRecv;
    op.peer = 1;
    ScheduleLane lane;
    lane.kind = LaneKind::kRecvFrom;
    lane.peer = 1;
    for (size_t i = 0; i < spans; ++i) {
      op.bytes = i;
      trace->operation(op, lane, static_cast<int64_t>(10 * i), static_cast<int64_t>(10 * i + 5));
    }
  }
  size_t lanes = 0;
  int64_t bytesSum = 0;
  for (const Json& e : eventsOf(path)) {
    if (e["ph"].str() != "X" || e["cat"].str() != "lane") continue;
    ++lanes;
    bytesSum += e["args"]["bytes"].integer();
  }
  EXPECT_EQ(lanes, spans);
  EXPECT_EQ(bytesSum, static_cast<int64_t>(spans * (spans - 1) / 2));  // each once, none torn
  std::system(("rm -rf " + dir).c_str());
}

// Spans beyond kWakeChunks full chunks reach the file while the trace lives, with no status thread
// and no flush: its writer thread writes them, not the threads that record (before, those spans
// waited for the status thread's tick, and a busy rank formatted them itself at the pool's cap).
// How many times `needle` is in the file at `path` once it holds `expected` of them, or after two
// minutes: bounded, not timed (the writer thread may be scheduled late on a busy machine).
size_t writtenSoon(const std::string& path, const std::string& needle, size_t expected) {
  auto count = [&] {
    std::ifstream in(path);
    std::stringstream text;
    text << in.rdbuf();
    const std::string all = text.str();
    size_t n = 0;
    for (size_t at = 0; (at = all.find(needle, at)) != std::string::npos; ++at) ++n;
    return n;
  };
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
  size_t n = count();
  while (n < expected && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    n = count();
  }
  return n;
}

TEST(Trace, ItsWriterWritesFullChunksWithoutAFlush) {
  const std::string dir = traceDir();
  const size_t spans = (Trace::kWakeChunks + 1) * Trace::kChunkEvents;
  std::unique_ptr<Trace> trace = Trace::open(dir, traceIdentity(), 0);
  ASSERT_NE(trace, nullptr);
  ScheduleOp op;
  op.kind = OpKind::kSend;
  ScheduleLane lane;
  lane.kind = LaneKind::kSendTo;
  for (size_t i = 0; i < spans; ++i)
    trace->operation(op, lane, static_cast<int64_t>(i), static_cast<int64_t>(i + 1));
  EXPECT_GE(
      writtenSoon(trace->path(), "\"cat\":\"lane\"", Trace::kWakeChunks * Trace::kChunkEvents),
      Trace::kWakeChunks * Trace::kChunkEvents);
  trace.reset();
  std::system(("rm -rf " + dir).c_str());
}

// The writer thread takes the finished calls from the recorder's ring every half turn, so the
// calling thread does not (before, the caller handed them over at the ring's wrap: with a ring
// that never wraps here, nothing reached the file before a flush).
TEST(Trace, ItsWriterTakesFinishedCallsFromTheRecorder) {
  const std::string dir = traceDir();
  std::unique_ptr<Trace> trace = Trace::open(dir, traceIdentity(), 0);
  ASSERT_NE(trace, nullptr);
  const size_t capacity = size_t{1} << 15;
  FlightRecorder recorder(capacity, traceIdentity());
  recorder.traceTo(trace.get());
  const size_t calls = capacity / 2 + 8;  // one wake, no wrap
  for (size_t i = 1; i <= calls; ++i)
    recorder.finish(recorder.begin(collectiveCall(loomFuncAllReduce, 1, loomFloat32, loomSum, -1, 4,
                                                  i, "ring")),
                    loomSuccess);
  const size_t taken = capacity / 2 - 1;  // every call before the one that woke the writer
  const size_t written = taken - taken % Trace::kChunkEvents;  // the writer writes full chunks
  EXPECT_GE(writtenSoon(trace->path(), "\"name\":\"allreduce\"", written), written);
  recorder.traceTo(nullptr);
  trace.reset();
  std::system(("rm -rf " + dir).c_str());
}

}  // namespace
}  // namespace loom
