// The server half of the bootstrap: the concurrent hello-gathering loop (shared by the rendezvous
// root and rank 0's control endpoint) and the detached rendezvous root thread.
#include <ifaddrs.h>
#include <net/if.h>
#include <netdb.h>
#include <netinet/in.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <thread>

#include "base/error.hpp"
#include "base/log.hpp"
#include "bootstrap/protocol.hpp"

namespace loom {

namespace wire {
namespace {

using Clock = std::chrono::steady_clock;

// Unauthenticated connections held at once; more are refused so a flood cannot exhaust fds.
constexpr size_t kMaxPending = 256;

struct PendingConn {
  Socket sock;
  Deadline deadline;
  Nonce serverNonce{};
  std::array<uint8_t, kResponseBytes> response{};
  size_t responseHave = 0;
  bool authenticated = false;
  FrameReader reader;
};

class Gatherer {
 public:
  Gatherer(int listenFd, const GatherSpec& spec) : listenFd_(listenFd), spec_(spec) {
    result_.nranks = spec.nranks;
    if (spec.nranks > 0) resize(spec.nranks);
  }

  GatherResult run();

 private:
  int expected() const {
    if (spec_.expected >= 0) return spec_.expected;
    bool local = spec_.localRank >= 0 && spec_.localRank < result_.nranks;
    return result_.nranks - (local ? 1 : 0);
  }
  void resize(int nranks) {
    result_.sockets.clear();
    result_.sockets.resize(nranks);
    result_.payloads.assign(nranks, std::string());
  }
  void acceptNew();
  // Advances one pending connection; true when it leaves the pending list (registered or dropped).
  bool advance(PendingConn& conn);
  void onHello(PendingConn& conn, Frame hello);
  // Why a hello cannot be accepted, or "" if it can.
  std::string validate(const PendingConn& conn, const Frame& hello);
  void refuse(PendingConn& conn, const std::string& why);
  void watchRegistered(int rank);

  // While waiting: which ranks have not arrived, so that a job whose peers never come is not
  // silent until its timeout. Said once the first interval has passed, then again only when the
  // picture changes (a rank arrived or left), looked at every interval.
  void reportProgress(Deadline now);

  int listenFd_;
  const GatherSpec& spec_;
  GatherResult result_;
  std::vector<PendingConn> pending_;
  Deadline started_ = Clock::now();
  Deadline nextReport_ = started_ + progressInterval();
  std::string reported_;  // the picture last reported ("" : none yet)

