// The flight recorder alone: what it keeps, its ring, failures, concurrent readers (run under
// ThreadSanitizer by make test-tsan), its dumps as loom-info --flight reads them, the trace file
// and the status socket.
#include "comm/flight_recorder.hpp"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "comm/flight_registry.hpp"
#include "comm/status_server.hpp"
#include "comm/status_socket.hpp"
#include "comm/trace.hpp"
#include "flight_report.hpp"
#include "json_reader.hpp"
#include "status_client.hpp"

namespace loom {
namespace {

using tool::Json;

FlightIdentity identity(int rank, int nranks = 3, const std::string& job = "00000000000000ab") {
  FlightIdentity id;
  id.name = "grp";
  id.job = job;
  id.host = "hostA";
  id.rank = rank;
  id.nranks = nranks;
  id.pid = 1000 + rank;
  return id;
}

std::vector<FlightCall> all(const FlightRecorder& r) {
  std::vector<FlightCall> calls;
  r.forEach([&](const FlightCall& c) { calls.push_back(c); });
  return calls;
}

FlightCall allreduce(uint64_t seq, size_t count = 256) {
  return collectiveCall(loomFuncAllReduce, count, loomFloat32, loomSum, 0, count * 4, seq, "ring");
}

std::string tempDir() {
  char pattern[] = "/tmp/loom-flight-test-XXXXXX";
  return mkdtemp(pattern);
}

std::string readFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

TEST(FlightRecorder, KeepsTheLastCallsWithTheirStates) {
  FlightRecorder r(4, identity(0));
  for (uint64_t seq = 1; seq <= 6; ++seq) {
    const uint64_t id = r.begin(allreduce(seq));
    if (seq < 6) r.finish(id, loomSuccess);
  }
  const std::vector<FlightCall> calls = all(r);
  ASSERT_EQ(calls.size(), 4u);  // the ring holds 4: calls 3 to 6, oldest first
  EXPECT_EQ(calls.front().seq, 3u);
  EXPECT_EQ(calls.back().seq, 6u);
  EXPECT_EQ(calls.back().state, FlightState::kStarted);
  EXPECT_EQ(calls[2].state, FlightState::kDone);
  EXPECT_STREQ(calls[2].algorithm, "ring");
  EXPECT_EQ(calls[2].bytes, 1024u);
  EXPECT_GE(calls[2].endedNs, calls[2].startedNs);
  EXPECT_EQ(r.lastEntered(), 6u);
  EXPECT_EQ(r.lastFinished(), 5u);
  FlightCall current;
  ASSERT_TRUE(r.current(current));
  EXPECT_EQ(current.seq, 6u);
}

TEST(FlightRecorder, UpdatesOfAnOverwrittenCallAreIgnored) {
  FlightRecorder r(2, identity(0));
  const uint64_t old = r.begin(allreduce(1));
  r.begin(allreduce(2));
  r.begin(allreduce(3));  // takes call 1's slot
  r.finish(old, loomTimeout);
  for (const FlightCall& c : all(r)) EXPECT_EQ(c.state, FlightState::kStarted) << c.seq;
}

TEST(FlightRecorder, QueuedCallsStartLaterAndFailuresFailWhatIsInFlight) {
  FlightRecorder r(8, identity(1));
  FlightCall queued = allreduce(0);
  queued.state = FlightState::kQueued;
  const uint64_t q = r.begin(queued);
  EXPECT_EQ(all(r)[0].startedNs, 0);
  r.start(q, 7, "pipelined");
  r.waitingFor(2);
  FlightCall c = all(r)[0];
  EXPECT_EQ(c.seq, 7u);
  EXPECT_EQ(c.state, FlightState::kStarted);
  EXPECT_STREQ(c.algorithm, "pipelined");
  EXPECT_EQ(c.waitingFor, 2);
  FlightCall send;
  send.kind = FlightKind::kSend;
  send.peer = 2;
  send.tag = 5;
  r.begin(send);
  r.failInFlight(loomTimeout);
  for (const FlightCall& f : all(r)) {
    EXPECT_EQ(f.state, FlightState::kFailed);
    EXPECT_EQ(f.result, loomTimeout);
  }
  EXPECT_EQ(all(r)[0].waitingFor, 2);  // kept with the failed call
}

TEST(FlightRecorder, ScopeRecordsAFailureWhenLeftByAnException) {
  FlightRecorder r(8, identity(0));
  std::atomic<loomResult_t> error{loomSuccess};
  try {
    FlightScope scope(r, error);
    scope.start(allreduce(1));
    error.store(loomRemoteError);
    throw std::runtime_error("peer died");
  } catch (const std::runtime_error&) {
  }
  {
    FlightScope scope(r, error);
    scope.start(allreduce(2));
    scope.done();
  }
  const std::vector<FlightCall> calls = all(r);
  EXPECT_EQ(calls[0].state, FlightState::kFailed);
  EXPECT_EQ(calls[0].result, loomRemoteError);
  EXPECT_EQ(calls[1].state, FlightState::kDone);
}

TEST(FlightRecorder, ReadersOnOtherThreadsSeeWholeEntries) {
  FlightRecorder r(64, identity(0));
  std::atomic<bool> stop{false}, ready{false};
  std::thread writer([&] {
    for (uint64_t seq = 1; seq <= 20000; ++seq) {
      const uint64_t id = r.begin(allreduce(seq, seq));
      r.waitingFor(static_cast<int>(seq % 3));
      r.finish(id, loomSuccess);
      if (seq == 100) ready.store(true);
    }
    stop.store(true);
  });
  while (!ready.load()) std::this_thread::yield();
  uint64_t seen = 0;
  for (bool last = false; !last;) {
    last = stop.load();
    r.forEach([&](const FlightCall& c) {
      // Written together: a torn entry would pair one call's count with another's number.
      EXPECT_EQ(c.count, c.seq);
      EXPECT_EQ(c.bytes, c.seq * 4);
      ++seen;
    });
  }
  writer.join();
  EXPECT_GT(seen, 0u);
}

TEST(FlightRecorder, DumpIsJsonThatLoomInfoReads) {
  const std::string dir = tempDir();
  std::vector<std::unique_ptr<FlightRecorder>> ranks;
  for (int rank = 0; rank < 3; ++rank) {
    ranks.push_back(std::make_unique<FlightRecorder>(16, identity(rank)));
    for (uint64_t seq = 1; seq <= 10; ++seq)
      ranks.back()->finish(ranks.back()->begin(allreduce(seq)), loomSuccess);
  }
  // Ranks 0 and 1 wait in #11 for rank 2, which never came.
  for (int rank = 0; rank < 2; ++rank) {
    const uint64_t id = ranks[rank]->begin(allreduce(11));
    ranks[rank]->waitingFor(2);
    ranks[rank]->finish(id, loomTimeout);
  }
  for (auto& r : ranks) ASSERT_TRUE(r->dump(dir.c_str(), "test"));
  const Json doc = Json::parse(readFile(dir + "/loom-flight-00000000000000ab-r1.json"));
  EXPECT_EQ(doc["rank"].integer(), 1);
  EXPECT_EQ(doc["comm"].str(), "grp");
  EXPECT_EQ(doc["calls"].items().size(), 11u);
  EXPECT_EQ(doc["calls"].items().back()["state"].str(), "failed");
  EXPECT_EQ(doc["calls"].items().back()["waiting_for"].integer(), 2);
  const std::string report = tool::flightReport(dir, false);
  EXPECT_NE(report.find("Communicator 'grp' (id 00000000000000ab, 3 ranks): records of ranks 0-2"),
            std::string::npos)
      << report;
  EXPECT_NE(report.find("rank 2 never entered call #11 (its last call is #10)"), std::string::npos)
      << report;
  EXPECT_NE(report.find("Waiting: rank 0 for rank 2, rank 1 for rank 2"), std::string::npos)
      << report;
  EXPECT_NE(report.find("The wait ends at rank 2 (it never entered #11)"), std::string::npos)
      << report;
  std::system(("rm -rf " + dir).c_str());
}

// LOOM_FLIGHT_DIR need not exist (as LOOM_TRACE's): a job pointed at a new directory lost every
// record before.
TEST(FlightRecorder, DumpMakesItsDirectory) {
  const std::string parent = tempDir();
  const std::string dir = parent + "/flight";
  FlightRecorder r(4, identity(0, 1));
  r.finish(r.begin(allreduce(1)), loomSuccess);
  ASSERT_TRUE(r.dump(dir.c_str(), "x"));
  EXPECT_EQ(Json::parse(readFile(dir + "/loom-flight-00000000000000ab-r0.json"))["rank"].integer(),
            0);
  std::system(("rm -rf " + parent).c_str());
}

TEST(FlightRecorder, ReportNamesCallsThatDiffer) {
  const std::string dir = tempDir();
  FlightRecorder a(8, identity(0, 2)), b(8, identity(1, 2));
  a.begin(allreduce(1, 10));
  b.begin(collectiveCall(loomFuncAllGather, 10, loomFloat32, loomSum, 0, 80, 1, "direct"));
  ASSERT_TRUE(a.dump(dir.c_str(), "x") && b.dump(dir.c_str(), "x"));
  const std::string report = tool::flightReport(dir, true);
  EXPECT_NE(report.find("rank 0 entered allreduce(count=10, float, sum); rank 1 entered "
                        "allgather(count=10, float) (they differ"),
            std::string::npos)
      << report;
  std::system(("rm -rf " + dir).c_str());
}

TEST(Trace, WritesAChromeTraceOfCallsLanesAndWaits) {
  const std::string dir = tempDir();
  std::string path;
  {
    std::unique_ptr<Trace> trace = Trace::open(dir, identity(2), 1000);
    ASSERT_NE(trace, nullptr);
    path = trace->path();
    FlightRecorder r(8, identity(2));
    r.traceTo(trace.get());
    r.finish(r.begin(allreduce(1)), loomSuccess);
    ScheduleOp op;
    op.kind = OpKind::kSend;
    op.peer = 1;
    op.bytes = 4096;
    ScheduleLane lane;
    lane.kind = LaneKind::kSendTo;
    lane.peer = 1;
    trace->operation(op, lane, 100, 2000);
    trace->waited(3000, 9000, 1);
    trace->deviceSpan("allreduce", 1, 100, 200);
  }
  const Json events = Json::parse(readFile(path));
  ASSERT_EQ(events.type(), Json::Type::kArray);
  int calls = 0, lanes = 0, waits = 0, device = 0, named = 0;
  for (const Json& e : events.items()) {
    if (e["ph"].str() == "M" && e["name"].str() == "thread_name") ++named;
    if (e["ph"].str() != "X") continue;
    const std::string cat = e["cat"].str();
    if (cat == "call") {
      ++calls;
      EXPECT_EQ(e["name"].str(), "allreduce");
      EXPECT_EQ(e["args"]["seq"].integer(), 1);
      EXPECT_EQ(e["args"]["algorithm"].str(), "ring");
      EXPECT_EQ(e["args"]["comm"].str(), "grp");
    }
    lanes += cat == "lane";
    waits += cat == "wait";
    device += cat == "device";
  }
  EXPECT_EQ(calls, 1);
  EXPECT_EQ(lanes, 1);
  EXPECT_EQ(waits, 1);
  EXPECT_EQ(device, 1);
  EXPECT_EQ(named, 4);  // collectives, send to 1, waits, device
  std::system(("rm -rf " + dir).c_str());
}

// A communicator whose constructor threw freed its recorder while the registry still held it
// (ASan: the status thread read it). The registration now leaves with its owner.
TEST(FlightRegistry, ARegistrationLeavesTheRegistryWithItsOwner) {
  auto registered = [](const FlightRecorder& mine) {
    bool found = false;
    FlightRegistry::process().forEach(
        [&](const FlightRecorder& r) { found = found || &r == &mine; });
    return found;
  };
  FlightRecorder r(4, identity(0, 1));
  {
    FlightRegistration registration(r);
    EXPECT_TRUE(registered(r));
  }
  EXPECT_FALSE(registered(r));
}

// The status thread flushes every communicator's trace about once a second: a rank that stops
// calling, or exits without destroying its communicator, leaves its last calls in its file.
TEST(StatusSocket, TicksFlushTheTraces) {
  const std::string dir = tempDir();
  std::unique_ptr<Trace> trace = Trace::open(dir, identity(0, 2), 0);
  ASSERT_NE(trace, nullptr);
  FlightRecorder r(8, identity(0, 2));  // after the trace: hands it its last calls at its end
  r.traceTo(trace.get());
  r.finish(r.begin(allreduce(1)), loomSuccess);
  auto traced = [&] {
    std::string text;
    for (const auto& entry : std::filesystem::directory_iterator(dir))
      text += readFile(entry.path().string());
    return text.find("\"seq\":1") != std::string::npos;
  };
  ASSERT_FALSE(traced());  // buffered until a batch fills, a flush or the end
  std::atomic<int> ticks{0};
  StatusServer::Handlers handlers;
  handlers.status = [](FdWriter&) {};
  handlers.dump = [](const char*) { return 0; };
  handlers.tick = [&] {
    r.flushTrace();
    ticks.fetch_add(1);
  };
  const std::string statusDir = tempDir();
  std::unique_ptr<StatusServer> server = StatusServer::start(statusDir, handlers);
  ASSERT_NE(server, nullptr);
  // However slowly this machine schedules the thread: a minute is a bound, not a measurement.
  for (int i = 0; i < 600 && ticks.load() == 0; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  EXPECT_GT(ticks.load(), 0);
  EXPECT_TRUE(traced());
  server.reset();
  std::system(("rm -rf " + dir + " " + statusDir).c_str());
}

TEST(StatusSocket, RefusesDirectoriesOthersCanEnter) {
  const std::string dir = tempDir();
  ASSERT_EQ(chmod(dir.c_str(), 0755), 0);
  EXPECT_NE(checkStatusDirectory(dir, false).find("open to other users"), std::string::npos);
  ASSERT_EQ(chmod(dir.c_str(), 0700), 0);
  EXPECT_EQ(checkStatusDirectory(dir, false), "");
  EXPECT_EQ(statusSocketPid("1234-99.sock"), 1234);
  EXPECT_EQ(statusSocketPid("x.sock"), -1);
  std::system(("rm -rf " + dir).c_str());
}

TEST(StatusSocket, AnswersWithTheCallsInFlight) {
  const std::string dir = tempDir();
  FlightRecorder r(8, identity(0, 2));
  r.finish(r.begin(allreduce(1)), loomSuccess);
  r.begin(allreduce(2));
  r.waitingFor(1);
  StatusServer::Handlers handlers;
  handlers.status = [&](FdWriter& out) { r.writeStatus(out); };
  handlers.dump = [&](const char* where) { return r.dump(where, "asked") ? 1 : 0; };
  std::unique_ptr<StatusServer> server = StatusServer::start(dir, handlers);
  ASSERT_NE(server, nullptr);
  const auto answers = tool::queryStatus(dir, {static_cast<int>(getpid())}, "status", 2000);
  ASSERT_EQ(answers.size(), 1u);
  ASSERT_TRUE(answers[0].answered) << answers[0].why;
  const std::string report = tool::statusReport(answers);
  EXPECT_NE(report.find("communicator 'grp' (id 00000000000000ab, 2 ranks)"), std::string::npos)
      << report;
  EXPECT_NE(report.find("last entered #2, last finished #1"), std::string::npos) << report;
  EXPECT_NE(report.find("started allreduce #2 (1024 bytes) for"), std::string::npos) << report;
  EXPECT_NE(report.find("waiting for rank 1"), std::string::npos) << report;
  EXPECT_NE(report.find("not heard from: ranks 1"), std::string::npos) << report;
  const auto dumped = tool::queryStatus(dir, {}, "dump " + dir, 2000);
  ASSERT_EQ(dumped.size(), 1u);
  EXPECT_EQ(dumped[0].lines, std::vector<std::string>{"dumped 1"});
  server.reset();
  std::system(("rm -rf " + dir).c_str());
}

}  // namespace
}  // namespace loom
