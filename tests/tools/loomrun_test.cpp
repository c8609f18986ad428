// Single-node loomrun: what it starts, prints and returns (loomrun_runner.hpp runs it).
#include <set>

#include "loomrun_runner.hpp"

namespace {

using namespace loomrun_test;

// Runs kEnvScript on n ranks, checks everything that must hold for any job and returns the
// per-rank fields.
std::vector<std::map<std::string, std::string>> checkedEnvJob(
    int n, const std::vector<std::string>& env = {}) {
  Result r = runLoomrun(shJob(n, kEnvScript), env);
  EXPECT_EQ(r.status, 0) << r.err;
  std::vector<std::map<std::string, std::string>> byRank(static_cast<size_t>(n));
  std::set<int> seen;
  for (const std::string& line : lines(r.out)) {
    auto [rank, rest] = splitPrefix(line);
    auto fields = parseFields(rest);
    EXPECT_EQ(fields["R"], std::to_string(rank)) << line;
    EXPECT_TRUE(rank >= 0 && rank < n) << line;
    if (rank < 0 || rank >= n) continue;
    EXPECT_TRUE(seen.insert(rank).second) << "rank " << rank << " printed twice";
    byRank[static_cast<size_t>(rank)] = fields;
  }
  EXPECT_EQ(seen.size(), static_cast<size_t>(n)) << r.out;
  return byRank;
}

TEST(Loomrun, SetsTorchrunAndLoomVariablesForEveryRank) {
  const int n = 4;
  auto byRank = checkedEnvJob(n);
  ASSERT_EQ(byRank.size(), static_cast<size_t>(n));
  const auto& first = byRank[0];
  for (int rank = 0; rank < n; ++rank) {
    auto& f = byRank[static_cast<size_t>(rank)];
    SCOPED_TRACE("rank " + std::to_string(rank));
    EXPECT_EQ(f["W"], "4");
    EXPECT_EQ(f["LR"], std::to_string(rank));
    EXPECT_EQ(f["LW"], "4");
    EXPECT_EQ(f["G"], "0");
    EXPECT_EQ(f["NR"], "0");
    EXPECT_EQ(f["MA"], "127.0.0.1");
    EXPECT_EQ(f["MP"], first.at("MP"));
    EXPECT_EQ(f["C"], first.at("C"));
    EXPECT_EQ(f["S"], first.at("S"));
  }
  int masterPort = std::stoi(first.at("MP"));
  EXPECT_GT(masterPort, 0);
  EXPECT_LT(masterPort, 65536);
  const std::string& commId = first.at("C");
  ASSERT_EQ(commId.rfind("127.0.0.1:", 0), 0u) << commId;
  int commPort = std::stoi(commId.substr(10));
  EXPECT_GT(commPort, 0);
  EXPECT_LT(commPort, 65536);
  EXPECT_NE(commPort, masterPort);
  EXPECT_EQ(first.at("S").size(), 32u);
  EXPECT_TRUE(isLowerHex(first.at("S"))) << first.at("S");
}

TEST(Loomrun, NewSecretForEachRun) {
  auto a = checkedEnvJob(2);
  auto b = checkedEnvJob(2);
  ASSERT_EQ(a[0]["S"].size(), 32u);
  ASSERT_EQ(b[0]["S"].size(), 32u);
  EXPECT_NE(a[0]["S"], b[0]["S"]);
}

TEST(Loomrun, InheritedSecretPassesThroughAndOwnVariablesWin) {
  auto byRank = checkedEnvJob(2, {"LOOM_JOB_SECRET=caller-chosen-secret", "RANK=77",
                                  "WORLD_SIZE=99", "LOOM_COMM_ID=10.0.0.1:1"});
  for (auto& f : byRank) {
    EXPECT_EQ(f["S"], "caller-chosen-secret");
    EXPECT_EQ(f["W"], "2");
    EXPECT_EQ(f["C"].rfind("127.0.0.1:", 0), 0u) << f["C"];
  }
}

TEST(Loomrun, AcceptsAllRankCountSpellings) {
  for (std::vector<std::string> flag : std::vector<std::vector<std::string>>{{"-n3"},
                                                                             {"-n", "3"},
                                                                             {"-N", "3"},
                                                                             {"--np", "3"},
                                                                             {"--np=3"},
                                                                             {"--nproc-per-node=3"},
                                                                             {"-np", "3"}}) {
    std::vector<std::string> args = flag;
    args.insert(args.end(), {"--", "/bin/sh", "-c", "echo $WORLD_SIZE"});
    Result r = runLoomrun(args);
    EXPECT_EQ(r.status, 0) << flag[0] << ": " << r.err;
    EXPECT_EQ(lines(r.out).size(), 3u) << flag[0];
    for (const std::string& line : lines(r.out)) EXPECT_EQ(splitPrefix(line).second, "3");
  }
}

TEST(Loomrun, PrefixesStdoutAndStderrSeparately) {
  Result r = runLoomrun(shJob(3, "echo out-$RANK; echo err-$RANK >&2"));
  EXPECT_EQ(r.status, 0);
  std::vector<std::string> outLines = lines(r.out);
  std::vector<std::string> errLines = lines(r.err);
  std::set<std::string> out(outLines.begin(), outLines.end());
  std::set<std::string> err(errLines.begin(), errLines.end());
  EXPECT_EQ(out, (std::set<std::string>{"[0] out-0", "[1] out-1", "[2] out-2"})) << r.out;
  EXPECT_EQ(err, (std::set<std::string>{"[0] err-0", "[1] err-1", "[2] err-2"})) << r.err;
}

TEST(Loomrun, PrintsFinalPartialLine) {
  Result r = runLoomrun(shJob(1, "printf 'first\\nno newline'; printf 'e1\\ne2' >&2"));
  EXPECT_EQ(r.status, 0);
  EXPECT_EQ(r.out, "[0] first\n[0] no newline\n");
  EXPECT_EQ(r.err, "[0] e1\n[0] e2\n");
}

TEST(Loomrun, NoPrefixPassesOutputThrough) {
  Result r = runLoomrun(shJob(2, "echo plain-$RANK; printf tail", {"--no-prefix"}));
  EXPECT_EQ(r.status, 0);
  EXPECT_NE(r.out.find("plain-0\n"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("plain-1\n"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find('['), std::string::npos) << r.out;
  EXPECT_EQ(r.out.size(), std::string("plain-0\ntailplain-1\ntail").size());
}

TEST(Loomrun, OnlyRankZeroReadsStdin) {
  Result r = runLoomrun(shJob(2, "cat"), {}, "hello\n");
  EXPECT_EQ(r.status, 0);
  EXPECT_EQ(r.out, "[0] hello\n");
}

TEST(Loomrun, FailingRankStatusPropagatesAndOthersAreStopped) {
  Result r =
      runLoomrun(shJob(4, "if [ $RANK = 2 ]; then echo bye >&2; exit 3; fi; exec sleep 100"));
  EXPECT_EQ(r.status, 3);
  EXPECT_LT(r.seconds, kStopLimitSec);
  EXPECT_NE(r.err.find("[2] bye\nloomrun: rank 2 exited with status 3; stopping the other ranks\n"),
            std::string::npos)
      << r.err;
}

// torchrun's "Root Cause": which rank failed, where, how, and the first line that reads like an
// error (not merely the first line of its stderr).
TEST(Loomrun, FailedJobEndsWithSummaryOfTheFirstFailure) {
  Result r =
      runLoomrun(shJob(3,
                       "if [ $RANK = 1 ]; then echo starting >&2; echo 'oops: it failed' >&2;"
                       " echo $$; exit 5; fi; exec sleep 100"));
  EXPECT_EQ(r.status, 5);
  const std::string& e = r.err;
  size_t summary = e.find("loomrun: job failed. Root cause (first rank to fail):\n");
  ASSERT_NE(summary, std::string::npos) << e;
  EXPECT_NE(e.find("  rank      : 1 (local rank 1)\n", summary), std::string::npos) << e;
  EXPECT_NE(e.find("  host      : ", summary), std::string::npos) << e;
  std::vector<pid_t> pids = pidsFromOutput(r.out);
  ASSERT_EQ(pids.size(), 1u) << r.out;
  EXPECT_NE(e.find("  pid       : " + std::to_string(pids[0]) + "\n", summary), std::string::npos)
      << e;
  EXPECT_NE(e.find("  exit      : exited with status 5\n", summary), std::string::npos) << e;
  EXPECT_NE(e.find("  first error: oops: it failed", summary), std::string::npos) << e;

  Result killed = runLoomrun(shJob(2, "if [ $RANK = 0 ]; then kill -9 $$; fi; exec sleep 100"));
  EXPECT_EQ(killed.status, 128 + 9);
  EXPECT_NE(killed.err.find("  exit      : killed by signal 9"), std::string::npos) << killed.err;
}

// A Python rank's traceback: the summary names the exception ("ValueError: ..."), which Python
// prints after the frames, not the "Traceback (most recent call last):" header; of a chained
// traceback the first exception, the root cause.
TEST(Loomrun, PythonRankFailureNamesTheException) {
  const std::string script =
      "def load(n):\n"
      "    raise ValueError(f'bad shard {n}')\n"
      "try:\n"
      "    load(3)\n"
      "except ValueError:\n"
      "    raise RuntimeError('could not start')\n";
  Result r = runLoomrun({"-n", "1", "--", "python3", "-c", script});
  EXPECT_EQ(r.status, 1);
  size_t summary = r.err.find("loomrun: job failed. Root cause (first rank to fail):\n");
  ASSERT_NE(summary, std::string::npos) << r.err;
  EXPECT_NE(r.err.find("  first error: ValueError: bad shard 3\n", summary), std::string::npos)
      << r.err;

  Result plain = runLoomrun({"-n", "1", "--", "python3", "-c",
                             "import sys\nprint('loading', file=sys.stderr)\n"
                             "{}['missing']"});
  EXPECT_EQ(plain.status, 1);
  EXPECT_NE(plain.err.find("  first error: KeyError: 'missing'\n"), std::string::npos) << plain.err;
}

TEST(Loomrun, PrintsVersion) {
  Result r = runLoomrun({"--version"});
  EXPECT_EQ(r.status, 0);
  EXPECT_EQ(r.out.rfind("loomrun (Loom) ", 0), 0u) << r.out;
}

TEST(Loomrun, ProcessesStartedByRanksAreStopped) {
  Result r = runLoomrun(
      shJob(3, "sleep 100 & echo $!; if [ $RANK = 1 ]; then sleep 0.2; exit 1; fi; wait"));
  EXPECT_EQ(r.status, 1);
  EXPECT_LT(r.seconds, kStopLimitSec);
  std::vector<pid_t> pids = pidsFromOutput(r.out);
  EXPECT_EQ(pids.size(), 3u) << r.out;
  for (pid_t pid : pids) EXPECT_TRUE(waitUntilDead(pid, 5)) << "background sleep " << pid;
}

TEST(Loomrun, RankKilledBySignalGives128PlusSignal) {
  Result r = runLoomrun(shJob(3, "if [ $RANK = 1 ]; then kill -9 $$; fi; exec sleep 100"));
  EXPECT_EQ(r.status, 128 + 9);
  EXPECT_LT(r.seconds, kStopLimitSec);
  EXPECT_NE(r.err.find("loomrun: rank 1 killed by signal 9 (Killed); stopping the other ranks"),
            std::string::npos)
      << r.err;
}

TEST(Loomrun, GraceEndsWithSigkillForRanksIgnoringSigterm) {
  // Rank 0 fails only after the others have had ample time to install their trap.
  Result r = runLoomrun(shJob(
      3, "trap '' TERM; if [ $RANK = 0 ]; then sleep 0.5; exit 5; fi; echo trapped; sleep 100",
      {"--grace", "0.3"}));
  EXPECT_EQ(r.status, 5);
  // The ranks ignored SIGTERM, so only the SIGKILL after the grace period could end them.
  EXPECT_GE(r.seconds, 0.5 + 0.3);
  EXPECT_LT(r.seconds, kStopLimitSec);
  EXPECT_EQ(lines(r.out).size(), 2u) << r.out;
}

TEST(Loomrun, TimeoutStopsAllRanksWith124) {
  Result r = runLoomrun(shJob(2, "exec sleep 100", {"--timeout", "0.5"}));
  EXPECT_EQ(r.status, 124);
  EXPECT_GE(r.seconds, 0.4);
  EXPECT_LT(r.seconds, kStopLimitSec);
  EXPECT_NE(r.err.find("loomrun: timeout after 0.5 s; stopping all ranks\n"), std::string::npos)
      << r.err;
}

TEST(Loomrun, TimeoutFromEnvironment) {
  Result r = runLoomrun(shJob(2, "exec sleep 100"), {"LOOMRUN_TIMEOUT=0.3"});
  EXPECT_EQ(r.status, 124);
  EXPECT_LT(r.seconds, kStopLimitSec);
}

TEST(Loomrun, JobWithinTimeoutSucceeds) {
  Result r = runLoomrun(shJob(2, "echo ok", {"--timeout", "5"}));
  EXPECT_EQ(r.status, 0);
  EXPECT_EQ(lines(r.out).size(), 2u);
}

void expectSignalStopsJob(int sig, const std::string& name) {
  Loomrun run(shJob(3, "echo ready; exec sleep 100"));
  ASSERT_TRUE(run.waitForLines(3, kStopLimitSec)) << run.out();
  run.signal(sig);
  EXPECT_EQ(run.finish(), 128 + sig);
  EXPECT_LT(run.elapsedSec(), kStopLimitSec);
  EXPECT_NE(run.err().find("loomrun: received " + name + "; stopping all ranks"), std::string::npos)
      << run.err();
}

TEST(Loomrun, SigtermToLoomrunStopsRanks) { expectSignalStopsJob(SIGTERM, "SIGTERM"); }

TEST(Loomrun, SigintToLoomrunStopsRanks) { expectSignalStopsJob(SIGINT, "SIGINT"); }

TEST(Loomrun, RanksDieWhenLoomrunIsKilled) {
  Loomrun run(shJob(2, "echo $$; exec sleep 100"));
  ASSERT_TRUE(run.waitForLines(2, kStopLimitSec)) << run.out();
  std::vector<pid_t> pids = pidsFromOutput(run.out());
  run.signal(SIGKILL);
  EXPECT_EQ(run.finish(), 128 + 9);
  for (pid_t pid : pids) EXPECT_TRUE(waitUntilDead(pid, 5)) << "rank process " << pid;
}

TEST(Loomrun, MissingProgramExits127) {
  Result r = runLoomrun({"-n", "2", "/nonexistent/loomrun-test-program"});
  EXPECT_EQ(r.status, 127);
  EXPECT_NE(r.err.find("cannot execute '/nonexistent/loomrun-test-program'"), std::string::npos)
      << r.err;
}

TEST(Loomrun, UsageErrorsExit2) {
  const std::vector<std::vector<std::string>> cases = {
      {},
      {"true"},
      {"-n"},
      {"-n", "0", "true"},
      {"-n", "-1", "true"},
      {"-n", "abc", "true"},
      {"-n", "2"},
      {"-n", "2", "--"},
      {"--bogus", "-n", "2", "true"},
      {"-n", "2", "--timeout", "soon", "true"},
      {"-n", "2", "--grace", "-1", "true"},
  };
  for (const auto& args : cases) {
    std::string joined;
    for (const auto& a : args) joined += a + " ";
    Result r = runLoomrun(args);
    EXPECT_EQ(r.status, 2) << "args: " << joined;
    EXPECT_NE(r.err.find("Usage: loomrun"), std::string::npos) << "args: " << joined;
    EXPECT_TRUE(r.out.empty()) << "args: " << joined;
  }
  Result badEnv = runLoomrun({"-n", "1", "true"}, {"LOOMRUN_TIMEOUT=later"});
  EXPECT_EQ(badEnv.status, 2);
}

TEST(Loomrun, InconsistentMultiNodeFlagsAreUsageErrors) {
  const std::vector<std::vector<std::string>> cases = {
      {"--nnodes", "2", "-n", "2", "true"},  // no --master
      {"--nnodes", "2", "--node-rank", "2", "--master", "h:1", "-n", "1", "true"},
      {"--node-rank", "1", "-n", "2", "true"},         // needs --nnodes
      {"--ranks", "0,1", "true"},                      // needs --nnodes
      {"--master", "127.0.0.1:1", "-n", "1", "true"},  // needs --nnodes
      {"--nnodes", "2", "--master", "nocolon", "-n", "1", "true"},
      {"--nnodes", "2", "--master", "h:70000", "-n", "1", "true"},
      {"--nnodes", "2", "--master", "h:1", "--ranks", "0,0", "true"},  // duplicate
      {"--nnodes", "2", "--master", "h:1", "--ranks", "2-1", "true"},
      {"--nnodes", "2", "--master", "h:1", "--ranks", "0,x", "true"},
      {"--nnodes", "2", "--master", "h:1", "--ranks", "0,2", "-n", "3", "true"},
      {"--nnodes", "2", "--master", "h:1", "--ranks", "0,5", "--world-size", "4", "true"},
      {"--nnodes", "2", "--master", "h:1", "-n", "2", "--world-size", "5", "true"},
      {"--nnodes", "0", "-n", "1", "true"},
      {"--nnodes", "2", "--master", "h:1", "-n", "1", "--join-timeout", "0", "true"},
  };
  for (const auto& args : cases) {
    std::string joined;
    for (const auto& a : args) joined += a + " ";
    Result r = runLoomrun(args);
    EXPECT_EQ(r.status, 2) << "args: " << joined << "\n" << r.err;
    EXPECT_NE(r.err.find("Usage: loomrun"), std::string::npos) << "args: " << joined;
  }
}

TEST(Loomrun, HelpExits0) {
  Result r = runLoomrun({"--help"});
  EXPECT_EQ(r.status, 0);
  EXPECT_NE(r.out.find("Usage: loomrun"), std::string::npos);
}

TEST(Loomrun, EightRanksWithLotsOfOutputLoseNoLines) {
  const int n = 8;
  const int perRank = 5000;
  std::string script = "i=0; while [ $i -lt " + std::to_string(perRank) +
                       " ]; do echo \"out $RANK $i\"; echo \"err $RANK $i\" >&2; i=$((i+1)); done";
  Result r = runLoomrun(shJob(n, script));
  ASSERT_EQ(r.status, 0) << r.err.substr(0, 500);
  for (const auto& [text, kind] : {std::pair{&r.out, "out"}, std::pair{&r.err, "err"}}) {
    std::vector<int> next(n, 0);
    size_t count = 0;
    for (const std::string& line : lines(*text)) {
      auto [rank, rest] = splitPrefix(line);
      ASSERT_TRUE(rank >= 0 && rank < n) << line;
      // Each rank's lines must arrive whole and in order.
      ASSERT_EQ(rest, std::string(kind) + " " + std::to_string(rank) + " " +
                          std::to_string(next[static_cast<size_t>(rank)]++));
      ++count;
    }
    EXPECT_EQ(count, static_cast<size_t>(n * perRank)) << kind;
  }
}

}  // namespace
