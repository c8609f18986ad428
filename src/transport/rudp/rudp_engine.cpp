// RudpEngine's set-up (sockets, the peers' endpoints, the flows), its lifetime, a reset and the
// counters. Beside it: the progress thread (rudp_progress.cpp), the send path (rudp_send.cpp) and
// the receive path (rudp_receive.cpp).
#include "transport/rudp/rudp_engine.hpp"

#include <fcntl.h>
#include <net/if.h>
#include <netdb.h>
#include <netinet/udp.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include <cstring>
#include <sstream>

#include "base/error.hpp"
#include "base/log.hpp"
#include "base/wait.hpp"
#include "transport/rudp/rudp_channel.hpp"

namespace loom {

namespace {

constexpr uint64_t kFlowletTrains = 16;  // trains sent on one path before the next (~1 MiB)
constexpr int kSocketBuffer = 8 << 20;   // bursts of a whole window must not overflow the kernel

void setBuffer(int fd, int option, int forced) {
  // Root may exceed net.core.[rw]mem_max (the *FORCE options); others get what the limit allows.
  if (setsockopt(fd, SOL_SOCKET, forced, &kSocketBuffer, sizeof(kSocketBuffer)) != 0)
    setsockopt(fd, SOL_SOCKET, option, &kSocketBuffer, sizeof(kSocketBuffer));
}

sockaddr_storage resolve(const std::string& host, int port, socklen_t& len) {
  addrinfo hints{};
  hints.ai_flags = AI_NUMERICHOST | AI_NUMERICSERV;
  hints.ai_socktype = SOCK_DGRAM;
  addrinfo* res = nullptr;
  std::string service = std::to_string(port);
  if (getaddrinfo(host.c_str(), service.c_str(), &hints, &res) != 0 || res == nullptr)
    LOOM_THROW(loomInternalError, "rudp transport: bad endpoint address '", host, "'");
  sockaddr_storage out{};
  std::memcpy(&out, res->ai_addr, res->ai_addrlen);
  len = res->ai_addrlen;
  freeaddrinfo(res);
  return out;
}

size_t interfaceMtu(const std::string& name) {
  Fd probe(socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0));
  ifreq req{};
  std::strncpy(req.ifr_name, name.c_str(), IFNAMSIZ - 1);
  if (!probe.valid() || ioctl(probe.get(), SIOCGIFMTU, &req) != 0) return 1500;
  return static_cast<size_t>(req.ifr_mtu);
}

rudp::MacKey macKeyOf(const JobSecret& secret) {
  JobSecret derived = deriveSecret(secret, 0, "rudp-mac");
  rudp::MacKey key;
  std::memcpy(key.data(), derived.bytes.data(), key.size());
  return key;
}

void drain(int fd) {
  char buf[64];
  while (read(fd, buf, sizeof(buf)) > 0) {
  }
}

}  // namespace

RudpFlowState::RudpFlowState(int p, int c, const rudp::FlowConfig& config)
    : peer(p), cls(c), flow(config) {
  int fds[2];
  if (pipe2(fds, O_NONBLOCK | O_CLOEXEC) != 0)
    LOOM_THROW(loomSystemError, "rudp transport: pipe: ", std::strerror(errno));
  roomPipe[0] = Fd(fds[0]);
  roomPipe[1] = Fd(fds[1]);
  // One page: a single byte in it makes the write end stop polling POLLOUT.
  fcntl(fds[1], F_SETPIPE_SZ, 4096);
}

void RudpFlowState::notifyData() {
  if (dataSignalled) return;
  dataSignalled = true;
  dataReady.signal();
}

void RudpFlowState::drainRoom() { drain(roomPipe[0].get()); }

void RudpFlowState::takeWakeup() {
  if (!dataSignalled) return;
  dataSignalled = false;
  dataReady.consume();
}

RudpEngine::RudpEngine(const RudpSetup& s)
    : rank_(s.rank),
      classes_(s.classes),
      names_(s.names),
      keys_(macKeyOf(s.secret)),
      lingerMs_(s.lingerMs),
      faultRng_(0x5eed + static_cast<uint64_t>(s.rank)),
      gso_(s.gso) {
  follow_ = s.followCaller && usableCores() > 1;
  faulty_ = !s.faults.empty();
  callerReceives_ = s.callerReceives;
  LOOM_CHECK_ARG(s.paths >= 1 && s.paths <= 16, "LOOM_RUDP_PATHS=", s.paths,
                 " is out of range (1 to 16)");
  // Keys and the communicator's identity come from the (already derived) secret.
  JobSecret idKey = deriveSecret(s.secret, 0, "rudp-comm-id");
  std::memcpy(&commId_, idKey.bytes.data(), sizeof(commId_));
  if (!s.faults.empty()) parseFaults(s.faults);
  const rudp::FlowConfig fc = configureFlows(s);
  std::vector<std::string> endpoints = s.allGather(bindSockets(s));
  addPeers(s, endpoints, fc);
  recvBufs_.resize(kRecvScratchBytes);
  headers_.resize(kRoom * rudp::kHeaderBytes);
  burst_.iov.reserve(4 * kMaxSegments);
  burst_.merged.reserve(4 * kMaxSegments);
  thread_ = std::thread([this] { run(); });
}

