// The handshake between loomruns mirrors Loom's bootstrap (src/bootstrap/protocol.hpp), so the
// job secret never crosses the wire:
//   node 0 -> worker   LOOMRUN1 CHALLENGE <server nonce>
//   worker -> node 0   HELLO <client nonce> <HMAC(secret, "loomrun-client|sn|cn|fields")> <fields>
//   node 0 -> worker   START <HMAC(secret, "loomrun-server|cn|sn|fields")> <fields>
//                   or REFUSE <reason>
// HELLO's fields are "node=I nnodes=K world=W ranks=a,b,..." (world 0: not given); START's are
// "world=W masterport=P commid=HOST:PORT". The MACs cover the fields, so neither side can be fed
// a forged rank list or port.
#include "loomrun_nodes.hpp"

#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <map>
#include <memory>
#include <set>
#include <sstream>
#include <thread>

#include "base/sha256.hpp"
#include "loomrun_wire.hpp"

namespace loom::launcher {
namespace {

using Clock = std::chrono::steady_clock;

constexpr double kPingEverySec = 1.0;
// A peer silent for this long is gone (its host died or the network between us did); a closed
// connection is noticed at once, this only bounds the case where nothing closes it.
constexpr double kSilenceLimitSec = 15.0;
constexpr size_t kMaxLinkLineBytes = 1 << 20;  // a rank list of 4096 ranks is far below this
constexpr int kConnectRetryMs = 200;
// Node 0 gives a connection this long to say HELLO (a stranger must not hold the join up).
constexpr int kHelloWaitSec = 5;
// A worker waits twice that for node 0's challenge before it connects again.
constexpr int kChallengeSilenceSec = 2 * kHelloWaitSec;
// How often a worker connects again when node 0 closes the connection before START.
constexpr int kClosedRetries = 2;

Clock::duration seconds(double s) {
  return std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(s));
}

int remainingMs(Clock::time_point deadline) {
  auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
  return ms <= 0 ? 0 : static_cast<int>(std::min<long long>(ms, 1 << 30));
}

std::string randomNonce() {
  uint8_t bytes[16];
  loom::randomBytes(bytes, sizeof(bytes));
  return loom::toHex(bytes, sizeof(bytes));
}

std::string mac(const std::string& secret, const std::string& text) {
  Sha256Digest digest = hmacSha256(secret.data(), secret.size(), text.data(), text.size());
  return loom::toHex(digest.data(), digest.size());
}

bool sameMac(const std::string& a, const std::string& b) {
  return a.size() == b.size() && loom::constantTimeEqual(a.data(), b.data(), a.size());
}

bool sendLine(int fd, const std::string& line) {
  std::string text = line + "\n";
  size_t sent = 0;
  while (sent < text.size()) {
    // Blocking with SO_SNDTIMEO set: our lines are tiny, a full send buffer means a dead peer.
    ssize_t n = ::send(fd, text.data() + sent, text.size() - sent, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    sent += static_cast<size_t>(n);
  }
  return true;
}

// Waits for one whole line until `deadline`; bytes after it stay in `inbox`.
bool readLine(int fd, std::string& inbox, Clock::time_point deadline, std::string& line,
              std::string& error) {
  while (!takeLine(inbox, line)) {
    if (inbox.size() > kMaxLinkLineBytes) {
      error = "line too long";
      return false;
    }
    pollfd pfd{fd, POLLIN, 0};
    int ready = ::poll(&pfd, 1, remainingMs(deadline));
    if (ready < 0 && errno == EINTR) continue;
    if (ready == 0) {
      error = "timed out";
      return false;
    }
    char buffer[4096];
    ssize_t n = ready < 0 ? -1 : ::read(fd, buffer, sizeof(buffer));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      error = n == 0 ? "connection closed" : std::strerror(errno);
      return false;
    }
    inbox.append(buffer, static_cast<size_t>(n));
  }
  return true;
}

void setSocketOptions(int fd) {
  int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  timeval sendLimit{5, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &sendLimit, sizeof(sendLimit));
}

addrinfo* resolve(const std::string& host, int port, bool passive, std::string& error) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = passive ? AI_PASSIVE : 0;
  addrinfo* found = nullptr;
  std::string service = std::to_string(port);
  int rc = ::getaddrinfo(host.c_str(), service.c_str(), &hints, &found);
  if (rc != 0 || found == nullptr) {
    error = "cannot resolve '" + host + "': " + ::gai_strerror(rc);
    return nullptr;
  }
  return found;
}

