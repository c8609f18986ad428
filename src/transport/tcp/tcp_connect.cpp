#include "transport/tcp/tcp_connect.hpp"

#include <sstream>

#include "base/error.hpp"
#include "base/log.hpp"
#include "bootstrap/protocol.hpp"

namespace loom {

namespace {

// A connection's id in the hello: which peer, class and stream it carries.
struct ConnId {
  int rank, cls, stream;
};
int encodeId(const TcpSetup& s, ConnId c) {
  return (c.rank * s.classes + c.cls) * s.streams + c.stream;
}

// Opens `streams` connections per class to every lower remote rank, each named by a hello.
void connectLowerPeers(const TcpSetup& s, const std::vector<std::string>& endpoints,
                       TcpSockets& out) {
  const int totalIds = s.nranks * s.classes * s.streams;
  for (int p = 0; p < s.rank; ++p) {
    if (!s.remote[p]) continue;
    std::istringstream in(endpoints[p]);
    std::string host;
    int port = 0;
    if (!(in >> host >> port))
      LOOM_THROW(loomInternalError, s.names[p], " published no TCP endpoint ('", endpoints[p],
                 "')");
    for (int cls = 0; cls < s.classes; ++cls) {
      for (int k = 0; k < s.streams; ++k) {
        Socket sock = wire::connectAndHandshake(
            host, static_cast<uint16_t>(port),
            s.names[p] + " (" + joinHostPort(host, static_cast<uint16_t>(port)) + ")",
            wire::Channel::kData, s.secret, s.deadline, s.abortFlag, s.rank);
        wire::sendFrame(sock, wire::FrameType::kHello, encodeId(s, {s.rank, cls, k}),
                        static_cast<uint64_t>(totalIds), std::to_string(s.rank), s.deadline,
                        s.abortFlag);
        out[cls][p].push_back(std::move(sock));
      }
    }
  }
}

// Takes the connections of every higher remote rank from the listener; throws loomTimeout naming
// the ranks whose connections did not all arrive.
void acceptHigherPeers(const TcpSetup& s, const Listener& listener, int higherPeers,
                       TcpSockets& out) {
  const int totalIds = s.nranks * s.classes * s.streams;
  wire::GatherSpec spec;
  spec.channel = wire::Channel::kData;
  spec.secret = s.secret;
  spec.nranks = totalIds;
  spec.expected = higherPeers * s.classes * s.streams;
  spec.maxPayload = 32;
  spec.deadline = s.deadline;
  spec.abortFlag = s.abortFlag;
  spec.what = "TCP transport endpoint";
  spec.logRank = s.rank;
  spec.checkPayload = [&s](const std::string& body) -> std::string {
    int from = -1;
    std::istringstream(body) >> from;
    if (from <= s.rank || from >= s.nranks || !s.remote[from])
      return "a connection from rank '" + body + "', which should not connect here";
    return "";
  };
  wire::GatherResult got = wire::gatherHellos(listener.fd.get(), spec);
  std::string missing;
  for (int p = s.rank + 1; p < s.nranks; ++p) {
    if (!s.remote[p]) continue;
    for (int cls = 0; cls < s.classes; ++cls) {
      for (int k = 0; k < s.streams; ++k) {
        int id = encodeId(s, {p, cls, k});
        Socket& sock = got.sockets[id];
        if (!sock.valid() || got.payloads[id] != std::to_string(p)) {
          if (missing.find(s.names[p]) == std::string::npos)
            missing += (missing.empty() ? "" : ", ") + s.names[p];
          continue;
        }
        // The listener named it by connection id, "rank <id> (<address>)": keep the address.
        sock.setPeer(s.names[p] + " (" + sock.peer().substr(sock.peer().find('(') + 1));
        out[cls][p].push_back(std::move(sock));
      }
    }
  }
  if (!missing.empty())
    LOOM_THROW(loomTimeout, "TCP transport: ", missing,
               " did not connect to this rank in time (LOOM_TIMEOUT)");
}

}  // namespace

TcpSockets connectTcpPeers(const TcpSetup& s) {
  TcpSockets out(s.classes);
  for (auto& byPeer : out) byPeer.resize(s.nranks);
  int lowerPeers = 0, higherPeers = 0;
  for (int p = 0; p < s.nranks; ++p)
    if (s.remote[p]) (p < s.rank ? lowerPeers : higherPeers) += 1;

  Listener listener;
  std::string mine;
  if (lowerPeers + higherPeers > 0) {
    listener = listenTcp(s.itf.address, 0);
    mine = s.itf.address + " " + std::to_string(listener.port);
  }
  std::vector<std::string> endpoints = s.allGather(mine);

  // Connect to every lower remote rank first, then serve the higher ones: rank 0 serves at once,
  // and each rank's connects need only lower ranks to be serving, so the order cannot deadlock.
  connectLowerPeers(s, endpoints, out);
  if (higherPeers == 0) return out;
  acceptHigherPeers(s, listener, higherPeers, out);
  return out;
}

}  // namespace loom