void RudpEngine::parseFaults(const std::string& spec) {
  std::istringstream in(spec);
  std::string item;
  while (std::getline(in, item, ',')) {
    size_t eq = item.find('=');
    std::string k = item.substr(0, eq);
    double v = eq == std::string::npos ? 0 : std::atof(item.c_str() + eq + 1);
    LOOM_CHECK_ARG((k == "drop" || k == "dup" || k == "delay") && v >= 0 && v <= 1,
                   "LOOM_RUDP_FAULTS: '", item, "' is not drop=P, dup=P or delay=P");
    (k == "drop" ? fault_.drop : k == "dup" ? fault_.dup : fault_.delay) = v;
  }
}

rudp::FlowConfig RudpEngine::configureFlows(const RudpSetup& s) {
  const bool v6 = s.itf.ipv6;
  size_t mtu = interfaceMtu(s.itf.name);
  mss_ = (std::min(mtu, size_t{65535}) - (v6 ? 48 : 28) - rudp::kHeaderBytes) & ~size_t{7};
  mss_ = std::clamp<size_t>(mss_, 64, rudp::kMaxPayload & ~size_t{7});
  rudp::FlowConfig fc = s.flow;
  fc.mss = mss_;
  // Flowlets of kFlowletTrains trains (as many full datagrams as one GSO send takes) per path.
  fc.paths = static_cast<uint32_t>(s.paths);
  fc.flowletPackets = static_cast<uint32_t>(
      kFlowletTrains *
      std::clamp<size_t>(kMaxBurstBytes / (rudp::kHeaderBytes + mss_), 1, kMaxSegments));
  return fc;
}

