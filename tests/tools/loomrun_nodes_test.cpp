// Multi-node loomrun on one host: K loomruns on 127.0.0.1, one per "node", with the ranks they
// start printing their environment; failures on one node must end every node's loomrun.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <set>
#include <thread>
#include <utility>

#include "loomrun_runner.hpp"

namespace {

using namespace loomrun_test;

const char* kSecret = "0123456789abcdef0123456789abcdef";

int freePort() {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  inet_pton(AF_INET, "127.0.0.1", &addr.sin_addr);
  socklen_t len = sizeof(addr);
  int port = 0;
  if (bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0 &&
      getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0) {
    port = ntohs(addr.sin_port);
  }
  close(fd);
  return port;
}

// One loomrun per entry of `placement` (its extra flags, e.g. {"--ranks", "0,2"}), all started
// at once as nodes 0..K-1 of one job running `script`.
class Job {
 public:
  Job(const std::vector<std::vector<std::string>>& placement, const std::string& script,
      const std::vector<std::string>& common = {},
      std::vector<std::string> env = {std::string("LOOM_JOB_SECRET=") + kSecret}) {
    std::string master = "127.0.0.1:" + std::to_string(freePort());
    for (size_t node = 0; node < placement.size(); ++node) {
      std::vector<std::string> args = {"--nnodes",    std::to_string(placement.size()),
                                       "--node-rank", std::to_string(node),
                                       "--master",    master};
      args.insert(args.end(), placement[node].begin(), placement[node].end());
      args.insert(args.end(), common.begin(), common.end());
      args.insert(args.end(), {"--", "/bin/sh", "-c", script});
      nodes_.push_back(std::make_unique<Loomrun>(args, env));
    }
  }

  Loomrun& node(size_t i) { return *nodes_[i]; }

  std::vector<Result> finish() {
    std::vector<Result> results;
    for (auto& run : nodes_) {
      int status = run->finish();
      results.push_back({status, run->out(), run->err(), run->elapsedSec()});
    }
    return results;
  }