int listenAt(const std::string& host, int port, std::string& error) {
  addrinfo* found = resolve(host, port, true, error);
  if (found == nullptr) return -1;
  int fd = ::socket(found->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  int one = 1;
  if (fd >= 0) ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  if (fd < 0 || ::bind(fd, found->ai_addr, found->ai_addrlen) != 0 || ::listen(fd, 128) != 0) {
    error = "node 0 cannot listen at " + host + ":" + std::to_string(port) + ": " +
            std::strerror(errno) +
            (errno == EADDRNOTAVAIL ? " (--master must be an address of node 0)" : "");
    if (fd >= 0) ::close(fd);
    fd = -1;
  }
  ::freeaddrinfo(found);
  return fd;
}

// One connection attempt, bounded by `deadline`; -1 with `error` set when it fails.
int connectOnce(const addrinfo* target, Clock::time_point deadline, std::string& error) {
  int fd = ::socket(target->ai_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0) {
    error = std::string("socket: ") + std::strerror(errno);
    return -1;
  }
  if (::connect(fd, target->ai_addr, target->ai_addrlen) != 0 && errno != EINPROGRESS) {
    error = std::strerror(errno);
    ::close(fd);
    return -1;
  }
  pollfd pfd{fd, POLLOUT, 0};
  int soError = 0;
  socklen_t len = sizeof(soError);
  if (::poll(&pfd, 1, std::max(remainingMs(deadline), 1)) <= 0 ||
      ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &soError, &len) != 0 || soError != 0) {
    error = soError != 0 ? std::strerror(soError) : "timed out";
    ::close(fd);
    return -1;
  }
  ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) & ~O_NONBLOCK);
  return fd;
}

void warn(const std::string& text) {
  std::string line = "loomrun: " + text + "\n";
  (void)!::write(STDERR_FILENO, line.data(), line.size());
}

}  // namespace

NodeLink::~NodeLink() {
  for (Peer& peer : peers_) closePeer(peer);
}

