// The selector's choice by topology and size, and LOOM_ALGO's checks of "hierarchical".
#include <gtest/gtest.h>

#include <string>

#include "base/error.hpp"
#include "plan/selector.hpp"

namespace loom {
namespace {

SelectorInputs severalNodes(bool nodesShared) {
  SelectorInputs in;
  in.nranks = 4;
  in.sharedMemory = false;
  in.nodesShared = nodesShared;
  return in;
}

std::string thrownMessage(const SelectorInputs& in, const std::string& override) {
  try {
    Selector selector(in, override);
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), loomInvalidArgument);
    return e.what();
  }
  ADD_FAILURE() << "LOOM_ALGO=" << override << " was accepted";
  return "";
}

TEST(Selector, LargeCallsOnSharedNodesAreHierarchical) {
  Selector selector(severalNodes(true), "");
  for (loomFunc_t f : {loomFuncAllReduce, loomFuncAllGather, loomFuncReduceScatter}) {
    EXPECT_STREQ(selector.select(f, size_t{1} << 30).name, "hierarchical") << funcName(f);
    EXPECT_STREQ(selector.select(f, 8).name, "ring") << funcName(f);
  }
  // A chain crosses each node boundary once anyway: the ring stays the default.
  EXPECT_STREQ(selector.select(loomFuncBroadcast, size_t{1} << 30).name, "ring");
  EXPECT_STREQ(selector.select(loomFuncReduce, size_t{1} << 30).name, "ring");
  EXPECT_STREQ(selector.select(loomFuncAllToAll, size_t{1} << 30).name, "pairwise");
}

TEST(Selector, OneRankPerNodeStaysFlat) {
  Selector selector(severalNodes(false), "");
  EXPECT_STREQ(selector.select(loomFuncAllReduce, size_t{1} << 30).name, "ring");
  EXPECT_STREQ(selector.select(loomFuncAllGather, size_t{1} << 30).name, "ring");
}

TEST(Selector, ForcedHierarchicalAcrossNodes) {
  Selector selector(severalNodes(false),
                    "allreduce:hierarchical,allgather:hierarchical,alltoall:hierarchical");
  EXPECT_STREQ(selector.select(loomFuncAllReduce, 8).name, "hierarchical");
  EXPECT_STREQ(selector.select(loomFuncAllToAll, 8).name, "hierarchical");
  EXPECT_STREQ(selector.select(loomFuncAllGather, 8).name, "hierarchical");
  EXPECT_STREQ(selector.select(loomFuncReduceScatter, 8).name, "ring");
}

TEST(Selector, ForcedHierarchicalOnOneNodeKeepsTheArenaTable) {
  SelectorInputs in;
  in.nranks = 4;
  in.directMaxBytes = 1024;
  Selector selector(in, "allreduce:hierarchical");
  EXPECT_STREQ(selector.select(loomFuncAllReduce, 8).name, "direct");
  EXPECT_STREQ(selector.select(loomFuncAllReduce, 1 << 20).name, "pipelined");
}

TEST(Selector, HierarchicalRefusedWhereItDoesNotExist) {
  std::string why = thrownMessage(severalNodes(true), "alltoallv:hierarchical");
  EXPECT_NE(why.find("alltoallv has no algorithm 'hierarchical'"), std::string::npos) << why;
  why = thrownMessage(severalNodes(true), "allreduce:direct");
  EXPECT_NE(why.find("valid here: ring, hierarchical"), std::string::npos) << why;
  SelectorInputs cuda;
  cuda.device = DeviceKind::kCuda;
  why = thrownMessage(cuda, "allreduce:hierarchical");
  EXPECT_NE(why.find("for CUDA communicators"), std::string::npos) << why;
}

}  // namespace
}  // namespace loom
