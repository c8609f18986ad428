// A communicator's ways to its peers, set up once at init: its node's shared arena (abort word,
// staging slots, wait presence lines, pair channels), and per peer a channel for collectives and
// one for point-to-point: the arena's pair channels on this node, TCP or rudp to other nodes
// (LOOM_TRANSPORT, the same on every rank). Each group of ranks that runs collectives over the
// collective channels wraps them with its own mismatch check (comm/group.hpp).
//
// On failure shutDown() closes the network channels (their peers see EOF at once) and resets the
// rudp flows; the arena lingers until the transports go, after every channel that points into it.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "bootstrap/bootstrap.hpp"
#include "topology/node_map.hpp"
#include "topology/rank_info.hpp"
#include "transport/channel.hpp"
#include "transport/shm/shm_arena.hpp"
#include "transport/tcp/tcp_channel.hpp"

namespace loom {

class RudpEngine;

struct TransportSetup {
  int rank = 0;
  int nranks = 1;
  const std::vector<RankInfo>* ranks = nullptr;
  const NodeMap* nodes = nullptr;
  UniqueId id;                    // its secret derives the transports' own
  std::string transport = "tcp";  // between nodes: "tcp" or "rudp"
  int64_t timeoutMs = 600000;
  std::atomic<bool>* abortFlag = nullptr;
  // What every rank must agree on for collectives to meet, compared in the arena's name exchange.
  std::string settings;
  std::function<std::vector<std::string>(const std::string&)> allGather;  // the bootstrap's
  std::function<void()> barrier;
};

class Transports {
 public:
  explicit Transports(const TransportSetup& setup);
  ~Transports();
  Transports(const Transports&) = delete;
  Transports& operator=(const Transports&) = delete;

  ShmArena& arena() { return arena_; }
  const ShmArena& arena() const { return arena_; }
  bool singleNode() const { return singleNode_; }
  // By rank (null for this rank): the collective channels (unchecked; groups wrap them).
  Channel* collective(int peer) const { return collective_[peer].get(); }
  Channel* pointToPoint(int peer) const { return p2p_[peer].get(); }
  // "shm", "tcp" or "rudp": how this rank reaches `peer`.
  const char* to(int peer) const;
  // The network transport's counters per peer (rudp: retransmissions, RTT, ...); empty for tcp.
  std::string counters() const;
  const std::string& interface() const { return interface_; }  // "eth0 10.0.0.2" or empty
  // The communicator failed: every network channel closes, so peers learn it at once.
  void shutDown(const std::string& reason);

 private:
  void setUpArena(const TransportSetup& setup);
  void setUpTcp(const TransportSetup& setup);
  void setUpRudp(const TransportSetup& setup);

  int rank_;
  const NodeMap& nodes_;
  bool singleNode_;
  ShmArena arena_;
  // Declared before the channels: they point into it, and it outlives them (and lingers).
  std::unique_ptr<RudpEngine> rudp_;
  std::vector<std::unique_ptr<Channel>> collective_, p2p_;
  std::vector<TcpChannel*> tcp_;  // those of collective_ and p2p_ on TCP
  std::string interface_;
};

}  // namespace loom
