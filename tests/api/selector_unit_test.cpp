// The selector's choice by topology and size, and LOOM_ALGO's checks of "hierarchical".
#include <gtest/gtest.h>

#include <string>

#include "../device/fake_native.hpp"
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
  for (loomFunc_t f :
       {loomFuncAllReduce, loomFuncAllGather, loomFuncReduceScatter, loomFuncReduce}) {
    EXPECT_STREQ(selector.select(f, size_t{1} << 30).name, "hierarchical") << funcName(f);
    EXPECT_STREQ(selector.select(f, 8).name, "ring") << funcName(f);
  }
  // A chain crosses each node boundary once anyway: the ring stays the default.
  EXPECT_STREQ(selector.select(loomFuncBroadcast, size_t{1} << 30).name, "ring");
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
}

// A backend's native collectives bring their own algorithms and rows; the host table is not used
// (test::FakeNative: "fast" up to 4 KiB, "bulk" above, for every collective).
using test::FakeNative;

SelectorInputs nativeInputs(const FakeNative& native, std::vector<Algorithm>& table) {
  table = nativeAlgorithms(native);
  SelectorInputs in;
  in.nranks = 4;
  in.device = "fake";
  in.native = &table;
  in.nativeRows = native.selectorRows();
  return in;
}

TEST(Selector, NativeRowsChooseTheBackendsAlgorithms) {
  FakeNative native;
  std::vector<Algorithm> table;
  Selector selector(nativeInputs(native, table), "");
  EXPECT_STREQ(selector.select(loomFuncAllReduce, 4096).name, "fast");
  EXPECT_STREQ(selector.select(loomFuncAllReduce, 4097).name, "bulk");
  EXPECT_STREQ(selector.select(loomFuncAllReduce, size_t{1} << 40).name, "bulk");
  EXPECT_GE(selector.select(loomFuncAllReduce, 8).native, 0);
  EXPECT_NE(selector.explain().find("allreduce=fast<=4096B<bulk"), std::string::npos)
      << selector.explain();
  Selector forced(nativeInputs(native, table), "allgather:bulk");
  EXPECT_STREQ(forced.select(loomFuncAllGather, 8).name, "bulk");
  std::string why = thrownMessage(nativeInputs(native, table), "allreduce:ring");
  EXPECT_NE(why.find("no algorithm 'ring' for fake communicators (choices: fast, bulk)"),
            std::string::npos)
      << why;
}

}  // namespace
}  // namespace loom
