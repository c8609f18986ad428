// Execution plans on emulated-device, heterogeneous and CUDA communicators (the emu_plans_* ctest
// entries force the example plans of LOOM_PLAN_DIR with EMU_TEST_ALGO): each forced plan is the
// algorithm that ran, a selector callback chooses for whole calls, a registration votes on every
// rank. Part of emu_collectives_test (main is in emu_collectives_test.cpp).
#include <dirent.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "emu_test_env.hpp"

namespace loom::test {
namespace {

// The lines of this rank's flight record of `comm` (loomCommDumpFlight): one call a line.
std::vector<std::string> flightLines(loomComm_t comm) {
  const std::string dir = "/tmp/loom-emu-flight-" + std::to_string(getpid());
  mkdir(dir.c_str(), 0700);
  EXPECT_LOOM(loomCommDumpFlight(comm, dir.c_str()));
  std::vector<std::string> lines;
  std::unique_ptr<DIR, int (*)(DIR*)> listing(opendir(dir.c_str()), closedir);
  for (dirent* entry; listing != nullptr && (entry = readdir(listing.get())) != nullptr;) {
    const std::string path = dir + "/" + entry->d_name;
    if (path.find(".json") == std::string::npos) continue;
    std::ifstream file(path);
    for (std::string line; std::getline(file, line);) lines.push_back(line);
    std::remove(path.c_str());
  }
  rmdir(dir.c_str());
  return lines;
}

TEST(EmuCollectives, ForcedAlgorithmsRun) {
  // Each collective EMU_TEST_ALGO forces (execution plans) is the one that ran: its call in the
  // flight record names it (a communicator that refused plans would have failed the calls).
  if (forcedAlgo() == nullptr) GTEST_SKIP() << "EMU_TEST_ALGO forces nothing";
  EmuComm ec(configs()[0]);
  ASSERT_NE(ec.comm, nullptr);
  const size_t n = 4099;
  DeviceBuffer send(n * 4 * gRanks), recv(n * 4 * gRanks);
  send.upload(std::vector<char>(n * 4 * gRanks + 1, 1));
  EXPECT_LOOM(loomAllReduce(send.get(), recv.get(), n, loomFloat32, loomSum, ec.comm, nullptr));
  EXPECT_LOOM(loomAllGather(send.get(), recv.get(), n, loomFloat32, ec.comm, nullptr));
  EXPECT_LOOM(loomReduceScatter(send.get(), recv.get(), n, loomFloat32, loomSum, ec.comm, nullptr));
  EXPECT_LOOM(loomAllToAll(send.get(), recv.get(), n, loomFloat32, ec.comm, nullptr));
  recv.download();  // the stream-ordered calls are done
  const std::vector<std::string> lines = flightLines(ec.comm);
  std::string items = forcedAlgo();
  for (size_t at = 0; at < items.size();) {
    const size_t end = std::min(items.find(',', at), items.size());
    const std::string item = items.substr(at, end - at), op = item.substr(0, item.find(':'));
    const std::string algo = item.substr(op.size() + 1);
    at = end + 1;
    const bool ran = std::any_of(lines.begin(), lines.end(), [&](const std::string& l) {
      return l.find("\"op\":\"" + op + "\"") != std::string::npos &&
             l.find("\"algorithm\":\"" + algo + "\"") != std::string::npos;
    });
    EXPECT_TRUE(ran) << op << " did not run " << algo << " on rank " << gRank;
  }
}

// The sizes the plan selector below was asked about, and the plan it chooses.
struct SelectorLog {
  std::string plan;
  std::vector<size_t> bytes;
};
const char* chooseThePlan(loomFunc_t func, size_t bytes, int, void* user) {
  auto* log = static_cast<SelectorLog*>(user);
  if (func != loomFuncAllReduce) return nullptr;
  log->bytes.push_back(bytes);
  return log->plan.c_str();
}

TEST(EmuCollectives, PlanSelectorChoosesForTheWholeCall) {
  // A heterogeneous communicator cuts a large allreduce into chunks; the plan chosen for the call
  // (by its size) runs every chunk: the selector is asked about the call's size only, never a
  // chunk's, and the result is exact.
  const char* dir = std::getenv("LOOM_PLAN_DIR");
  if (forcedAlgo() == nullptr || dir == nullptr) GTEST_SKIP() << "no plans";
  EmuComm ec(Config{"selector", "", {}});
  ASSERT_NE(ec.comm, nullptr);
  SelectorLog log{"plan:ring_allreduce_" + std::to_string(gRanks), {}};
  ASSERT_LOOM(loomCommSetPlanSelector(ec.comm, chooseThePlan, &log));
  const size_t n = (size_t{9} << 18) + 5;  // 9 MiB and a bit: 9 chunks of 1 MiB and a bit
  std::vector<char> host(n * 4 + 1);
  Pattern::input(loomFloat32, loomSum, gRank).fill(host.data(), n);
  DeviceBuffer data(n * 4);
  data.upload(host);
  EXPECT_LOOM(loomAllReduce(data.get(), data.get(), n, loomFloat32, loomSum, ec.comm, nullptr));
  expectMatch(Pattern::reduced(loomFloat32, loomSum, gRanks), data.download(), 0, n, 0,
              "allreduce chosen by the plan selector");
  // Once per call, composed too (it was asked three times there: whether to compose, what to
  // run, and again whether to compose).
  EXPECT_EQ(log.bytes.size(), 1u) << "the selector was not asked exactly once for one call";
  for (size_t b : log.bytes) EXPECT_EQ(b, n * 4) << "the selector was asked about a chunk";
  EXPECT_LOOM(loomCommSetPlanSelector(ec.comm, nullptr, nullptr));
}

TEST(EmuCollectives, PlanRegistrationVotesOnEveryRank) {
  // loomCommRegisterPlan on device and CPU ranks alike, with a stream-ordered call in flight: a
  // plan the last rank cannot read is refused on every rank (the vote runs on the host CPU, after
  // a device rank's queued calls), the communicator lives on, and the plan every rank passes
  // then registers everywhere and runs the next call.
  const char* dir = std::getenv("LOOM_PLAN_DIR");
  if (forcedAlgo() == nullptr || dir == nullptr) GTEST_SKIP() << "no plans";
  const std::string plans = dir, name = "ring_allreduce_" + std::to_string(gRanks);
  unsetenv("LOOM_PLAN_DIR");  // a communicator without the plans
  EmuComm ec(Config{"register", "", {}});
  setenv("LOOM_PLAN_DIR", plans.c_str(), 1);
  ASSERT_NE(ec.comm, nullptr);
  const size_t n = 70001;
  std::vector<char> host(n * 4 + 1);
  Pattern::input(loomFloat32, loomSum, gRank).fill(host.data(), n);
  DeviceBuffer data(n * 4);
  data.upload(host);
  EXPECT_LOOM(loomAllReduce(data.get(), data.get(), n, loomFloat32, loomSum, ec.comm, nullptr));
  const std::string path = plans + "/" + name + ".json";
  const std::string mine = gRank == gRanks - 1 ? plans + "/missing.json" : path;
  const char* algo = nullptr;
  EXPECT_EQ(loomCommRegisterPlan(ec.comm, mine.c_str(), &algo), loomInvalidArgument);
  const std::string why = loomGetLastError(ec.comm);
  EXPECT_NE(why.find(gRank == gRanks - 1 ? "cannot read plan file" : "was refused on rank(s)"),
            std::string::npos)
      << why;
  ASSERT_LOOM(loomCommRegisterPlan(ec.comm, path.c_str(), &algo));
  EXPECT_EQ(std::string(algo), "plan:" + name);
  const char* chosen = nullptr;
  EXPECT_LOOM(loomCommGetAlgorithm(ec.comm, loomFuncAllReduce, n, loomFloat32, &chosen));
  EXPECT_EQ(std::string(chosen), "plan:" + name);
  data.upload(host);
  EXPECT_LOOM(loomAllReduce(data.get(), data.get(), n, loomFloat32, loomSum, ec.comm, nullptr));
  expectMatch(Pattern::reduced(loomFloat32, loomSum, gRanks), data.download(), 0, n, 0,
              "allreduce by the registered plan");
}

}  // namespace
}  // namespace loom::test
