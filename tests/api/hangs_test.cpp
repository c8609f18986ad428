// Ranks alive but stuck: one stopped (SIGSTOP: a debugger, a paused container) or computing
// instead of calling. Its peers' timeout names it (rank, host, pid), says whether it is dead,
// stopped or late and which call it last entered, and which communicator hung; the survivors'
// flight records (LOOM_FLIGHT_DIR) let loom-info --flight name it too; while the job hangs,
// loom-info --status shows every rank's calls in flight and that the stopped one does not answer.
#include <sys/stat.h>

#include <cstdio>
#include <string>

#include "fault_job.hpp"

namespace loom::test {
namespace {

std::string run(const std::string& command) {
  std::string out;
  FILE* pipe = popen(command.c_str(), "r");
  if (pipe == nullptr) return out;
  char buffer[4096];
  for (size_t n; (n = fread(buffer, 1, sizeof(buffer), pipe)) > 0;) out.append(buffer, n);
  pclose(pipe);
  return out;
}

std::string tempDir(const char* what) {
  std::string pattern = std::string("/tmp/loom-") + what + "-XXXXXX";
  char* made = mkdtemp(pattern.data());
  return made != nullptr ? std::string(made) : std::string();
}

void removeDir(const std::string& dir) {
  if (!dir.empty()) run("rm -rf '" + dir + "'");
}

TEST(Hangs, StoppedPeerIsNamedAtTheTimeoutAndInTheFlightRecords) {
  const std::string flight = tempDir("flight");
  ASSERT_FALSE(flight.empty());
  Job job(3, "3");
  job.setEnv("LOOM_FLIGHT_DIR", flight);
  job.startAll({"stuck", "stop", "2"});
  EXPECT_TRUE(job.wait(30, 2)) << "a survivor hung\n" << job.describe();
  const std::string victim = "rank 2 (pid " + std::to_string(job[2].pid);
  for (int r = 0; r < 2; ++r) {
    const Result res = job[r].result();
    ASSERT_TRUE(res.present) << job.describe();
    EXPECT_TRUE(isPeerFailure(res.code)) << res.msg;
    EXPECT_EQ(res.iters, 10) << res.msg;
    if (res.code != loomTimeout) continue;  // told by the rank that timed out
    EXPECT_NE(res.msg.find("allreduce #11"), std::string::npos) << res.msg;
    EXPECT_NE(res.msg.find("(3 ranks, id "), std::string::npos) << res.msg;
    EXPECT_NE(res.msg.find(victim), std::string::npos) << res.msg;
    EXPECT_NE(res.msg.find("stopped (process state T"), std::string::npos) << res.msg;
    EXPECT_NE(res.msg.find("the last collective it entered is allreduce #10 (finished) and it "
                           "has not entered #11"),
              std::string::npos)
        << res.msg;
  }
  // The survivors wrote their records; the stopped rank could not.
  const std::string report = run(std::string(LOOM_INFO_PATH) + " --flight " + flight + " 2>&1");
  EXPECT_NE(report.find("records of ranks 0, 1; rank 2 left none"), std::string::npos) << report;
  EXPECT_NE(report.find("The last call every recorded rank finished is #10"), std::string::npos)
      << report;
  EXPECT_NE(report.find("ranks 0, 1 entered allreduce(count=256, float, sum)"), std::string::npos)
      << report;
  EXPECT_NE(report.find("The wait ends at rank 2 (no record"), std::string::npos) << report;
  removeDir(flight);
}

TEST(Hangs, ComputingPeerIsLate) {
  Job job(3, "2");
  job.startAll({"stuck", "compute", "1"});
  EXPECT_TRUE(job.wait(30)) << job.describe();
  bool named = false;
  for (int r : {0, 2}) {
    const Result res = job[r].result();
    ASSERT_TRUE(res.present) << job.describe();
    EXPECT_TRUE(isPeerFailure(res.code)) << res.msg;
    if (res.code != loomTimeout || res.msg.find("rank 1 (pid") == std::string::npos) continue;
    named = true;
    EXPECT_NE(res.msg.find("alive and running, late; the last collective it entered is "
                           "allreduce #10 (finished) and it has not entered #11"),
              std::string::npos)
        << res.msg;
  }
  EXPECT_TRUE(named) << job.describe();
}

// In a ring the rank that times out may wait for a neighbour that waits itself: the message names
// the rank of this host that never entered the call too (the soak's errors "not naming the
// cause"). Of the survivors rank 0 alone has a short timeout; it waits for rank 3 or 1 (the ring's
// neighbours), which entered #11 and wait for rank 2.
TEST(Hangs, ARingTimeoutNamesTheRankThatNeverEnteredTheCall) {
  Job job(4, "20");
  job.setEnv("LOOM_ALGO", "allreduce:ring");
  for (int r : {1, 3}) job.start(r, {"stuck", "compute", "2"});
  job.setEnv("LOOM_TIMEOUT", "3");  // rank 2 spins 2 x its timeout, then exits
  for (int r : {0, 2}) job.start(r, {"stuck", "compute", "2"});
  EXPECT_TRUE(job.wait(60)) << job.describe();
  const Result res = job[0].result();
  ASSERT_TRUE(res.present) << job.describe();
  ASSERT_EQ(res.code, loomTimeout) << res.msg;
  EXPECT_NE(res.msg.find("allreduce #11 (256 x float, ring)"), std::string::npos) << res.msg;
  EXPECT_EQ(res.msg.find("waiting for rank 2"), std::string::npos) << res.msg;  // a neighbour
  EXPECT_NE(res.msg.find("the call is held up by rank 2 (pid " + std::to_string(job[2].pid)),
            std::string::npos)
      << res.msg;
  EXPECT_NE(res.msg.find("has not entered #11"), std::string::npos) << res.msg;
}

// A rank stopped inside the call (it entered it) holds a ring up as much as one that never came:
// the timeout of a rank it is not next to names it too. Rank 0 alone has a short timeout; its
// neighbours 1 and 3 wait for rank 2, which stops itself while the ranks loop over calls.
TEST(Hangs, ARingTimeoutNamesARankStoppedInsideTheCall) {
  Job job(4, "20");
  job.setEnv("LOOM_ALGO", "allreduce:ring");
  for (int r : {1, 2, 3}) job.start(r, {"stuck", "stop-inside", "2"});
  job.setEnv("LOOM_TIMEOUT", "3");
  job.start(0, {"stuck", "stop-inside", "2"});
  EXPECT_TRUE(job.wait(60, 2)) << job.describe();
  const Result res = job[0].result();
  ASSERT_TRUE(res.present) << job.describe();
  ASSERT_EQ(res.code, loomTimeout) << res.msg;
  EXPECT_NE(res.msg.find("rank 2 (pid " + std::to_string(job[2].pid)), std::string::npos)
      << res.msg;
  EXPECT_NE(res.msg.find("stopped (process state T"), std::string::npos) << res.msg;
}

// A rank that destroyed its communicator while its peers still call it is alive and outside any
// call: the timeout says so (the soak's "destroy" fault on one host).
TEST(Hangs, ATimeoutNamesARankThatDestroyedItsCommunicator) {
  Job job(3, "20");
  job.setEnv("LOOM_ALGO", "allreduce:ring");
  for (int r : {1, 2}) job.start(r, {"stuck", "destroy", "2"});
  job.setEnv("LOOM_TIMEOUT", "3");
  job.start(0, {"stuck", "destroy", "2"});
  EXPECT_TRUE(job.wait(60, 2)) << job.describe();  // rank 2 spins on
  const Result res = job[0].result();
  ASSERT_TRUE(res.present) << job.describe();
  ASSERT_EQ(res.code, loomTimeout) << res.msg;
  EXPECT_NE(res.msg.find("rank 2 (pid " + std::to_string(job[2].pid)), std::string::npos)
      << res.msg;
  EXPECT_NE(res.msg.find("it destroyed its communicator after entering allreduce #10 (finished)"),
            std::string::npos)
      << res.msg;
}

// Across hosts a rank cannot see its peers' processes: the control plane's hub heard the
// victim's goodbye and says after which call it left (the soak's "destroy" between nodes).
TEST(Hangs, AcrossHostsTheControlPlaneNamesARankThatDestroyedItsCommunicator) {
  Job job(3, "3");
  job.setEnv("LOOM_ALGO", "allreduce:ring");
  job.setEnv("FAULT_RANK_NODES", "a b c");
  job.startAll({"stuck", "destroy", "2"});
  EXPECT_TRUE(job.wait(60, 2)) << job.describe();  // rank 2 spins on
  for (int r : {0, 1}) {
    const Result res = job[r].result();
    ASSERT_TRUE(res.present) << job.describe();
    EXPECT_TRUE(isPeerFailure(res.code)) << res.msg;
    EXPECT_NE(res.msg.find("rank 2 destroyed its communicator after entering allreduce #10 "
                           "(finished)"),
              std::string::npos)
        << "rank " << r << ": " << res.msg;
  }
}

// Rank 0, the control plane's hub, stopped: the others time out waiting for peers of other hosts
// and name rank 0 as the hub that does not answer (the soak's "stop" of rank 0 between nodes).
TEST(Hangs, AcrossHostsAStoppedHubIsNamed) {
  Job job(3, "3");
  job.setEnv("FAULT_RANK_NODES", "a b c");
  job.startAll({"stuck", "stop", "0"});
  EXPECT_TRUE(job.wait(60, 0)) << job.describe();
  for (int r : {1, 2}) {
    const Result res = job[r].result();
    ASSERT_TRUE(res.present) << job.describe();
    EXPECT_TRUE(isPeerFailure(res.code)) << res.msg;
    EXPECT_NE(res.msg.find("rank 0, which relays the control plane, did not answer"),
              std::string::npos)
        << "rank " << r << ": " << res.msg;
  }
}

TEST(Hangs, StatusShowsCallsInFlightAndTheStoppedRank) {
  const std::string status = tempDir("status");
  ASSERT_FALSE(status.empty());
  ASSERT_EQ(chmod(status.c_str(), 0700), 0);
  Job job(3, "60");
  job.setEnv("LOOM_STATUS_DIR", status);
  job.startAll({"stuck", "stop", "2"});
  const std::string command =
      std::string(LOOM_INFO_PATH) + " --status --status-dir " + status + " 2>&1";
  std::string report;
  const auto start = Clock::now();
  // The survivors enter call #11 within moments; the report then shows them waiting in it.
  while (secondsSince(start) < 30) {
    report = run(command);
    if (report.find("started allreduce #11") != std::string::npos &&
        report.find("did not answer") != std::string::npos)
      break;
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
  EXPECT_NE(report.find("started allreduce #11 (1024 bytes)"), std::string::npos) << report;
  EXPECT_NE(report.find("rank 0 (pid " + std::to_string(job[0].pid)), std::string::npos) << report;
  EXPECT_NE(report.find("process " + std::to_string(job[2].pid) + " did not answer"),
            std::string::npos)
      << report;
  EXPECT_NE(report.find("stopped (state T"), std::string::npos) << report;
  EXPECT_NE(report.find("not heard from: ranks 2"), std::string::npos) << report;
  job.wait(0);  // kills them all
  removeDir(status);
}

// The record of one rank in `dir` (loom-flight-<job>-r<rank>.json), or "".
std::string recordOf(const std::string& dir, int rank) {
  return run("cat " + dir + "/loom-flight-*-r" + std::to_string(rank) + ".json 2>/dev/null");
}

TEST(Hangs, FlightRecordsOnRequestThroughTheCallAndSigusr2) {
  const std::string flight = tempDir("flight");
  ASSERT_FALSE(flight.empty());
  Job job(2, "30");
  job.setEnv("LOOM_FLIGHT_DIR", flight);
  job.startAll({"dump"});
  ASSERT_TRUE(job.wait(60)) << job.describe();
  for (int r = 0; r < 2; ++r) EXPECT_EQ(job[r].result().code, loomSuccess) << job.describe();
  const std::string byCall = recordOf(flight, 0), bySignal = recordOf(flight, 1);
  EXPECT_NE(byCall.find("\"reason\":\"loomCommDumpFlight\""), std::string::npos) << byCall;
  EXPECT_NE(bySignal.find("\"reason\":\"SIGUSR2"), std::string::npos) << bySignal;
  // Three allreduces done when the records were taken.
  for (const std::string* record : {&byCall, &bySignal})
    EXPECT_NE(record->find("\"last_finished\":3"), std::string::npos) << *record;
  const std::string report = run(std::string(LOOM_INFO_PATH) + " --flight " + flight + " 2>&1");
  EXPECT_NE(report.find("The last call every recorded rank finished is #3"), std::string::npos)
      << report;
  removeDir(flight);
}

TEST(Hangs, AFatalSignalWritesTheRecordAndTheNativeStack) {
  const std::string flight = tempDir("flight");
  ASSERT_FALSE(flight.empty());
  Job job(2, "30");
  job.setEnv("LOOM_FLIGHT_DIR", flight);
  job.startAll({"segv"});
  ASSERT_TRUE(job.wait(60)) << job.describe();
  EXPECT_TRUE(job[1].killedBy(SIGSEGV)) << job.describe();  // the old disposition still ends it
  EXPECT_NE(job[0].result().code, loomSuccess) << job.describe();
  const std::string record = recordOf(flight, 1);
  EXPECT_NE(record.find("\"reason\":\"fatal signal SIGSEGV\""), std::string::npos) << record;
  EXPECT_NE(record.find("\"last_finished\":3"), std::string::npos) << record;
  // The faulting thread's frames, the test program's own among them.
  const std::string& err = job[1].err;
  EXPECT_NE(err.find("native stack of the faulting thread"), std::string::npos) << err;
  EXPECT_NE(err.find("fault_rank"), std::string::npos) << err;
  removeDir(flight);
}

TEST(Hangs, AnAbortWritesTheFlightRecord) {
  const std::string flight = tempDir("flight");
  ASSERT_FALSE(flight.empty());
  Job job(2, "30");
  job.setEnv("LOOM_FLIGHT_DIR", flight);
  job.startAll({"abort-thread"});
  ASSERT_TRUE(job.wait(60)) << job.describe();
  EXPECT_NE(job[0].result().code, loomSuccess) << job.describe();
  const std::string record = recordOf(flight, 0);
  EXPECT_NE(record.find("\"state\":\"failed\""), std::string::npos) << record;
  EXPECT_NE(record.find("\"op\":\"allreduce\""), std::string::npos) << record;
  removeDir(flight);
}

}  // namespace
}  // namespace loom::test