 private:
  std::vector<std::unique_ptr<Loomrun>> nodes_;
};

// rank -> its fields, over all nodes' output; checks that no rank printed twice.
std::map<int, std::map<std::string, std::string>> fieldsByRank(const std::vector<Result>& rs) {
  std::map<int, std::map<std::string, std::string>> byRank;
  for (size_t node = 0; node < rs.size(); ++node) {
    EXPECT_EQ(rs[node].status, 0) << "node " << node << ": " << rs[node].err;
    for (const std::string& line : lines(rs[node].out)) {
      auto [rank, rest] = splitPrefix(line);
      auto fields = parseFields(rest);
      EXPECT_EQ(fields["R"], std::to_string(rank)) << line;
      EXPECT_EQ(fields["G"], std::to_string(node)) << line;
      EXPECT_TRUE(byRank.emplace(rank, fields).second) << "rank " << rank << " printed twice";
    }
  }
  return byRank;
}

// Checks what every rank of a job must see, given each node's ranks.
void expectPlacement(const std::vector<std::vector<int>>& ranksOfNode,
                     const std::vector<std::vector<std::string>>& placement) {
  std::vector<Result> results = Job(placement, kEnvScript).finish();
  auto byRank = fieldsByRank(results);
  size_t world = 0;
  for (const auto& ranks : ranksOfNode) world += ranks.size();
  ASSERT_EQ(byRank.size(), world);
  const auto& first = byRank.at(0);
  EXPECT_EQ(first.at("C").rfind("127.0.0.1:", 0), 0u) << first.at("C");
  for (size_t node = 0; node < ranksOfNode.size(); ++node) {
    for (size_t local = 0; local < ranksOfNode[node].size(); ++local) {
      int rank = ranksOfNode[node][local];
      SCOPED_TRACE("rank " + std::to_string(rank));
      auto& f = byRank[rank];
      EXPECT_EQ(f["W"], std::to_string(world));
      EXPECT_EQ(f["LR"], std::to_string(local));
      EXPECT_EQ(f["LW"], std::to_string(ranksOfNode[node].size()));
      EXPECT_EQ(f["NR"], std::to_string(node));
      EXPECT_EQ(f["MA"], "127.0.0.1");
      EXPECT_EQ(f["MP"], first.at("MP"));
      EXPECT_EQ(f["C"], first.at("C"));
      EXPECT_EQ(f["S"], kSecret);
    }
  }
}

TEST(LoomrunNodes, TorchrunModelTwoNodesOfTwo) {
  expectPlacement({{0, 1}, {2, 3}}, {{"-n", "2"}, {"-n", "2"}});
}

TEST(LoomrunNodes, InterleavedRanksZeroAndTwoOnNodeA) {
  expectPlacement({{0, 2}, {1}}, {{"--ranks", "0,2", "--world-size", "3"}, {"--ranks", "1"}});
}

TEST(LoomrunNodes, UnevenThreePlusTwo) {
  expectPlacement({{0, 1, 2}, {3, 4}}, {{"--ranks", "0-2"}, {"--ranks", "3,4"}});
}

TEST(LoomrunNodes, ThreeNodesInterleaved) {
  expectPlacement({{0, 3}, {1, 4}, {2}},
                  {{"--ranks", "0,3"}, {"--ranks", "1,4"}, {"--ranks", "2"}});
}

TEST(LoomrunNodes, FailingRankStopsEveryNode) {
  Job job({{"-n", "2"}, {"-n", "2"}, {"-n", "2"}},
          "if [ $RANK = 3 ]; then sleep 0.3; echo bye >&2; exit 3; fi; exec sleep 100");
  std::vector<Result> rs = job.finish();
  for (size_t node = 0; node < rs.size(); ++node) {
    EXPECT_EQ(rs[node].status, 3) << "node " << node << ": " << rs[node].err;
    EXPECT_LT(rs[node].seconds, kStopLimitSec);
  }
  EXPECT_NE(rs[1].err.find("loomrun: rank 3 exited with status 3; stopping the other ranks"),
            std::string::npos)
      << rs[1].err;
  for (size_t node : {0u, 2u}) {
    EXPECT_NE(rs[node].err.find("loomrun: node 1: rank 3 exited with status 3; stopping the "
                                "local ranks"),
              std::string::npos)
        << rs[node].err;
  }
}

TEST(LoomrunNodes, NodeThatFinishedReportsALaterFailureElsewhere) {
  // Node 1's rank succeeds at once; node 0's fails later. Node 1 must not claim success.
  std::vector<Result> rs =
      Job({{"-n", "1"}, {"-n", "1"}}, "if [ $RANK = 0 ]; then sleep 0.5; exit 4; fi").finish();
  EXPECT_EQ(rs[0].status, 4) << rs[0].err;
  EXPECT_EQ(rs[1].status, 4) << rs[1].err;
  EXPECT_NE(rs[1].err.find("node 0: rank 0 exited with status 4"), std::string::npos) << rs[1].err;
}

TEST(LoomrunNodes, RankKilledBySignalOnWorkerNode) {
  std::vector<Result> rs = Job({{"--ranks", "0"}, {"--ranks", "1"}},
                               "if [ $RANK = 1 ]; then sleep 0.2; kill -9 $$; fi; exec sleep 100")
                               .finish();
  EXPECT_EQ(rs[0].status, 128 + 9) << rs[0].err;
  EXPECT_EQ(rs[1].status, 128 + 9) << rs[1].err;
  EXPECT_NE(rs[0].err.find("node 1: rank 1 killed by signal 9"), std::string::npos) << rs[0].err;
}

TEST(LoomrunNodes, KilledLoomrunIsNoticedByTheOthers) {
  Job job({{"-n", "1"}, {"-n", "1"}, {"-n", "1"}}, "echo up; exec sleep 100");
  ASSERT_TRUE(job.node(2).waitForLines(1, kStopLimitSec)) << job.node(2).err();
  job.node(2).signal(SIGKILL);
  std::vector<Result> rs = job.finish();
  EXPECT_EQ(rs[2].status, 128 + 9);
  for (size_t node : {0u, 1u}) {
    EXPECT_EQ(rs[node].status, 1) << "node " << node << ": " << rs[node].err;
    EXPECT_LT(rs[node].seconds, kStopLimitSec);
  }
  EXPECT_NE(rs[0].err.find("lost contact with node 2's loomrun"), std::string::npos) << rs[0].err;
}

TEST(LoomrunNodes, TimeoutOnOneNodeStopsAll) {
  std::vector<Result> rs =
      Job({{"-n", "1", "--timeout", "0.5"}, {"-n", "1"}}, "exec sleep 100").finish();
  EXPECT_EQ(rs[0].status, 124) << rs[0].err;
  EXPECT_EQ(rs[1].status, 124) << rs[1].err;
  EXPECT_NE(rs[1].err.find("node 0: timeout after 0.5 s"), std::string::npos) << rs[1].err;
}

TEST(LoomrunNodes, MultiNodeNeedsASharedHexSecret) {
  for (const std::string& env : {std::string("UNRELATED=1"), std::string("LOOM_JOB_SECRET=abc")}) {
    std::vector<Result> rs = Job({{"-n", "1"}, {"-n", "1"}}, "true", {}, {env}).finish();
    for (const Result& r : rs) {
      EXPECT_EQ(r.status, 1) << env;
      EXPECT_NE(r.err.find("LOOM_JOB_SECRET"), std::string::npos) << r.err;
    }
  }
}

TEST(LoomrunNodes, NodeWithAnotherSecretIsRefused) {
  std::string master = "127.0.0.1:" + std::to_string(freePort());
  std::vector<std::string> common = {"--nnodes",       "2",   "--master", master,
                                     "--join-timeout", "1.5", "-n",       "1"};
  std::vector<std::string> a = common;
  a.insert(a.end(), {"--node-rank", "0", "true"});
  std::vector<std::string> b = common;
  b.insert(b.end(), {"--node-rank", "1", "true"});
  Loomrun node0(a, {std::string("LOOM_JOB_SECRET=") + kSecret});
  Loomrun node1(b, {"LOOM_JOB_SECRET=ffffffffffffffffffffffffffffffff"});
  EXPECT_EQ(node0.finish(), 1);
  EXPECT_EQ(node1.finish(), 1);
  EXPECT_NE(node0.err().find("does not know this job's LOOM_JOB_SECRET"), std::string::npos)
      << node0.err();
  EXPECT_NE(node0.err().find("node(s) 1 did not join within"), std::string::npos) << node0.err();
  EXPECT_TRUE(node0.out().empty() && node1.out().empty());
}

TEST(LoomrunNodes, BadPlacementsAreRefusedByNodeZero) {
  const std::vector<std::pair<std::vector<std::vector<std::string>>, std::string>> cases = {
      {{{"--ranks", "0,1"}, {"--ranks", "1"}}, "rank 1 is claimed by nodes 0 and 1"},
      {{{"--ranks", "0"}, {"--ranks", "2"}}, "do not cover 0..1"},
      {{{"-n", "1"}, {"-n", "2"}}, "do not cover 0..2"},
      {{{"--ranks", "0", "--world-size", "3"}, {"--ranks", "1"}}, "does not match --world-size"},
  };
  for (const auto& [placement, expected] : cases) {
    std::vector<Result> rs = Job(placement, "echo should-not-run").finish();
    for (size_t node = 0; node < rs.size(); ++node) {
      EXPECT_EQ(rs[node].status, 1) << expected << ", node " << node << ": " << rs[node].err;
      EXPECT_NE(rs[node].err.find(expected), std::string::npos) << rs[node].err;
      EXPECT_TRUE(rs[node].out.empty()) << rs[node].out;
    }
  }
}

TEST(LoomrunNodes, RankZeroMustRunOnNodeZero) {
  std::vector<Result> rs =
      Job({{"--ranks", "1"}, {"--ranks", "0"}}, "true", {"--join-timeout", "1"}).finish();
  EXPECT_EQ(rs[0].status, 1);
  EXPECT_NE(rs[0].err.find("global rank 0 must run on node 0"), std::string::npos) << rs[0].err;
  EXPECT_EQ(rs[1].status, 1);
}

TEST(LoomrunNodes, MissingNodeEndsTheJoinWithinItsTimeout) {
  std::vector<std::string> args = {"--nnodes",
                                   "3",
                                   "--node-rank",
                                   "0",
                                   "--master",
                                   "127.0.0.1:" + std::to_string(freePort()),
                                   "--join-timeout",
                                   "1",
                                   "-n",
                                   "1",
                                   "true"};
  Result r = runLoomrun(args, {std::string("LOOM_JOB_SECRET=") + kSecret});
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.err.find("node(s) 1, 2 did not join within"), std::string::npos) << r.err;
}

