// The schedule as data (lanes, dependencies, hash, description) and the simulator that checks
// schedules without ranks: it runs a matched exchange and names the rank, lane and operation of
// what cannot finish.
#include "exec/schedule.hpp"

#include <gtest/gtest.h>

#include <cstring>
#include <numeric>

#include "exec/simulate.hpp"

namespace loom {
namespace {

// Two ranks swap their 16-byte inputs into their outputs' second halves and copy their own into
// the first half.
void buildSwap(Schedule& s, int rank) {
  s.clear(2);
  s.setExtents(16, 32);
  const int peer = 1 - rank;
  s.copy(s.output(), s.input(), 16, true);
  s.send(peer, s.input(), 16);
  s.recv(peer, s.output(16), 16, true);
  s.finish();
}

TEST(Schedule, LanesHoldTheirOperationsInOrder) {
  Schedule s;
  s.clear(3);
  s.setExtents(64, 64);
  const uint32_t a = s.send(2, s.input(), 8);
  const uint32_t b = s.recv(1, s.output(), 8);
  const uint32_t c = s.send(2, s.input(8), 8);
  const uint32_t d = s.copy(s.output(8), s.input(8), 8);
  s.after(c, b);
  s.streamAfter(d, b);
  s.finish();
  ASSERT_EQ(s.lanes().size(), 3u);
  const ScheduleLane& toTwo = s.lanes()[s.ops()[a].lane];
  EXPECT_EQ(toTwo.kind, LaneKind::kSendTo);
  EXPECT_EQ(toTwo.peer, 2);
  ASSERT_EQ(toTwo.end - toTwo.begin, 2u);
  EXPECT_EQ(s.laneOps()[toTwo.begin], a);
  EXPECT_EQ(s.laneOps()[toTwo.begin + 1], c);
  ASSERT_EQ(s.ops()[c].depEnd - s.ops()[c].depBegin, 1u);
  EXPECT_EQ(s.deps()[s.ops()[c].depBegin].on, b);
  EXPECT_FALSE(s.deps()[s.ops()[c].depBegin].streamed);
  EXPECT_TRUE(s.deps()[s.ops()[d].depBegin].streamed);
  const std::string text = s.describe();
  EXPECT_NE(text.find("lane send to 2"), std::string::npos) << text;
  EXPECT_NE(text.find("after #1"), std::string::npos) << text;
  EXPECT_NE(text.find("after ~#1"), std::string::npos) << text;
}

// Builds one of the shapes below into `s` and says whether it relays.
bool relaysWhenBuiltAs(Schedule& s, int shape) {
  s.clear(3);
  s.setExtents(16, 16);
  const Reduction sum{loomFloat32, loomSum};
  switch (shape) {
    case 0: {  // pairwise: sends and receives that wait for nothing
      s.send(2, s.input(), 8);
      s.recv(1, s.output(), 8);
      break;
    }
    case 1: {  // a send after local work on the input only
      const uint32_t copy = s.copy(s.output(8), s.input(), 8);
      s.recv(1, s.output(), 8);
      s.after(s.send(2, s.output(8), 8), copy);
      break;
    }
    case 2: {  // a chain's step: pass on what arrived
      const uint32_t recv = s.recv(1, s.output(), 8);
      s.after(s.send(2, s.output(), 8), recv);
      break;
    }
    case 3: {  // a ring's reduce-scatter step: forward the partial sum as it is reduced
      const uint32_t reduced = s.recvReduce(1, s.output(), s.input(), 8, sum);
      s.streamAfter(s.send(2, s.output(), 8), reduced);
      break;
    }
    case 4: {  // through local work: receive, copy, send the copy (an unfused plan's step)
      const uint32_t recv = s.recv(1, s.output(), 8);
      const uint32_t copy = s.copy(s.output(8), s.output(), 8);
      s.after(copy, recv);
      s.after(s.send(2, s.output(8), 8), copy);
      break;
    }
  }
  s.finish();
  return s.relays();
}

TEST(Schedule, RelaysWhenASendWaitsForAReceive) {
  Schedule s;
  EXPECT_FALSE(relaysWhenBuiltAs(s, 0)) << "pairwise";
  EXPECT_FALSE(relaysWhenBuiltAs(s, 1)) << "a send after local work on the input";
  EXPECT_TRUE(relaysWhenBuiltAs(s, 2)) << "a chain's step";
  EXPECT_TRUE(relaysWhenBuiltAs(s, 3)) << "a ring's streamed reduce-scatter step";
  EXPECT_TRUE(relaysWhenBuiltAs(s, 4)) << "a relay through a local copy";
  EXPECT_FALSE(relaysWhenBuiltAs(s, 0)) << "a rebuild into the same storage finds it anew";
}

TEST(Schedule, HashIsOfContentNotOfTheBuild) {
  Schedule a, b;
  buildSwap(a, 0);
  buildSwap(b, 0);
  EXPECT_EQ(a.hash(), b.hash());
  buildSwap(b, 1);
  EXPECT_NE(a.hash(), b.hash());
  // Rebuilding into the same storage gives the same schedule again.
  buildSwap(a, 1);
  EXPECT_EQ(a.hash(), b.hash());
}

TEST(Simulator, RunsAMatchedExchangeWithData) {
  Schedule s[2];
  std::vector<char> in[2], out[2];
  std::vector<SimulatedRank> ranks(2);
  for (int r = 0; r < 2; ++r) {
    buildSwap(s[r], r);
    in[r].assign(16, static_cast<char>('a' + r));
    out[r].assign(32, 0);
    ranks[r].schedule = &s[r];
    ranks[r].buffers = {in[r].data(), out[r].data()};
  }
  SimulationResult result = simulateSchedules(ranks);
  ASSERT_TRUE(result.ok) << result.problem;
  EXPECT_EQ(result.unwritten(), "");
  EXPECT_EQ(out[0][0], 'a');
  EXPECT_EQ(out[0][16], 'b');
  EXPECT_EQ(out[1][16], 'a');
}

TEST(Simulator, RunsGatedWorkAsIfItsGatesWereOpen) {
  // A gate is the driver's hand-over (Executor::open); without a driver the simulator takes it as
  // open once its dependencies are, so a gated exchange still checks.
  Schedule s[2];
  std::vector<char> in[2], out[2];
  std::vector<SimulatedRank> ranks(2);
  for (int r = 0; r < 2; ++r) {
    s[r].clear(2);
    s[r].setExtents(16, 16);
    const uint32_t gate = s[r].gate(1);
    s[r].after(s[r].send(1 - r, s[r].input(), 16), gate);
    s[r].recv(1 - r, s[r].output(), 16, true);
    s[r].finish();
    const std::string text = s[r].describe();
    EXPECT_NE(text.find("#0 gate\n"), std::string::npos) << text;
    EXPECT_NE(text.find("after #0"), std::string::npos) << text;
    in[r].assign(16, static_cast<char>('a' + r));
    out[r].assign(16, 0);
    ranks[r].schedule = &s[r];
    ranks[r].buffers = {in[r].data(), out[r].data()};
  }
  SimulationResult result = simulateSchedules(ranks);
  ASSERT_TRUE(result.ok) << result.problem;
  EXPECT_EQ(out[0][0], 'b');
  EXPECT_EQ(out[1][15], 'a');
}

TEST(Simulator, NamesAReceiveWithoutItsSend) {
  Schedule s[2];
  buildSwap(s[0], 0);
  s[1].clear(2);
  s[1].setExtents(16, 32);
  s[1].recv(0, s[1].output(16), 16, true);
  s[1].finish();
  std::vector<SimulatedRank> ranks = {{&s[0], {}}, {&s[1], {}}};
  SimulationResult result = simulateSchedules(ranks);
  ASSERT_FALSE(result.ok);
  EXPECT_NE(result.problem.find("rank 0, lane recv from 1"), std::string::npos) << result.problem;
}

TEST(Simulator, NamesASizeMismatch) {
  Schedule s[2];
  buildSwap(s[0], 0);
  s[1].clear(2);
  s[1].setExtents(16, 32);
  s[1].send(0, s[1].input(), 8);
  s[1].recv(0, s[1].output(16), 16, true);
  s[1].finish();
  std::vector<SimulatedRank> ranks = {{&s[0], {}}, {&s[1], {}}};
  SimulationResult result = simulateSchedules(ranks);
  ASSERT_FALSE(result.ok);
  EXPECT_NE(result.problem.find("receives a transfer of 8 B from rank 1"), std::string::npos)
      << result.problem;
}

TEST(Simulator, FindsACycleOfWaits) {
  // Each rank sends only after receiving: nobody starts.
  Schedule s[2];
  for (int r = 0; r < 2; ++r) {
    s[r].clear(2);
    s[r].setExtents(8, 8);
    const uint32_t recv = s[r].recv(1 - r, s[r].output(), 8, true);
    s[r].after(s[r].send(1 - r, s[r].input(), 8), recv);
    s[r].finish();
  }
  std::vector<SimulatedRank> ranks = {{&s[0], {}}, {&s[1], {}}};
  SimulationResult result = simulateSchedules(ranks);
  ASSERT_FALSE(result.ok);
  EXPECT_NE(result.problem.find("no operation can go on"), std::string::npos) << result.problem;
  EXPECT_NE(result.problem.find("rank 1, lane send to 0"), std::string::npos) << result.problem;
}

TEST(Simulator, FindsUnreadBytesAndUnwrittenOutput) {
  Schedule s[2];
  for (int r = 0; r < 2; ++r) {
    s[r].clear(2);
    s[r].setExtents(8, 16);
    if (r == 0) s[r].send(1, s[r].input(), 8);
    s[r].copy(s[r].output(), s[r].input(), 8, true);
    s[r].finish();
  }
  std::vector<SimulatedRank> ranks = {{&s[0], {}}, {&s[1], {}}};
  SimulationResult result = simulateSchedules(ranks);
  ASSERT_FALSE(result.ok);
  EXPECT_NE(result.problem.find("rank 0 sent rank 1 8 B that it never received"), std::string::npos)
      << result.problem;
  EXPECT_EQ(result.unwritten(), "rank 0: bytes 8-15; rank 1: bytes 8-15");
}

TEST(Simulator, RefusesAnOperationPastItsBuffer) {
  Schedule s;
  s.clear(1);
  s.setExtents(8, 8);
  s.copy(s.output(4), s.input(), 8, true);
  s.finish();
  std::vector<SimulatedRank> ranks = {{&s, {}}};
  SimulationResult result = simulateSchedules(ranks);
  ASSERT_FALSE(result.ok);
  EXPECT_NE(result.problem.find("past the end of a buffer"), std::string::npos) << result.problem;
}

}  // namespace
}  // namespace loom
