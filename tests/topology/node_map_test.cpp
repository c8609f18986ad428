#include "topology/node_map.hpp"

#include <gtest/gtest.h>

#include <cstdlib>

#include "device/cpu/cpu_device.hpp"

namespace loom {
namespace {

TEST(NodeMap, InterleavedPlacement) {
  // Ranks 0 and 2 on host A, 1 on host B.
  NodeMap map = NodeMap::fromHostIds({"A", "B", "A"});
  ASSERT_EQ(map.nodeCount(), 2);
  EXPECT_EQ(map.nodeOf(0), 0);
  EXPECT_EQ(map.nodeOf(1), 1);
  EXPECT_EQ(map.nodeOf(2), 0);
  EXPECT_EQ(map.localIndex(0), 0);
  EXPECT_EQ(map.localIndex(1), 0);
  EXPECT_EQ(map.localIndex(2), 1);
  EXPECT_EQ(map.members(0), (std::vector<int>{0, 2}));
  EXPECT_EQ(map.members(1), (std::vector<int>{1}));
  EXPECT_EQ(map.leaders(), (std::vector<int>{0, 1}));
  EXPECT_TRUE(map.isLeader(1));
  EXPECT_FALSE(map.isLeader(2));
  EXPECT_TRUE(map.sameNode(0, 2));
  EXPECT_FALSE(map.sameNode(0, 1));
  EXPECT_EQ(map.ranksWithLocalIndex(0), (std::vector<int>{0, 1}));
  EXPECT_EQ(map.ranksWithLocalIndex(1), (std::vector<int>{2}));
  EXPECT_EQ(map.maxNodeSize(), 2);
  EXPECT_FALSE(map.singleNode());
  EXPECT_EQ(map.describe(), "2 nodes: node 0 (leader 0) ranks 0,2; node 1 (leader 1) ranks 1");
}

TEST(NodeMap, UnevenNodesNumberedByLowestRank) {
  // 3 + 2, node B's first rank is 1, node A holds rank 0: A is node 0 whatever the names.
  NodeMap map = NodeMap::fromHostIds({"z", "a", "z", "a", "z"});
  ASSERT_EQ(map.nodeCount(), 2);
  EXPECT_EQ(map.members(0), (std::vector<int>{0, 2, 4}));
  EXPECT_EQ(map.members(1), (std::vector<int>{1, 3}));
  EXPECT_EQ(map.localSize(4), 3);
  EXPECT_EQ(map.localSize(3), 2);
  EXPECT_EQ(map.localIndex(4), 2);
  EXPECT_EQ(map.ranksWithLocalIndex(1), (std::vector<int>{2, 3}));
  EXPECT_EQ(map.ranksWithLocalIndex(2), (std::vector<int>{4}));
  EXPECT_TRUE(map.ranksWithLocalIndex(3).empty());
}

TEST(NodeMap, SingleNodeAndSingleRank) {
  NodeMap one = NodeMap::fromHostIds({"h", "h", "h"});
  EXPECT_TRUE(one.singleNode());
  EXPECT_EQ(one.leaders(), (std::vector<int>{0}));
  EXPECT_EQ(one.ranksWithLocalIndex(2), (std::vector<int>{2}));
  NodeMap solo = NodeMap::fromHostIds({"h"});
  EXPECT_EQ(solo.nodeCount(), 1);
  EXPECT_EQ(solo.localIndex(0), 0);
}

TEST(NodeMap, EveryRankItsOwnNode) {
  NodeMap map = NodeMap::fromHostIds({"a", "b", "c"});
  EXPECT_EQ(map.nodeCount(), 3);
  EXPECT_EQ(map.maxNodeSize(), 1);
  EXPECT_EQ(map.ranksWithLocalIndex(0), (std::vector<int>{0, 1, 2}));
}

TEST(NodeMap, ComputedFromRankInfos) {
  std::vector<RankInfo> infos(4);
  const char* ids[] = {"x", "y", "y", "x"};
  for (int r = 0; r < 4; ++r) infos[r].rank = r, infos[r].hostId = ids[r];
  NodeMap map = NodeMap::compute(infos);
  EXPECT_EQ(map.members(0), (std::vector<int>{0, 3}));
  EXPECT_EQ(map.members(1), (std::vector<int>{1, 2}));
}

TEST(NodeMap, LauncherLocalSizeIsOnlyCrossChecked) {
  NodeMap map = NodeMap::fromHostIds({"a", "b", "a"});
  EXPECT_EQ(localSizeMismatch(map, 0, std::nullopt), "");
  EXPECT_EQ(localSizeMismatch(map, 0, 2), "");
  EXPECT_EQ(localSizeMismatch(map, 1, 1), "");
  std::string why = localSizeMismatch(map, 1, 2);
  EXPECT_NE(why.find("launcher says this node runs 2 ranks"), std::string::npos) << why;
  EXPECT_NE(why.find("1 ranks report"), std::string::npos) << why;
}

TEST(NodeMap, LauncherLocalSizeFromEnvironment) {
  unsetenv("LOCAL_WORLD_SIZE");
  unsetenv("OMPI_COMM_WORLD_LOCAL_SIZE");
  EXPECT_FALSE(launcherLocalSize().has_value());
  setenv("OMPI_COMM_WORLD_LOCAL_SIZE", "3", 1);
  EXPECT_EQ(launcherLocalSize(), 3);
  setenv("LOCAL_WORLD_SIZE", "4", 1);  // torchrun's variable first
  EXPECT_EQ(launcherLocalSize(), 4);
  setenv("LOCAL_WORLD_SIZE", "four", 1);  // a hint that does not parse is ignored
  EXPECT_EQ(launcherLocalSize(), 3);
  unsetenv("LOCAL_WORLD_SIZE");
  unsetenv("OMPI_COMM_WORLD_LOCAL_SIZE");
}

TEST(NodeMap, NodeIdSplitsOneHost) {
  auto device = createCpuDevice();
  unsetenv("LOOM_NODE_ID");
  std::string plain = RankInfo::local(0, *device).hostId;
  setenv("LOOM_NODE_ID", "a", 1);
  std::string a = RankInfo::local(0, *device).hostId;
  setenv("LOOM_NODE_ID", "b", 1);
  std::string b = RankInfo::local(1, *device).hostId;
  unsetenv("LOOM_NODE_ID");
  EXPECT_NE(a, b);
  EXPECT_NE(a, plain);
  EXPECT_EQ(a.rfind(plain, 0), 0u) << "the node id extends the real identity";
  EXPECT_EQ(NodeMap::fromHostIds({a, b, a}).nodeCount(), 2);
}

}  // namespace
}  // namespace loom