TEST(LoomrunNodes, WorkerGivesUpWhenNodeZeroNeverListens) {
  std::vector<std::string> args = {"--nnodes",
                                   "2",
                                   "--node-rank",
                                   "1",
                                   "--master",
                                   "127.0.0.1:" + std::to_string(freePort()),
                                   "--join-timeout",
                                   "1",
                                   "-n",
                                   "1",
                                   "true"};
  Result r = runLoomrun(args, {std::string("LOOM_JOB_SECRET=") + kSecret});
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.err.find("cannot reach node 0's loomrun"), std::string::npos) << r.err;
}

// Stands in for node 0 at a worker's --master: relays connections to the real node 0, except
// that the first one is held silent (kSilent: node 0 never hears of it) or relayed with the
// worker's bytes swallowed (kSwallowHello: node 0 gives up on a HELLO that never comes).
class NodeZeroStandIn {
 public:
  enum class First { kSilent, kSwallowHello };
  NodeZeroStandIn(int realPort, First first) : realPort_(realPort), first_(first) {
    listener_ = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    addr_.sin_family = AF_INET;
    inet_pton(AF_INET, "127.0.0.1", &addr_.sin_addr);
    socklen_t len = sizeof(addr_);
    EXPECT_EQ(bind(listener_, reinterpret_cast<sockaddr*>(&addr_), sizeof(addr_)), 0);
    EXPECT_EQ(getsockname(listener_, reinterpret_cast<sockaddr*>(&addr_), &len), 0);
    EXPECT_EQ(listen(listener_, 4), 0);
    port_ = ntohs(addr_.sin_port);
    thread_ = std::thread([this] { run(); });
  }
  ~NodeZeroStandIn() {
    stop_ = true;
    thread_.join();
    close(listener_);
  }
  int port() const { return port_; }

