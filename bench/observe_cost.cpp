// What the flight recorder and LOOM_TRACE add to one call, measured in-process where the busy
// machine's scheduling noise cannot reach it (the job-level A/B, bench/ab_builds.sh, is too
// noisy on a shared 2-core host to see a few percent). Per call: the recorder's begin and finish
// (always on), the same with a trace attached (a span per call), and the trace's spans of the
// executor's operations (a ring allreduce on 8 ranks runs 2 x 7 of them). Prints the best of
// several trials, in ns per call; compare with a call's time from loom-bench. Without a status
// thread here, the trace's lines include its formatting (the recording thread writes when the
// pool is full). The last two lines split a call's span into what its caller does (the trace's
// writer thread takes the calls from the recorder's ring; the caller only when the writer falls a
// turn behind) and the writing, which the writer thread does when it keeps up.
//
//   observe_cost [iterations]   (docs/observability.md quotes its output)
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "base/wait.hpp"
#include "comm/flight_recorder.hpp"
#include "comm/trace.hpp"

namespace {

using loom::FlightRecorder;

template <typename Body>
double bestNsPerIteration(long iterations, Body&& body) {
  double best = 1e300;
  for (int trial = 0; trial < 7; ++trial) {
    const auto start = std::chrono::steady_clock::now();
    for (long i = 0; i < iterations; ++i) body(i);
    const std::chrono::duration<double, std::nano> took = std::chrono::steady_clock::now() - start;
    best = std::min(best, took.count() / static_cast<double>(iterations));
  }
  return best;
}

// Recording alone: batches that fit the trace's pool, each written (not timed) before the next,
// as the status thread would.
template <typename Body>
void recordAndWrite(long iterations, const loom::FlightRecorder& recorder, Body&& body,
                    double& recordNs, double& writeNs) {
  const long batch = static_cast<long>((loom::Trace::kMaxChunks - 2) * loom::Trace::kChunkEvents);
  recordNs = writeNs = 1e300;
  for (int trial = 0; trial < 7; ++trial) {
    std::chrono::duration<double, std::nano> recording{0}, writing{0};
    for (long done = 0; done < iterations; done += batch) {
      const long n = std::min(batch, iterations - done);
      const auto start = std::chrono::steady_clock::now();
      for (long i = 0; i < n; ++i) body(done + i);
      const auto recorded = std::chrono::steady_clock::now();
      recorder.flushTrace();
      recording += recorded - start;
      writing += std::chrono::steady_clock::now() - recorded;
    }
    recordNs = std::min(recordNs, recording.count() / static_cast<double>(iterations));
    writeNs = std::min(writeNs, writing.count() / static_cast<double>(iterations));
  }
}

loom::FlightIdentity identity() {
  loom::FlightIdentity id;
  id.name = "cost";
  id.job = "00000000000000c0";
  id.host = "here";
  id.nranks = 8;
  id.pid = static_cast<int>(getpid());
  return id;
}

}  // namespace

int main(int argc, char** argv) {
  const long iterations = argc > 1 ? std::atol(argv[1]) : 200000;
  const loom::FlightCall call =
      loom::collectiveCall(loomFuncAllReduce, 256, loomFloat32, loomSum, -1, 1024, 0, "ring");
  FlightRecorder bare(1024, identity());
  const double recorder = bestNsPerIteration(iterations, [&](long i) {
    loom::FlightCall c = call;
    c.seq = static_cast<uint64_t>(i) + 1;
    bare.finish(bare.begin(c), loomSuccess);
  });

  char dir[] = "/tmp/loom-observe-cost-XXXXXX";
  if (mkdtemp(dir) == nullptr) return 1;
  auto trace = loom::Trace::open(dir, identity(), 100000);
  if (!trace) return 1;
  FlightRecorder traced(1024, identity());
  traced.traceTo(trace.get());
  const double tracedCall = bestNsPerIteration(iterations, [&](long i) {
    loom::FlightCall c = call;
    c.seq = static_cast<uint64_t>(i) + 1;
    traced.finish(traced.begin(c), loomSuccess);
  });
  loom::ScheduleOp op;
  op.kind = loom::OpKind::kSend;
  op.peer = 1;
  op.bytes = 128;
  loom::ScheduleLane lane;
  lane.kind = loom::LaneKind::kSendTo;
  lane.peer = 1;
  const double span = bestNsPerIteration(iterations, [&](long i) {
    const int64_t now = static_cast<int64_t>(loom::steadyNowNs());  // as the executor reads it
    trace->operation(op, lane, now - 100 - i % 7, now);
  });
  double recordNs = 0, writeNs = 0;
  recordAndWrite(
      iterations, traced,
      [&](long i) {
        loom::FlightCall c = call;
        c.seq = static_cast<uint64_t>(i) + 1;
        traced.finish(traced.begin(c), loomSuccess);
      },
      recordNs, writeNs);
  traced.traceTo(nullptr);
  trace.reset();
  std::string clean = std::string("rm -rf '") + dir + "'";
  if (std::system(clean.c_str()) != 0) std::fprintf(stderr, "could not remove %s\n", dir);

  std::printf("flight recorder, per call (begin + finish):        %7.1f ns\n", recorder);
  std::printf("flight recorder + LOOM_TRACE span, per call:       %7.1f ns\n", tracedCall);
  std::printf("LOOM_TRACE span of one executor operation:         %7.1f ns\n", span);
  std::printf("LOOM_TRACE, 8-rank ring allreduce (call + 14 ops): %7.1f ns\n",
              tracedCall - recorder + 14 * span);
  std::printf("LOOM_TRACE call span, recording only (caller):     %7.1f ns\n", recordNs - recorder);
  std::printf("LOOM_TRACE call span, formatting and write(2):     %7.1f ns\n", writeNs);
  return 0;
}