std::string RudpEngine::bindSockets(const RudpSetup& s) {
  const bool v6 = s.itf.ipv6;
  std::string mine = s.itf.address;
  for (int p = 0; p < s.paths; ++p) {
    Fd fd(socket(v6 ? AF_INET6 : AF_INET, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
    if (!fd.valid()) LOOM_THROW(loomSystemError, "rudp transport: socket: ", std::strerror(errno));
    setBuffer(fd.get(), SO_RCVBUF, SO_RCVBUFFORCE);
    setBuffer(fd.get(), SO_SNDBUF, SO_SNDBUFFORCE);
    if (gso_) {
      // Coalesced receive: one recvmmsg buffer then holds a whole GSO burst of one sender.
      int on = 1;
      if (setsockopt(fd.get(), SOL_UDP, UDP_GRO, &on, sizeof(on)) != 0) gso_ = false;
      gro_ = gso_;
    }
    socklen_t len;
    sockaddr_storage addr = resolve(s.itf.address, 0, len);
    if (bind(fd.get(), reinterpret_cast<sockaddr*>(&addr), len) != 0)
      LOOM_THROW(loomSystemError, "rudp transport: bind to ", s.itf.address, ": ",
                 std::strerror(errno));
    sockaddr_storage bound{};
    socklen_t boundLen = sizeof(bound);
    getsockname(fd.get(), reinterpret_cast<sockaddr*>(&bound), &boundLen);
    int port = ntohs(v6 ? reinterpret_cast<sockaddr_in6*>(&bound)->sin6_port
                        : reinterpret_cast<sockaddr_in*>(&bound)->sin_port);
    // Appended in pieces: GCC 12 warns (-Wrestrict, a false positive) on " " + std::string&&.
    mine.append(" ").append(std::to_string(port));
    sockets_.push_back(std::move(fd));
  }
  return mine;
}

void RudpEngine::addPeers(const RudpSetup& s, const std::vector<std::string>& endpoints,
                          const rudp::FlowConfig& fc) {
  addr_.resize(s.nranks);
  addrLen_.resize(s.nranks);
  flows_.resize(static_cast<size_t>(s.nranks) * s.classes);
  for (int peer = 0; peer < s.nranks; ++peer) {
    if (!s.remote[peer]) continue;
    std::istringstream in(endpoints[peer]);
    std::string host;
    int port = 0;
    in >> host;
    while (in >> port) addr_[peer].push_back(resolve(host, port, addrLen_[peer]));
    if (static_cast<int>(addr_[peer].size()) != s.paths)
      LOOM_THROW(loomInvalidArgument, "rudp transport: ", names_[peer], " has ", addr_[peer].size(),
                 " paths and this rank ", s.paths,
                 " (LOOM_RUDP_PATHS must be the same on every rank)");
    for (int cls = 0; cls < s.classes; ++cls)
      flows_[peer * s.classes + cls] = std::make_unique<RudpFlowState>(peer, cls, fc);
  }
}

RudpEngine::~RudpEngine() {
  // Linger: the peer may still need our last packets retransmitted.
  const uint64_t until = steadyNowNs() + static_cast<uint64_t>(lingerMs_) * 1'000'000;
  while (steadyNowNs() < until) {
    bool pending = false;
    for (auto& st : flows_) {
      if (!st) continue;
      std::lock_guard<std::mutex> lock(st->mu);
      pending |= !st->flow.drained() && !st->flow.failed();
    }
    if (!pending) break;
    usleep(1000);
  }
  stop_ = true;
  wake();
  thread_.join();
  LOOM_INFO(kSubsysNet, rank_, "rudp transport counters at destroy:\n", describeCounters());
}

RudpFlowState* RudpEngine::flowOf(int peer, int cls) const {
  if (peer < 0 || cls < 0 || cls >= classes_ ||
      static_cast<size_t>(peer) * classes_ + cls >= flows_.size())
    return nullptr;
  return flows_[peer * classes_ + cls].get();
}

std::unique_ptr<Channel> RudpEngine::channel(int peer, int cls) {
  RudpFlowState* st = flowOf(peer, cls);
  if (st == nullptr) LOOM_THROW(loomInternalError, "no rudp flow to rank ", peer);
  return std::make_unique<RudpChannel>(*this, *st);
}

void RudpEngine::wake() { wakeFd_.signal(); }

void RudpEngine::takeWake() { wakeFd_.consume(); }

void RudpEngine::wakeIfAsleepPast(uint64_t due) {
  if (!sleeping_.load()) return;  // awake: it reads every timer before it sleeps again
  const uint64_t planned = plannedWake_.load();
  if (planned == 0 || due < planned) wake();
}

void RudpEngine::reset(const std::string& why) {
  // Now, not when the thread comes round: a caller's buffer posted for receiving must receive
  // nothing more once its call fails (a train being written into it is waited for).
  for (auto& st : flows_) {
    if (!st) continue;
    std::unique_lock<std::mutex> lock(st->mu);
    st->flow.fail("this rank's communicator failed (" + why + ")");
    st->placed.wait(lock, [&] { return !st->flow.placing(); });
    st->flow.abandonPost();
    st->notifyData();
    drain(st->roomPipe[0].get());
  }
  {
    // Written before the flag; read by the thread only after it sees the flag.
    resetWhy_ = why;
  }
  resetRequested_ = true;
  wake();
}

void RudpEngine::sendResets(uint64_t now) {
  for (auto& st : flows_) {
    if (!st) continue;
    rudp::Header h;
    h.type = rudp::PacketType::kReset;
    h.commId = commId_;
    h.src = static_cast<uint32_t>(rank_);
    h.dst = static_cast<uint32_t>(st->peer);
    h.cls = static_cast<uint8_t>(st->cls);
    h.tsval = now;
    char header[rudp::kHeaderBytes];
    rudp::encodeHeader(h, keys_, {}, header);
    {
      std::lock_guard<std::mutex> send(sendMu_);
      transmit(0, st->peer, header, {}, now);
      flush();  // the header lives on this stack
    }
    std::lock_guard<std::mutex> lock(st->mu);
    st->flow.fail("this rank's communicator failed (" + resetWhy_ + ")");
    st->notifyData();
    drain(st->roomPipe[0].get());
  }
}

std::string RudpEngine::describeCounters() const {
  std::ostringstream o;
  o << "rudp: " << sockets_.size() << " paths, mss " << mss_ << " B, refused datagrams "
    << refused_.load() << ", progress thread "
    << (follow_ ? "moved " + std::to_string(moves_.load()) + " times to its caller's CPU"
                : "not following its caller");
  for (size_t i = 0; i < flows_.size(); ++i) {
    RudpFlowState* st = flows_[i].get();
    if (!st) continue;
    rudp::FlowStats f;
    {
      std::lock_guard<std::mutex> lock(st->mu);
      f = st->flow.stats();
    }
    o << "\n  " << names_[st->peer] << " class " << st->cls << ": sent " << f.packetsSent
      << " pkts (" << f.bytesSent << " B), retransmits " << f.retransmits << ", timeouts "
      << f.timeouts << ", srtt " << f.srttNs / 1000 << " us, rttvar " << f.rttvarNs / 1000
      << " us, rto " << f.rtoNs / 1000 << " us, cwnd " << static_cast<uint64_t>(f.cwnd)
      << ", received " << f.packetsReceived << " pkts (" << f.inPlace << " in place), duplicates "
      << f.duplicates << ", out-of-order " << f.outOfOrder << ", probes " << f.probes
      << ", losses found within a path " << f.pathLosses << ", path reordering seen "
      << f.pathReorders;
  }
  return o.str();
}

}  // namespace loom