 private:
  struct Relay {
    int worker, nodeZero;
    bool swallow;                    // the worker's bytes are dropped
    bool ended[2] = {false, false};  // a side reached EOF: no longer polled
  };
  void run() {
    std::vector<int> fds;
    bool firstSeen = false;
    std::vector<Relay> relays;
    while (!stop_) {
      std::vector<pollfd> pfds{{listener_, POLLIN, 0}};
      for (const Relay& r : relays) {
        pfds.push_back({r.ended[0] ? -1 : r.worker, POLLIN, 0});
        pfds.push_back({r.ended[1] ? -1 : r.nodeZero, POLLIN, 0});
      }
      if (poll(pfds.data(), pfds.size(), 100) <= 0) continue;
      const size_t polled = relays.size();  // accept() may add one, not in pfds yet
      if (pfds[0].revents != 0) accept(fds, firstSeen, relays);
      for (size_t i = 0; i < polled; ++i) {
        for (int side = 0; side < 2; ++side) {
          if (pfds[1 + 2 * i + side].revents == 0) continue;
          int from = side == 0 ? relays[i].worker : relays[i].nodeZero;
          int to = side == 0 ? relays[i].nodeZero : relays[i].worker;
          char buffer[4096];
          ssize_t n = read(from, buffer, sizeof(buffer));
          if (n <= 0) {
            shutdown(to, SHUT_WR);
            relays[i].ended[side] = true;
            continue;
          }
          if (side == 0 && relays[i].swallow) continue;
          EXPECT_EQ(write(to, buffer, static_cast<size_t>(n)), n);
        }
      }
    }
    for (int fd : fds) close(fd);
  }
  void accept(std::vector<int>& fds, bool& firstSeen, std::vector<Relay>& relays) {
    int fd = accept4(listener_, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) return;
    fds.push_back(fd);
    const bool first = !std::exchange(firstSeen, true);
    if (first && first_ == First::kSilent) return;  // held open, never written to
    // Node 0 starts beside the worker: give it a moment to listen.
    int up = -1;
    for (int attempt = 0; attempt < 500 && up < 0; ++attempt) {
      up = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
      sockaddr_in real = addr_;
      real.sin_port = htons(static_cast<uint16_t>(realPort_));
      if (connect(up, reinterpret_cast<sockaddr*>(&real), sizeof(real)) != 0) {
        close(up);
        up = -1;
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
      }
    }
    ASSERT_GE(up, 0) << "node 0 never listened";
    fds.push_back(up);
    relays.push_back({fd, up, first});
  }