bool NodeLink::establish(LaunchOptions& options, JobInfo& job, std::string& error) {
  nodeRank_ = options.nodeRank;
  if (!sharedSecret(job.secret, error)) return false;
  std::vector<int> ownRanks;
  for (int local = 0; local < options.nprocPerNode; ++local) {
    ownRanks.push_back(options.globalRank(local));
  }
  Clock::time_point deadline = Clock::now() + seconds(options.joinTimeoutSec);
  std::string timeoutText = std::to_string(static_cast<int>(options.joinTimeoutSec)) + " s";

  try {
    if (!isMaster()) {
      std::unique_ptr<addrinfo, decltype(&::freeaddrinfo)> target(
          resolve(options.masterAddr, options.masterPort, false, error), &::freeaddrinfo);
      if (target == nullptr) return false;
      std::string where = options.masterAddr + ":" + std::to_string(options.masterPort);
      std::string line;
      std::string why;
      std::string inbox;
      std::string clientNonce;
      std::string serverNonce;
      int fd = -1;
      int closedRetries = kClosedRetries;
      std::string closedWhy;  // why node 0 closed the last connection before START
      Clock::time_point connectBy = deadline;
      // Node 0 may start after us: retry until it listens, within the join timeout. It sends its
      // challenge at once; a connection it stays silent on may exist at our end only (on a lossy
      // link: seen once in 8 joins at 10 % loss, each side waiting for the other until the join
      // timeout), so after twice its own bound for a stranger we connect again. A connection it
      // closes before START (it gave up on our HELLO after kHelloWaitSec: seen at 10 % loss) is
      // made again kClosedRetries times, while node 0 still listens.
      while (true) {
        std::string lastError;
        while (fd < 0 && Clock::now() < connectBy) {
          fd = connectOnce(target.get(), std::min(connectBy, Clock::now() + seconds(2)), lastError);
          if (fd < 0) std::this_thread::sleep_for(std::chrono::milliseconds(kConnectRetryMs));
        }
        if (fd < 0) {
          error = closedWhy.empty()
                      ? "cannot reach node 0's loomrun at " + where + " within " + timeoutText +
                            " (" + lastError + ")"
                      : "node 0's loomrun at " + where + " closed the connection before START (" +
                            closedWhy + ") and then could not be reached (" + lastError + ")";
          return false;
        }
        setSocketOptions(fd);
        connectBy = deadline;  // reached: a later silence starts over with the join timeout
        const auto silenceEnd = std::min(deadline, Clock::now() + seconds(kChallengeSilenceSec));
        inbox.clear();
        if (!readLine(fd, inbox, silenceEnd, line, why)) {
          ::close(fd);
          fd = -1;
          if (why == "timed out" && Clock::now() < deadline) {
            warn("node 0's loomrun at " + where + " said nothing for " +
                 std::to_string(kChallengeSilenceSec) + " s after we connected; connecting again");
            continue;
          }
          if (why == "timed out" || closedRetries == 0) {
            error = "no challenge from node 0's loomrun at " + where + ": " + why;
            return false;
          }
        } else {
          std::istringstream challenge(line);
          std::string word1;
          std::string word2;
          if (!(challenge >> word1 >> word2 >> serverNonce) || word1 != "LOOMRUN1" ||
              word2 != "CHALLENGE") {
            error = "the server at " + where + " is not a loomrun of this version";
            ::close(fd);
            return false;
          }
          clientNonce = randomNonce();
          std::string fields = "node=" + std::to_string(options.nodeRank) +
                               " nnodes=" + std::to_string(options.nnodes) +
                               " world=" + std::to_string(options.worldSizeOption) +
                               " ranks=" + joinRanks(ownRanks);
          std::string proof =
              mac(job.secret, "loomrun-client|" + serverNonce + "|" + clientNonce + "|" + fields);
          if (!sendLine(fd, "HELLO " + clientNonce + " " + proof + " " + fields))
            why = "our HELLO could not be sent";
          else if (readLine(fd, inbox, deadline, line, why))
            break;
          ::close(fd);
          fd = -1;
          if (why == "timed out") {
            error = "node 0's loomrun did not start the job within " + timeoutText;
            return false;
          }
          if (closedRetries == 0) {
            error = "node 0's loomrun at " + where + " closed the connection before START (" + why +
                    "), " + std::to_string(kClosedRetries + 1) + " times";
            return false;
          }
        }
        // Node 0 closed the connection before START.
        --closedRetries;
        closedWhy = why;
        connectBy = std::min(deadline, Clock::now() + seconds(kChallengeSilenceSec));
        warn("node 0's loomrun at " + where + " closed the connection before START (" + closedWhy +
             "); connecting again");
      }
      peers_.push_back(Peer{fd, 0, std::move(inbox), Clock::now()});
      std::istringstream reply(line);
      std::string verb;
      std::string serverProof;
      reply >> verb;
      if (verb == "REFUSE") {
        error = "node 0 refused the job: " + line.substr(std::min(line.size(), size_t{7}));
        return false;
      }
      reply >> serverProof;
      std::string startFields = line.substr(std::min(line.size(), 6 + serverProof.size() + 1));
      std::string expected =
          mac(job.secret, "loomrun-server|" + clientNonce + "|" + serverNonce + "|" + startFields);
      if (verb != "START" || !sameMac(serverProof, expected)) {
        error = "node 0's loomrun does not know our LOOM_JOB_SECRET (is it the same everywhere?)";
        return false;
      }
      auto values = parseFields(startFields);
      options.worldSizeOption = fieldInt(values, "world");
      job.masterPort = fieldInt(values, "masterport");
      job.commId = values["commid"];
      if (options.worldSizeOption <= 0 || job.masterPort <= 0 || job.commId.empty()) {
        error = "malformed START from node 0: " + line;
        return false;
      }
      ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) | O_NONBLOCK);
      lastPing_ = Clock::now();
      return true;
    }

    // Node 0.
    if (ownRanks.empty() || ownRanks.front() != 0) {
      error = "global rank 0 must run on node 0 (it hosts Loom's rendezvous, LOOM_COMM_ID)";
      return false;
    }
    int listener = listenAt(options.masterAddr, options.masterPort, error);
    if (listener < 0) return false;
    struct Joined {
      std::string serverNonce, clientNonce;
      std::vector<int> ranks;
      int world = 0;
    };
    std::vector<Joined> joined;
    auto refuseAll = [&](const std::string& reason) {
      for (Peer& peer : peers_) sendLine(peer.fd, "REFUSE " + reason);
      ::close(listener);
      error = reason;
      return false;
    };
    while (peers_.size() + 1 < static_cast<size_t>(options.nnodes)) {
      pollfd pfd{listener, POLLIN, 0};
      int ready = ::poll(&pfd, 1, remainingMs(deadline));
      if (ready < 0 && errno == EINTR) continue;
      if (ready <= 0) {
        std::set<int> missing;
        for (int n = 1; n < options.nnodes; ++n) missing.insert(n);
        for (const Peer& peer : peers_) missing.erase(peer.nodeRank);
        std::string list;
        for (int n : missing) list += (list.empty() ? "" : ", ") + std::to_string(n);
        return refuseAll("node(s) " + list + " did not join within " + timeoutText);
      }
      sockaddr_storage from{};
      socklen_t fromLen = sizeof(from);
      int fd = ::accept4(listener, reinterpret_cast<sockaddr*>(&from), &fromLen, SOCK_CLOEXEC);
      if (fd < 0) continue;
      char hostText[NI_MAXHOST] = "?";
      ::getnameinfo(reinterpret_cast<sockaddr*>(&from), fromLen, hostText, sizeof(hostText),
                    nullptr, 0, NI_NUMERICHOST);
      setSocketOptions(fd);
      Peer peer{fd, -1, "", Clock::now()};
      Joined info;
      info.serverNonce = randomNonce();
      std::string line;
      std::string why;
      // A stranger gets a few seconds, not the whole join timeout, to say who it is.
      Clock::time_point helloDeadline = std::min(deadline, Clock::now() + seconds(kHelloWaitSec));
      if (!sendLine(fd, "LOOMRUN1 CHALLENGE " + info.serverNonce) ||
          !readLine(fd, peer.inbox, helloDeadline, line, why)) {
        warn("ignored a connection from " + std::string(hostText) + ": no HELLO (" + why + ")");
        ::close(fd);
        continue;
      }
      std::istringstream hello(line);
      std::string verb;
      std::string proof;
      hello >> verb >> info.clientNonce >> proof;
      size_t fieldsAt =
          std::min(line.size(), verb.size() + info.clientNonce.size() + proof.size() + 3);
      std::string fields = line.substr(fieldsAt);
      std::string expected = mac(
          job.secret, "loomrun-client|" + info.serverNonce + "|" + info.clientNonce + "|" + fields);
      if (verb != "HELLO" || !sameMac(proof, expected)) {
        warn("refused a connection from " + std::string(hostText) +
             ": it does not know this job's LOOM_JOB_SECRET");
        sendLine(fd, "REFUSE wrong job secret");
        ::close(fd);
        continue;
      }
      auto values = parseFields(fields);
      peer.nodeRank = fieldInt(values, "node");
      info.world = fieldInt(values, "world");
      info.ranks = parseRanks(values["ranks"]);
      peers_.push_back(std::move(peer));
      joined.push_back(std::move(info));
      std::string who = "node " + std::to_string(peers_.back().nodeRank) + " (" + hostText + ")";
      if (fieldInt(values, "nnodes") != options.nnodes) {
        return refuseAll(who + " says --nnodes " + values["nnodes"] + ", node 0 says " +
                         std::to_string(options.nnodes));
      }
      if (peers_.back().nodeRank < 1 || peers_.back().nodeRank >= options.nnodes) {
        return refuseAll(who + " has an invalid --node-rank");
      }
      for (size_t i = 0; i + 1 < peers_.size(); ++i) {
        if (peers_[i].nodeRank == peers_.back().nodeRank) {
          return refuseAll("two loomruns say --node-rank " + std::to_string(peers_[i].nodeRank));
        }
      }
      if (joined.back().ranks.empty()) return refuseAll(who + " sent no ranks");
    }
    ::close(listener);

    // Every rank 0..W-1 exactly once, W agreed by everyone who named it.
    std::map<int, int> owner;  // rank -> node
    for (int r : ownRanks) owner[r] = 0;
    int world = static_cast<int>(ownRanks.size());
    std::set<int> worldClaims;
    if (options.worldSizeOption > 0) worldClaims.insert(options.worldSizeOption);
    for (size_t i = 0; i < peers_.size(); ++i) {
      world += static_cast<int>(joined[i].ranks.size());
      if (joined[i].world > 0) worldClaims.insert(joined[i].world);
      for (int r : joined[i].ranks) {
        if (!owner.emplace(r, peers_[i].nodeRank).second) {
          return refuseAll("rank " + std::to_string(r) + " is claimed by nodes " +
                           std::to_string(owner[r]) + " and " + std::to_string(peers_[i].nodeRank));
        }
      }
    }
    if (worldClaims.size() > 1 || (worldClaims.size() == 1 && *worldClaims.begin() != world)) {
      return refuseAll("the nodes run " + std::to_string(world) +
                       " ranks in all, which does not match --world-size");
    }
    if (owner.rbegin()->first != world - 1) {
      return refuseAll("the nodes' ranks do not cover 0.." + std::to_string(world - 1) + " (rank " +
                       std::to_string(owner.rbegin()->first) + " is out of range)");
    }
    options.worldSizeOption = world;
    if (!pickJobPorts(options.masterAddr, job, error)) return refuseAll(error);
    std::string startFields = "world=" + std::to_string(world) +
                              " masterport=" + std::to_string(job.masterPort) +
                              " commid=" + job.commId;
    for (size_t i = 0; i < peers_.size(); ++i) {
      std::string proof = mac(job.secret, "loomrun-server|" + joined[i].clientNonce + "|" +
                                              joined[i].serverNonce + "|" + startFields);
      if (!sendLine(peers_[i].fd, "START " + proof + " " + startFields)) {
        return refuseAll("lost node " + std::to_string(peers_[i].nodeRank) + " during start");
      }
      ::fcntl(peers_[i].fd, F_SETFL, ::fcntl(peers_[i].fd, F_GETFL) | O_NONBLOCK);
      peers_[i].lastHeard = Clock::now();
    }
    lastPing_ = Clock::now();
    return true;
  } catch (const std::exception& e) {  // randomBytes without getrandom(2)
    error = e.what();
    return false;
  }
}