  // 5 s, or a quarter of a shorter timeout, so that a report comes before the timeout does.
  std::chrono::milliseconds progressInterval() const {
    auto total = std::chrono::duration_cast<std::chrono::milliseconds>(spec_.deadline - started_);
    return std::clamp(total / 4, std::chrono::milliseconds(100), std::chrono::milliseconds(5000));
  }
};

void Gatherer::reportProgress(Deadline now) {
  if (now < nextReport_) return;
  nextReport_ = now + progressInterval();
  const auto seconds = [](Deadline::duration d) {
    char text[32];
    std::snprintf(text, sizeof(text), "%.1f", std::chrono::duration<double>(d).count());
    return std::string(text);
  };
  const std::string picture =
      result_.nranks == 0
          ? std::string("none")
          : std::to_string(result_.arrived) + " of " + std::to_string(expected()) +
                " ranks arrived; waiting for ranks " + result_.missingRanks(spec_.localRank);
  if (picture == reported_) return;
  const std::string waited = seconds(now - started_);
  const std::string left = seconds(spec_.deadline - now);
  const char* again = reported_.empty() ? "" : " (changed)";
  reported_ = picture;
  if (result_.nranks == 0) {
    LOOM_WARN(kSubsysBootstrap, spec_.logRank, spec_.what, ": waited ", waited,
              " s, no rank has arrived yet (timeout in ", left, " s; said again only when this ",
              "changes)");
    return;
  }
  LOOM_WARN(kSubsysBootstrap, spec_.logRank, spec_.what, ": waited ", waited, " s", again, ", ",
            picture, " (timeout in ", left, " s; said again only when this changes)");
}

GatherResult Gatherer::run() {
  while (!(result_.nranks > 0 && result_.arrived == expected())) {
    throwIfAborted(spec_.abortFlag);
    Deadline now = Clock::now();
    if (now >= spec_.deadline) return std::move(result_);

    reportProgress(now);
    std::vector<pollfd> fds{{listenFd_, POLLIN, 0}};
    Deadline wake = std::min(spec_.deadline, nextReport_);
    for (const PendingConn& c : pending_) {
      fds.push_back({c.sock.fd(), POLLIN, 0});
      wake = std::min(wake, c.deadline);
    }
    std::vector<int> registeredRanks;
    for (int r = 0; r < static_cast<int>(result_.sockets.size()); ++r) {
      if (!result_.sockets[r].valid()) continue;
      fds.push_back({result_.sockets[r].fd(), POLLIN, 0});  // to notice a rank that went away
      registeredRanks.push_back(r);
    }
    pollSlice(fds, wake);

    // Pending first: indices in fds match pending_ only before acceptNew appends to it.
    std::vector<bool> leave(pending_.size(), false);
    now = Clock::now();
    for (size_t i = 0; i < pending_.size(); ++i) {
      if (fds[1 + i].revents != 0) {
        leave[i] = advance(pending_[i]);
      } else if (now >= pending_[i].deadline) {
        LOOM_WARN(kSubsysBootstrap, spec_.logRank, spec_.what, ": dropped connection from ",
                  pending_[i].sock.peer(), ": no valid handshake within ", kHandshakeTimeoutMs,
                  " ms");
        leave[i] = true;
      }
    }
    for (size_t i = 0; i < registeredRanks.size(); ++i)
      if (fds[1 + pending_.size() + i].revents != 0) watchRegistered(registeredRanks[i]);
    size_t kept = 0;
    for (size_t i = 0; i < pending_.size(); ++i) {
      if (leave[i]) continue;
      if (kept != i)
        pending_[kept] = std::move(pending_[i]);  // never self-move: it empties strings
      ++kept;
    }
    pending_.resize(kept);
    if (fds[0].revents != 0) acceptNew();
  }
  result_.complete = true;
  return std::move(result_);
}

void Gatherer::acceptNew() {
  for (int i = 0; i < 64; ++i) {
    Socket sock = acceptSome(listenFd_);
    if (!sock.valid()) return;
    if (pending_.size() >= kMaxPending) {
      LOOM_WARN(kSubsysBootstrap, spec_.logRank, spec_.what, ": refused connection from ",
                sock.peer(), ": too many unauthenticated connections");
      continue;
    }
    PendingConn conn;
    conn.sock = std::move(sock);
    conn.deadline = std::min(spec_.deadline, deadlineAfterMs(kHandshakeTimeoutMs));
    randomBytes(conn.serverNonce.data(), conn.serverNonce.size());
    std::string challenge = encodeChallenge(spec_.channel, conn.serverNonce);
    try {
      // A fresh socket's send buffer always takes these few bytes at once.
      if (conn.sock.sendSome(challenge.data(), challenge.size()) != challenge.size()) continue;
    } catch (const Error& e) {
      LOOM_INFO(kSubsysBootstrap, spec_.logRank, spec_.what, ": ", e.what());
      continue;
    }
    pending_.push_back(std::move(conn));
  }
}

bool Gatherer::advance(PendingConn& conn) {
  try {
    if (!conn.authenticated) {
      conn.responseHave += conn.sock.recvSome(conn.response.data() + conn.responseHave,
                                              kResponseBytes - conn.responseHave);
      if (conn.responseHave < kResponseBytes) return false;
      Nonce clientNonce;
      std::memcpy(clientNonce.data(), conn.response.data(), kNonceBytes);
      Mac expected = clientMac(spec_.secret, conn.serverNonce, clientNonce);
      uint8_t verdict[kVerdictBytes] = {};
      if (!constantTimeEqual(expected.data(), conn.response.data() + kNonceBytes, kMacBytes)) {
        verdict[0] = 1;
        conn.sock.sendSome(verdict, sizeof(verdict));  // best effort: tells a real rank why
        LOOM_WARN(kSubsysBootstrap, spec_.logRank, spec_.what, ": refused connection from ",
                  conn.sock.peer(),
                  ": authentication failed (wrong job secret, or not a Loom rank)");
        return true;
      }
      Mac proof = serverMac(spec_.secret, clientNonce, conn.serverNonce);
      std::memcpy(verdict + 1, proof.data(), kMacBytes);
      if (conn.sock.sendSome(verdict, sizeof(verdict)) != sizeof(verdict)) return true;
      conn.authenticated = true;
    }
    if (!conn.reader.pump(conn.sock, spec_.maxPayload)) return false;
    onHello(conn, conn.reader.take());
  } catch (const Error& e) {
    LOOM_WARN(kSubsysBootstrap, spec_.logRank, spec_.what, ": dropped connection from ",
              conn.sock.peer(), conn.authenticated ? "" : " during the handshake", ": ", e.what());
  }
  return true;
}

std::string Gatherer::validate(const PendingConn& conn, const Frame& hello) {
  if (hello.type != FrameType::kHello)
    return "expected a hello, got message type " + std::to_string(static_cast<int>(hello.type));
  int rank = hello.rank;
  uint64_t nranks = hello.arg;
  std::string who = "rank " + std::to_string(rank) + " (" + conn.sock.peer() + ")";
  if (nranks < 1 || nranks > static_cast<uint64_t>(kMaxRanks))
    return who + " claims nranks = " + std::to_string(nranks) + ", out of range";
  if (rank < 0 || static_cast<uint64_t>(rank) >= nranks)
    return who + " is out of range for nranks = " + std::to_string(nranks);
  if (result_.nranks > 0 && nranks != static_cast<uint64_t>(result_.nranks))
    return who + " says nranks = " + std::to_string(nranks) + " but " +
           (spec_.nranks > 0 ? "this group has " : "the ranks before it said ") +
           std::to_string(result_.nranks);
  if (rank == spec_.localRank)
    return who + " claims the rank of this " + channelName(spec_.channel) + " itself";
  if (result_.nranks > 0 && result_.sockets[rank].valid())
    return who + " claims a rank already taken by " + result_.sockets[rank].peer();
  if (spec_.checkPayload) {
    std::string why = spec_.checkPayload(hello.body);
    if (!why.empty()) return who + ": " + why;
  }
  return "";
}

void Gatherer::refuse(PendingConn& conn, const std::string& why) {
  LOOM_WARN(kSubsysBootstrap, spec_.logRank, spec_.what, ": refused ", why);
  std::string reply = encodeFrame(FrameType::kReply, -1, loomInvalidArgument, why);
  try {
    conn.sock.sendSome(reply.data(), reply.size());  // small: fits the socket buffer at once
  } catch (const Error&) {
  }
}

void Gatherer::onHello(PendingConn& conn, Frame hello) {
  std::string why = validate(conn, hello);
  if (!why.empty()) return refuse(conn, why);
  if (result_.nranks == 0) {
    result_.nranks = static_cast<int>(hello.arg);
    resize(result_.nranks);
  }
  int rank = hello.rank;
  LOOM_INFO(kSubsysBootstrap, spec_.logRank, spec_.what, ": rank ", rank, " of ", result_.nranks,
            " arrived from ", conn.sock.peer());
  conn.sock.setPeer("rank " + std::to_string(rank) + " (" + conn.sock.peer() + ")");
  result_.sockets[rank] = std::move(conn.sock);
  result_.payloads[rank] = std::move(hello.body);
  ++result_.arrived;
}

void Gatherer::watchRegistered(int rank) {
  if (rank >= static_cast<int>(result_.sockets.size()) || !result_.sockets[rank].valid()) return;
  Socket& sock = result_.sockets[rank];
  // A registered rank has nothing more to say before the reply: data or EOF both end it.
  bool closed = sock.peerClosed();
  LOOM_WARN(kSubsysBootstrap, spec_.logRank, spec_.what, ": ", sock.peer(),
            closed ? " went away before the group was complete; its rank is free again"
                   : " sent data out of turn; dropped");
  sock.close();
  result_.payloads[rank].clear();
  --result_.arrived;
  if (result_.arrived == 0 && spec_.nranks == 0) {
    result_.nranks = 0;  // learn nranks afresh from the next rank
    resize(0);
  }
}

}  // namespace

GatherResult gatherHellos(int listenFd, const GatherSpec& spec) {
  return Gatherer(listenFd, spec).run();
}

}  // namespace wire

namespace {

bool isUsableRemoteAddress(const sockaddr* addr) {
  if (addr == nullptr || isLoopback(addr)) return false;
  if (addr->sa_family == AF_INET) return true;
  if (addr->sa_family != AF_INET6) return false;
  // Link-local IPv6 needs an interface scope that other hosts cannot know.
  return !IN6_IS_ADDR_LINKLOCAL(&reinterpret_cast<const sockaddr_in6*>(addr)->sin6_addr);
}

// An address of this host that other hosts could reach, for ids of roots bound to a wildcard.
std::string advertisedHost(bool allowIpv6) {
  char name[256] = {};
  if (gethostname(name, sizeof(name) - 1) == 0) {
    addrinfo hints{};
    hints.ai_family = allowIpv6 ? AF_UNSPEC : AF_INET;
    hints.ai_socktype = SOCK_STREAM;
    addrinfo* results = nullptr;
    if (getaddrinfo(name, nullptr, &hints, &results) == 0) {
      std::string found;
      for (addrinfo* ai = results; ai != nullptr && found.empty(); ai = ai->ai_next)
        if (isUsableRemoteAddress(ai->ai_addr)) found = numericHost(ai->ai_addr, ai->ai_addrlen);
      freeaddrinfo(results);
      if (!found.empty()) return found;
    }
  }
  ifaddrs* list = nullptr;
  std::string v4, v6;
  if (getifaddrs(&list) == 0) {
    for (ifaddrs* ifa = list; ifa != nullptr; ifa = ifa->ifa_next) {
      if ((ifa->ifa_flags & IFF_UP) == 0 || (ifa->ifa_flags & IFF_LOOPBACK) != 0) continue;
      if (!isUsableRemoteAddress(ifa->ifa_addr)) continue;
      bool isV4 = ifa->ifa_addr->sa_family == AF_INET;
      socklen_t len = isV4 ? sizeof(sockaddr_in) : sizeof(sockaddr_in6);
      std::string& slot = isV4 ? v4 : v6;
      if (slot.empty()) slot = numericHost(ifa->ifa_addr, len);
    }
    freeifaddrs(list);
  }
  if (!v4.empty()) return v4;  // IPv4 first: the likelier to be routable between hosts
  if (!v6.empty() && allowIpv6) return v6;
  return "127.0.0.1";
}

void serveRendezvous(Listener listener, std::string address, JobSecret secret, int64_t timeoutMs,
                     Deadline deadline) {
  std::string what = "rendezvous root " + address;
  try {
    wire::GatherSpec spec;
    spec.channel = wire::Channel::kRendezvous;
    spec.secret = secret;
    spec.maxPayload = wire::kMaxRendezvousPayload;
    spec.deadline = deadline;
    spec.what = what;
    wire::GatherResult result = wire::gatherHellos(listener.fd.get(), spec);
    listener.fd.reset();  // late comers get "connection refused" instead of silence
    if (!result.complete) {
      std::string why =
          "rendezvous timed out after " + std::to_string(timeoutMs) +
          " ms: " + std::to_string(result.arrived) + " of " +
          (result.nranks > 0 ? std::to_string(result.nranks) : "?") + " ranks arrived" +
          (result.nranks > 0 ? " (missing ranks: " + result.missingRanks(-1) + ")" : "");
      LOOM_WARN(kSubsysBootstrap, -1, what, ": ", why);
      std::string reply = wire::encodeFrame(wire::FrameType::kReply, -1, loomTimeout, why);
      // Highest rank first: rank 0's process usually hosts this thread, and once rank 0 reads
      // the verdict it may exit, ending this thread before it tells the others (who then saw
      // only the connection close).
      for (auto sock = result.sockets.rbegin(); sock != result.sockets.rend(); ++sock) {
        try {
          if (sock->valid()) sock->sendSome(reply.data(), reply.size());
        } catch (const Error&) {
        }
      }
      return;
    }
    std::string reply = wire::encodeFrame(wire::FrameType::kReply, -1, loomSuccess,
                                          wire::encodeTable(result.payloads));
    // Sent from this one thread, every rank already waiting to read it; highest rank first, as
    // above: a rank 0 that fails right after reading it must not cut the others off.
    for (auto sock = result.sockets.rbegin(); sock != result.sockets.rend(); ++sock) {
      try {
        sock->sendAll(reply.data(), reply.size(), deadline, nullptr);
      } catch (const Error& e) {
        LOOM_WARN(kSubsysBootstrap, -1, what, ": could not send the table to ", sock->peer(), ": ",
                  e.what());
      }
    }
    LOOM_INFO(kSubsysBootstrap, -1, what, ": rendezvous of ", result.nranks, " ranks complete");
  } catch (const std::exception& e) {
    LOOM_WARN(kSubsysBootstrap, -1, what, ": failed: ", e.what());
  }
}

}  // namespace

UniqueId startRendezvousRoot(const std::string& bindHost, uint16_t port, const JobSecret& secret,
                             int64_t timeoutMs) {
  if (timeoutMs <= 0) timeoutMs = 600000;
  Listener listener = listenTcp(bindHost, port);
  UniqueId id;
  id.host = isWildcardHost(bindHost) ? advertisedHost(listener.dualStackOrV6) : bindHost;
  id.port = listener.port;
  id.secret = secret;
  randomBytes(&id.jobNonce, sizeof(id.jobNonce));
  if (!secret.present)
    LOOM_INFO(kSubsysBootstrap, -1, "rendezvous root ", joinHostPort(id.host, id.port),
              " runs without a job secret (unauthenticated)");
  // Detached: the root outlives the call and ends on its own once its one rendezvous is over.
  // The deadline starts now, not when the thread gets scheduled: ranks given the same timeout
  // right after this call then hear the root's own verdict rather than racing it.
  std::thread(serveRendezvous, std::move(listener), joinHostPort(id.host, id.port), secret,
              timeoutMs, deadlineAfterMs(timeoutMs))
      .detach();
  return id;
}

}  // namespace loom
