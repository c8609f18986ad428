// Connection setup of the TCP transport: every rank listens on its chosen interface, the
// listening addresses travel through the bootstrap's all-gather, and each pair of ranks on
// different nodes opens `streams` connections per channel class, the higher rank connecting to
// the lower one. Every connection passes the bootstrap's handshake (job secret, never on the
// wire) and then names itself in a hello, so the listener knows which peer and stream it is.
#pragma once

#include <atomic>
#include <functional>
#include <string>
#include <vector>

#include "bootstrap/bootstrap.hpp"
#include "bootstrap/socket.hpp"
#include "transport/tcp/interfaces.hpp"

namespace loom {

struct TcpSetup {
  int rank = 0;
  int nranks = 1;
  std::vector<bool> remote;        // by rank: reached over TCP
  std::vector<std::string> names;  // by rank: "rank 3 on hostB", for every error message
  int classes = 1;                 // independent byte streams per pair (collectives, p2p, ...)
  int streams = 1;                 // connections per pair and class
  NetInterface itf;                // where this rank listens
  JobSecret secret;
  std::function<std::vector<std::string>(const std::string&)> allGather;  // the bootstrap's
  Deadline deadline;
  const std::atomic<bool>* abortFlag = nullptr;
};

// sockets[cls][peer]: `streams` connected sockets, in the same order on both ends (empty for
// peers that are not remote). Throws loomTimeout naming the peers that never connected.
using TcpSockets = std::vector<std::vector<std::vector<Socket>>>;
TcpSockets connectTcpPeers(const TcpSetup& setup);

}  // namespace loom