void NodeLink::appendPollFds(std::vector<pollfd>& fds) const {
  for (const Peer& peer : peers_) {
    if (!peer.closed) fds.push_back({peer.fd, POLLIN, 0});
  }
}

int NodeLink::nextWakeMs() const {
  if (peers_.empty()) return -1;
  return std::max(1, remainingMs(lastPing_ + seconds(kPingEverySec)));
}

std::optional<NodeEvent> NodeLink::service() {
  std::optional<NodeEvent> event;
  auto keep = [&event](std::optional<NodeEvent> next) {
    if (next && !event) event = std::move(next);
  };
  Clock::time_point now = Clock::now();
  for (Peer& peer : peers_) {
    if (peer.closed) continue;
    bool eof = false;
    for (int reads = 0; reads < 64; ++reads) {
      char buffer[4096];
      ssize_t n = ::read(peer.fd, buffer, sizeof(buffer));
      if (n > 0) {
        peer.inbox.append(buffer, static_cast<size_t>(n));
        peer.lastHeard = now;
        continue;
      }
      if (n < 0 && errno == EINTR) continue;
      eof = n == 0 || (errno != EAGAIN && errno != EWOULDBLOCK);
      break;
    }
    std::string line;
    while (!peer.closed && takeLine(peer.inbox, line)) keep(onLine(peer, line));
    if (peer.closed) continue;
    if (eof) {
      keep(onLost(peer, "its connection closed"));
    } else if (peer.inbox.size() > kMaxLinkLineBytes) {
      keep(onLost(peer, "it sent garbage"));
    } else if (now - peer.lastHeard > seconds(kSilenceLimitSec)) {
      keep(onLost(peer, "no heartbeat for " + std::to_string(int(kSilenceLimitSec)) + " s"));
    }
  }
  if (now - lastPing_ >= seconds(kPingEverySec)) {
    lastPing_ = now;
    sendAll("PING");
  }
  return event;
}

