// The link between the loomruns of a multi-node job (one loomrun per node, torchrun's model).
//
// Node 0's loomrun listens at --master; every other loomrun connects, proves it knows
// LOOM_JOB_SECRET and says which ranks it runs. Node 0 checks that the nodes' ranks cover
// 0..W-1 exactly once, picks the ports of the job (MASTER_PORT and LOOM_COMM_ID, both on node 0,
// where global rank 0 runs) and answers START to everyone. The connections stay open for the
// whole job: they carry a heartbeat and each node's verdict, so that a failure anywhere stops
// every node, and a vanished loomrun is noticed without waiting for the job timeout.
//
// Lines on the wire, after the handshake described in loomrun_nodes.cpp:
//   PING                     heartbeat, both ways, every second
//   DONE                     worker -> node 0: all my ranks exited 0
//   FAIL <code> <reason>     worker -> node 0: my job failed; I am stopping my ranks
//   ABORT <code> <reason>    node 0 -> workers: stop your ranks and exit with <code>
//   END                      node 0 -> workers: every node is done; exit 0
#pragma once

#include <poll.h>

#include <chrono>
#include <optional>
#include <string>
#include <vector>

#include "loomrun_job.hpp"
#include "loomrun_options.hpp"

namespace loom::launcher {

// What the other nodes decided, for the launcher's event loop.
struct NodeEvent {
  enum class Kind { kAbort, kFinished };
  Kind kind = Kind::kAbort;
  int exitCode = 1;
  std::string reason;  // for kAbort: who failed and how, e.g. "node 1: rank 3 exited ..."
};

class NodeLink {
 public:
  NodeLink() = default;
  NodeLink(const NodeLink&) = delete;
  NodeLink& operator=(const NodeLink&) = delete;
  ~NodeLink();

  // Meets the other loomruns, within options.joinTimeoutSec. Fills `job` (ports, secret) and
  // sets options.worldSizeOption to the job's world size. False with `error` set on failure.
  bool establish(LaunchOptions& options, JobInfo& job, std::string& error);

  // Descriptors to poll for input, and how long poll may sleep before the next heartbeat.
  void appendPollFds(std::vector<pollfd>& fds) const;
  int nextWakeMs() const;

  // Reads what arrived, sends heartbeats and notices silent peers. Call after every poll.
  std::optional<NodeEvent> service();

  // This node's ranks failed (or were stopped locally): tell the others, once.
  void reportFailure(int exitCode, const std::string& reason);
  // This node's ranks all exited 0.
  std::optional<NodeEvent> reportLocalSuccess();

  // True once the job's outcome is known here, so loomrun may exit when its ranks are gone.
  bool concluded() const { return aborted_ || finished_; }

 private:
  using Clock = std::chrono::steady_clock;

  struct Peer {
    int fd = -1;
    int nodeRank = 0;
    std::string inbox;
    Clock::time_point lastHeard;
    bool done = false;    // sent DONE (node 0's view of a worker)
    bool closed = false;  // no more to read; EOF expected or already handled
  };

  bool isMaster() const { return nodeRank_ == 0; }
  std::optional<NodeEvent> onLine(Peer& peer, const std::string& line);
  std::optional<NodeEvent> onLost(Peer& peer, const std::string& why);
  std::optional<NodeEvent> finishIfAllDone();
  void sendAll(const std::string& line, const Peer* except = nullptr);
  void send(Peer& peer, const std::string& line);
  void closePeer(Peer& peer);

  int nodeRank_ = 0;
  std::vector<Peer> peers_;  // node 0: one per worker; a worker: node 0 only
  bool localDone_ = false;
  bool aborted_ = false;
  bool finished_ = false;
  Clock::time_point lastPing_;
};

}  // namespace loom::launcher