  int realPort_;
  First first_;
  int listener_ = -1;
  sockaddr_in addr_{};
  int port_ = 0;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

std::vector<std::string> twoNodeArgs(int nodeRank, int port) {
  return {"--nnodes",
          "2",
          "--node-rank",
          std::to_string(nodeRank),
          "--master",
          "127.0.0.1:" + std::to_string(port),
          "--join-timeout",
          "30",
          "-n",
          "1",
          "--",
          "/bin/sh",
          "-c",
          "echo R=$RANK"};
}

// Node 0 and a worker whose --master is a stand-in (NodeZeroStandIn) that does `first` with the
// worker's first connection; both must finish the job.
struct StandInRun {
  int zeroStatus, workerStatus;
  std::string zeroErr, workerErr, workerOut;
};
StandInRun runThroughStandIn(NodeZeroStandIn::First first) {
  const int realPort = freePort();
  NodeZeroStandIn standIn(realPort, first);
  const std::vector<std::string> env = {std::string("LOOM_JOB_SECRET=") + kSecret};
  Loomrun nodeZero(twoNodeArgs(0, realPort), env);
  Loomrun worker(twoNodeArgs(1, standIn.port()), env);
  nodeZero.setHardLimit(25);
  worker.setHardLimit(25);
  StandInRun run;
  run.zeroStatus = nodeZero.finish();
  run.workerStatus = worker.finish();
  run.zeroErr = nodeZero.err();
  run.workerErr = worker.err();
  run.workerOut = worker.out();
  EXPECT_EQ(run.zeroStatus, 0) << run.zeroErr;
  EXPECT_EQ(run.workerStatus, 0) << run.workerErr;
  EXPECT_NE(run.workerOut.find("R=1"), std::string::npos) << run.workerOut;
  return run;
}

// A connection node 0 never got to know (its handshake's last ACK lost on a lossy link) is silent
// at the worker's end: the worker connects again rather than wait out the join timeout.
TEST(LoomrunNodes, WorkerConnectsAgainWhenNodeZeroStaysSilent) {
  StandInRun run = runThroughStandIn(NodeZeroStandIn::First::kSilent);
  EXPECT_NE(run.workerErr.find("said nothing"), std::string::npos) << run.workerErr;
}

// A HELLO that never reaches node 0 (lost on a lossy link) makes node 0 close the connection
// after its bound for a stranger: the worker connects again instead of failing the join.
TEST(LoomrunNodes, WorkerConnectsAgainWhenNodeZeroClosesBeforeStart) {
  StandInRun run = runThroughStandIn(NodeZeroStandIn::First::kSwallowHello);
  EXPECT_NE(run.zeroErr.find("no HELLO"), std::string::npos) << run.zeroErr;
  EXPECT_NE(run.workerErr.find("closed the connection before START"), std::string::npos)
      << run.workerErr;
}
}  // namespace