std::optional<NodeEvent> NodeLink::onLine(Peer& peer, const std::string& line) {
  std::istringstream in(line);
  std::string verb;
  in >> verb;
  if (verb == "PING") return std::nullopt;
  if (verb == "DONE" && isMaster()) {
    peer.done = true;
    return finishIfAllDone();
  }
  if (verb == "END" && !isMaster()) {
    finished_ = true;
    closePeer(peer);
    return aborted_ ? std::nullopt
                    : std::optional<NodeEvent>(NodeEvent{NodeEvent::Kind::kFinished, 0, ""});
  }
  if (verb == "FAIL" || verb == "ABORT") {
    int code = 1;
    in >> code;
    std::string reason;
    std::getline(in, reason);
    if (!reason.empty() && reason[0] == ' ') reason.erase(0, 1);
    if (verb == "FAIL") reason = "node " + std::to_string(peer.nodeRank) + ": " + reason;
    closePeer(peer);  // a failing worker exits; after ABORT node 0 has nothing more to say
    if (aborted_ || finished_) return std::nullopt;
    aborted_ = true;
    if (isMaster()) sendAll("ABORT " + std::to_string(code) + " " + reason, &peer);
    return NodeEvent{NodeEvent::Kind::kAbort, code == 0 ? 1 : code, reason};
  }
  return onLost(peer, "it sent an unknown message '" + line.substr(0, 80) + "'");
}

