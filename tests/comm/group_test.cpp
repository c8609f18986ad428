// Groups of a communicator's ranks over its channels, ranks as threads over in-process channels:
// a group numbers its members in the order given, gathers strings of any length (how a
// cluster's native collectives set up), runs its table's collectives with its own call check, and
// two groups share the same channels one call after another.
#include "comm/group.hpp"

#include <gtest/gtest.h>

#include <numeric>
#include <thread>

#include "../device/fake_native.hpp"
#include "../exec/memory_channel.hpp"
#include "base/error.hpp"
#include "device/cpu/cpu_device.hpp"

namespace loom {
namespace {

constexpr int kRanks = 5;  // the communicator's ranks (threads)

struct World {
  std::vector<std::vector<std::unique_ptr<Channel>>> owned = test::memoryChannels(kRanks, 256);
  std::unique_ptr<Device> cpu = createCpuDevice();

  GroupSetup setup(const std::vector<int>& members, int rank) {
    GroupSetup s;
    s.members = members;
    for (size_t i = 0; i < members.size(); ++i)
      if (members[i] == rank) s.rank = static_cast<int>(i);
    for (auto& channel : owned[rank]) s.channels.push_back(channel.get());
    s.device = s.hostDevice = cpu.get();
    s.checkMode = 1;
    s.deviceName = "cpu";
    s.directMaxBytes = 0;
    s.check = [](int) {};
    return s;
  }

  // Runs body(rank) on one thread per member of `members`.
  template <typename Body>
  void onEach(const std::vector<int>& members, Body body) {
    std::vector<std::thread> threads;
    for (int rank : members) threads.emplace_back([&, rank] { body(rank); });
    for (auto& t : threads) t.join();
  }
};

std::string payload(int rank) { return std::string(static_cast<size_t>(rank) * 7, 'a' + rank); }

std::vector<float> allReduce(Group& group, int rank, size_t count) {
  std::vector<float> in(count), out(count, -1.0f);
  std::iota(in.begin(), in.end(), static_cast<float>(rank));
  CollArgs args;
  args.func = loomFuncAllReduce;
  args.send = in.data();
  args.recv = out.data();
  args.count = count;
  group.checker().begin(args, 0);
  runAlgorithm(group.select(args.func, count * sizeof(float)), group.ctx(), args);
  return out;
}

TEST(Group, NumbersItsMembersInTheOrderGiven) {
  World world;
  const std::vector<int> members = {4, 1, 2};
  world.onEach(members, [&](int rank) {
    Group group(world.setup(members, rank));
    EXPECT_EQ(group.size(), 3);
    EXPECT_EQ(group.member(group.rank()), rank);
    EXPECT_FALSE(group.singleNode());  // no arena given: channels only
  });
}

TEST(Group, GathersStringsOfAnyLengthInMemberOrder) {
  World world;
  const std::vector<int> members = {4, 1, 2};
  world.onEach(members, [&](int rank) {
    Group group(world.setup(members, rank));
    std::vector<std::string> all = group.allGather(payload(rank));
    ASSERT_EQ(all.size(), members.size());
    for (size_t i = 0; i < members.size(); ++i) EXPECT_EQ(all[i], payload(members[i]));
  });
}

TEST(Group, RunsItsCollectivesWithItsOwnCallCheck) {
  World world;
  const std::vector<int> members = {3, 0, 4};
  const size_t count = 1001;
  world.onEach(members, [&](int rank) {
    Group group(world.setup(members, rank));
    for (int call = 0; call < 3; ++call) {
      std::vector<float> out = allReduce(group, rank, count);
      for (size_t i = 0; i < count; ++i)
        ASSERT_EQ(out[i], static_cast<float>(3 * i + 3 + 0 + 4)) << "element " << i;
    }
    EXPECT_EQ(group.checker().calls(), 3u);
  });
}

TEST(Group, TwoGroupsShareTheChannelsOneCallAfterAnother) {
  // A heterogeneous communicator's cluster and exchange wrap the same channels, each with its
  // own call check: their headers must meet the peer's wrapper of the same group.
  World world;
  std::vector<int> everyone(kRanks);
  std::iota(everyone.begin(), everyone.end(), 0);
  const std::vector<int> cluster = {1, 2, 3};
  world.onEach(everyone, [&](int rank) {
    Group whole(world.setup(everyone, rank));
    std::unique_ptr<Group> part;
    const bool inCluster = rank >= 1 && rank <= 3;
    if (inCluster) part = std::make_unique<Group>(world.setup(cluster, rank));
    for (int round = 0; round < 2; ++round) {
      std::vector<float> out = allReduce(whole, rank, 300);
      EXPECT_EQ(out[0], 0.0f + 1 + 2 + 3 + 4);
      if (!part) continue;
      out = allReduce(*part, rank, 5000);
      EXPECT_EQ(out[10], 6.0f + 30);
    }
  });
}

TEST(Group, LoomAlgoNamesTheNativeCollectivesThatFollow) {
  // Before the fix the table was made against the host algorithms at construction, so
  // LOOM_ALGO=allreduce:ll failed every CUDA communicator's creation.
  World world;
  GroupSetup setup = world.setup({0}, 0);
  setup.algo = "allreduce:bulk";  // a kernel's name (8 bytes would run "fast")
  setup.deviceName = "fake";
  setup.awaitsNative = true;
  Group group(std::move(setup));
  group.attachNative(std::make_unique<test::FakeNative>());
  EXPECT_STREQ(group.select(loomFuncAllReduce, 8).name, "bulk");

  // Without native collectives the host table follows, and a name it lacks is still an error.
  setup = world.setup({0}, 0);
  setup.algo = "allreduce:bulk";
  setup.awaitsNative = true;
  Group host(std::move(setup));
  EXPECT_THROW(host.attachNative(nullptr), Error);
}

}  // namespace
}  // namespace loom
