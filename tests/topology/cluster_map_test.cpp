#include "topology/cluster_map.hpp"

#include <gtest/gtest.h>

#include "base/error.hpp"

namespace loom {
namespace {

std::vector<RankInfo> ranksOfKinds(const std::string& kinds) {
  std::vector<RankInfo> ranks;
  for (char k : kinds) {
    RankInfo r;
    r.rank = static_cast<int>(ranks.size());
    r.deviceKind = k == 'G' ? "cuda" : k == 'E' ? "loom-emu" : "cpu";
    ranks.push_back(r);
  }
  return ranks;
}

TEST(ClusterMap, OneKindIsOneCluster) {
  ClusterMap map = ClusterMap::compute(ranksOfKinds("CCCC"), "");
  EXPECT_EQ(map.count(), 1);
  EXPECT_FALSE(map.heterogeneous());
  EXPECT_EQ(map.members(0), (std::vector<int>{0, 1, 2, 3}));
  EXPECT_EQ(map.describe(), "1 cluster: cluster 0 (cpu) ranks 0,1,2,3");
}

TEST(ClusterMap, KindsInAnyPlacement) {
  // E C E C C: non-contiguous, uneven; clusters numbered by their lowest rank.
  ClusterMap map = ClusterMap::compute(ranksOfKinds("ECECC"), "");
  ASSERT_EQ(map.count(), 2);
  EXPECT_TRUE(map.heterogeneous());
  EXPECT_EQ(map.kind(0), "loom-emu");
  EXPECT_EQ(map.members(0), (std::vector<int>{0, 2}));
  EXPECT_EQ(map.members(1), (std::vector<int>{1, 3, 4}));
  EXPECT_EQ(map.clusterOf(3), 1);
  EXPECT_EQ(map.localIndex(4), 2);
  EXPECT_EQ(map.leader(1), 1);
  EXPECT_EQ(map.describe(),
            "2 clusters: cluster 0 (loom-emu) ranks 0,2; cluster 1 (cpu) ranks 1,3,4");
  // Three kinds.
  ClusterMap three = ClusterMap::compute(ranksOfKinds("CGEC"), "");
  EXPECT_EQ(three.count(), 3);
  EXPECT_EQ(three.members(2), (std::vector<int>{2}));
}

TEST(ClusterMap, SplitBySizes) {
  ClusterMap map = ClusterMap::compute(ranksOfKinds("CCCCC"), "2,3");
  ASSERT_EQ(map.count(), 2);
  EXPECT_EQ(map.members(0), (std::vector<int>{0, 1}));
  EXPECT_EQ(map.members(1), (std::vector<int>{2, 3, 4}));
  // A block holding two kinds is two clusters.
  ClusterMap mixed = ClusterMap::compute(ranksOfKinds("CECC"), "2,2");
  ASSERT_EQ(mixed.count(), 3);
  EXPECT_EQ(mixed.members(0), (std::vector<int>{0}));
  EXPECT_EQ(mixed.members(1), (std::vector<int>{1}));
  EXPECT_EQ(mixed.members(2), (std::vector<int>{2, 3}));
}

TEST(ClusterMap, SplitByRankSets) {
  ClusterMap map = ClusterMap::compute(ranksOfKinds("CCCCC"), "0,2;1,3-4");
  ASSERT_EQ(map.count(), 2);
  EXPECT_EQ(map.members(0), (std::vector<int>{0, 2}));
  EXPECT_EQ(map.members(1), (std::vector<int>{1, 3, 4}));
  ClusterMap single = ClusterMap::compute(ranksOfKinds("CCC"), "0;1;2");
  EXPECT_EQ(single.count(), 3);
}

TEST(ClusterMap, BadSplitsNameTheProblem) {
  auto message = [](const std::string& spec, int n) {
    try {
      parseClusterSplit(spec, n);
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), loomInvalidArgument);
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(message("2,2", 5).find("add up to 4, not to the communicator's 5"), std::string::npos);
  EXPECT_NE(message("2,x", 5).find("'x' is not a rank"), std::string::npos);
  EXPECT_NE(message("0,0", 5).find("must be positive"), std::string::npos);
  EXPECT_NE(message("0,1;1,2", 3).find("rank 1 is in two sets"), std::string::npos);
  EXPECT_NE(message("0;1", 3).find("rank 2 is in no set"), std::string::npos);
  EXPECT_NE(message("0;7", 3).find("'7' is not a rank of 3"), std::string::npos);
  EXPECT_NE(message("0-2;", 3).find("an empty rank set"), std::string::npos);
  EXPECT_NE(message("2-1;0", 3).find("is empty"), std::string::npos);
}

}  // namespace
}  // namespace loom