std::optional<NodeEvent> NodeLink::onLost(Peer& peer, const std::string& why) {
  closePeer(peer);
  if (aborted_ || finished_) return std::nullopt;
  aborted_ = true;
  std::string who = isMaster() ? "node " + std::to_string(peer.nodeRank) : std::string("node 0");
  std::string reason = "lost contact with " + who + "'s loomrun (" + why + ")";
  if (isMaster()) sendAll("ABORT 1 " + reason);
  return NodeEvent{NodeEvent::Kind::kAbort, 1, reason};
}

std::optional<NodeEvent> NodeLink::finishIfAllDone() {
  if (!localDone_ || aborted_ || finished_) return std::nullopt;
  for (const Peer& peer : peers_) {
    if (!peer.done) return std::nullopt;
  }
  finished_ = true;
  sendAll("END");
  return NodeEvent{NodeEvent::Kind::kFinished, 0, ""};
}

void NodeLink::reportFailure(int exitCode, const std::string& reason) {
  if (aborted_ || finished_) return;
  aborted_ = true;
  std::string text = std::to_string(exitCode == 0 ? 1 : exitCode) + " " + reason;
  if (isMaster()) {
    sendAll("ABORT " + std::to_string(exitCode == 0 ? 1 : exitCode) + " node 0: " + reason);
  } else {
    sendAll("FAIL " + text);
  }
}

std::optional<NodeEvent> NodeLink::reportLocalSuccess() {
  if (localDone_) return std::nullopt;
  localDone_ = true;
  if (isMaster()) return finishIfAllDone();
  sendAll("DONE");
  return std::nullopt;
}

void NodeLink::sendAll(const std::string& line, const Peer* except) {
  for (Peer& peer : peers_) {
    if (&peer != except && !peer.closed) send(peer, line);
  }
}

void NodeLink::send(Peer& peer, const std::string& line) {
  // A failed send shows up as EOF or silence on the read side, which reports it.
  (void)sendLine(peer.fd, line);
}

void NodeLink::closePeer(Peer& peer) {
  if (peer.fd >= 0) ::close(peer.fd);
  peer.fd = -1;
  peer.closed = true;
}

}  // namespace loom::launcher
