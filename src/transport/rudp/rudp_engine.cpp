#include "transport/rudp/rudp_engine.hpp"

#include <fcntl.h>
#include <net/if.h>
#include <netdb.h>
#include <netinet/udp.h>
#include <poll.h>
#include <pthread.h>
#include <sys/eventfd.h>
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

constexpr size_t kBatch = 32;             // datagrams per sendmmsg when GSO is off
constexpr size_t kMaxSegments = 64;       // datagrams per GSO burst (the kernel's older limit)
constexpr size_t kMaxBurstBytes = 65000;  // a GSO burst is one IP datagram before segmentation
constexpr uint64_t kFlowletTrains = 16;   // trains sent on one path before the next (~1 MiB)
constexpr int kSocketBuffer = 8 << 20;    // bursts of a whole window must not overflow the kernel

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

void signal(const Fd& eventFd) {
  uint64_t one = 1;
  ssize_t r = write(eventFd.get(), &one, sizeof(one));
  (void)r;
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
  dataReady = Fd(eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC));
  int fds[2];
  if (!dataReady.valid() || pipe2(fds, O_NONBLOCK | O_CLOEXEC) != 0)
    LOOM_THROW(loomSystemError, "rudp transport: eventfd/pipe: ", std::strerror(errno));
  roomPipe[0] = Fd(fds[0]);
  roomPipe[1] = Fd(fds[1]);
  // One page: a single byte in it makes the write end stop polling POLLOUT.
  fcntl(fds[1], F_SETPIPE_SZ, 4096);
}

void RudpFlowState::notifyData() {
  if (dataSignalled) return;
  dataSignalled = true;
  signal(dataReady);
}

void RudpFlowState::drainRoom() { drain(roomPipe[0].get()); }

void RudpFlowState::takeWakeup() {
  if (!dataSignalled) return;
  dataSignalled = false;
  uint64_t count;
  ssize_t r = read(dataReady.get(), &count, sizeof(count));
  (void)r;
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
  if (!s.faults.empty()) {
    std::istringstream in(s.faults);
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
  std::vector<std::string> endpoints = s.allGather(mine);
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
  wakeFd_ = Fd(eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC));
  recvBufs_.resize(kRecvScratchBytes);
  headers_.resize(kRoom * rudp::kHeaderBytes);
  burst_.iov.reserve(4 * kMaxSegments);
  burst_.merged.reserve(4 * kMaxSegments);
  thread_ = std::thread([this] { run(); });
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

void RudpEngine::wake() { signal(wakeFd_); }

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

void RudpEngine::run() {
  // The wake-up first: while callers receive, the thread polls it alone.
  std::vector<pollfd> pfds;
  pfds.push_back({wakeFd_.get(), POLLIN, 0});
  // After the caller held the send lock through a timer wake: when to look again.
  constexpr uint64_t kDeferNs = 50'000;
  uint64_t deferUntil = 0;
  for (const Fd& fd : sockets_) pfds.push_back({fd.get(), POLLIN, 0});
  while (!stop_.load()) {
    uint64_t now = steadyNowNs();
    if (follow_) followCaller(now);
    if (resetRequested_.exchange(false)) {
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
    // Published before the timers are read: a caller that sends after this point and sees no
    // deadline yet, or a later one than its flow needs, wakes the thread (sendNow).
    plannedWake_.store(0);
    sleeping_.store(true);
    uint64_t next = UINT64_MAX;
    bool busy = false;
    for (auto& st : flows_) {
      if (!st) continue;
      std::lock_guard<std::mutex> lock(st->mu);
      next = std::min(next, st->flow.nextTimer());
      busy |= st->flow.wantsToSend();
    }
    if (faulty_) {
      std::lock_guard<std::mutex> send(sendMu_);
      for (const Held& h : held_) next = std::min(next, h.due);
    }
    // A caller that called lately reads the sockets when it waits: leave them to it until it has
    // been quiet for kCallerQuietNs, then read them here again (and before every timer).
    const uint64_t callerUntil =
        callerReceives_ ? lastCall_.load(std::memory_order_relaxed) + kCallerQuietNs : 0;
    const bool callerActive = now < callerUntil;
    const uint64_t timersDue = next;
    if (callerActive) next = std::min(next, callerUntil);
    if (!busy && now < deferUntil) next = std::max(next, deferUntil);
    long timeoutNs = busy                 ? 0
                     : next == UINT64_MAX ? 100'000'000L
                     : next <= now        ? 0
                                   : static_cast<long>(std::min<uint64_t>(next - now, 100'000'000));
    timespec ts{timeoutNs / 1'000'000'000, timeoutNs % 1'000'000'000};
    plannedWake_.store(now + static_cast<uint64_t>(timeoutNs));
    int ready = ppoll(pfds.data(), callerActive ? 1 : pfds.size(), &ts, nullptr);
    sleeping_.store(false);
    now = steadyNowNs();
    const bool woken = ready > 0 && (pfds[0].revents & POLLIN);
    // Woken only to see whether the caller went quiet, and it has not: nothing is due and the
    // sockets are the caller's, so the thread neither reads nor sends (it used to, every 200 us,
    // contending with the caller for the receive and send locks: two context switches a time).
    if (callerActive && !woken && !busy && now < timersDue &&
        now < lastCall_.load(std::memory_order_relaxed) + kCallerQuietNs)
      continue;
    if (ready > 0 || callerActive) {
      if (woken) drain(wakeFd_.get());
      // While the caller is active and reading the sockets itself, what it reads is read: the
      // thread does not queue behind it (a futex sleep and wake-up each time).
      std::unique_lock<std::mutex> receiving(recvMu_, std::defer_lock);
      if (callerActive ? receiving.try_lock() : (receiving.lock(), true)) receivePass(now, nullptr);
    }
    // Likewise a caller sending right now sends its flow, timers included (collect() runs them);
    // only what is due for sure (busy: new data, losses, ACKs) waits for the lock.
    std::unique_lock<std::mutex> send(sendMu_, std::defer_lock);
    if (callerActive && !busy && !woken) {
      if (!send.try_lock()) {
        deferUntil = now + kDeferNs;  // a timer it left due is looked at again then, not spun on
        continue;
      }
    } else {
      send.lock();
    }
    releaseHeld(now, false);
    for (auto& st : flows_)
      if (st) sendFlow(*st);
  }
  std::lock_guard<std::mutex> send(sendMu_);
  releaseHeld(steadyNowNs(), true);
}

void RudpEngine::followCaller(uint64_t now) {
  // Why: the caller and this thread hand every message over to each other (a send, its ACKs, the
  // wake-up of a waiting reader). Left to the scheduler, both ranks' four threads on a 2-core host
  // piled onto one core for tens of milliseconds at a time (its wake-up affinity), or a rank's
  // two threads woke each other across cores; on the caller's core, a hand-over is a switch on a
  // core already awake. Measured between two namespace nodes: a 1 MiB sendrecv 1180-1580 us
  // without, 457-474 us with (TCP 497-515 us).
  const int want = callerCpu_.load(std::memory_order_relaxed);
  if (want < 0 || want == threadCpu_ || now < nextMove_) return;
  nextMove_ = now + 1'000'000;  // a caller the scheduler moves often is followed once per ms
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(want, &set);
  if (pthread_setaffinity_np(pthread_self(), sizeof(set), &set) == 0) {
    threadCpu_ = want;
    moves_.fetch_add(1, std::memory_order_relaxed);
  }
}

void RudpEngine::sendNow(RudpFlowState& st) {
  // The caller sends what its flow has (no hand-off to the thread, one wake-up less per
  // message); if the thread is sending right now, it is told to come round again instead.
  if (!sendMu_.try_lock()) {
    wake();
    return;
  }
  sendFlow(st);
  sendMu_.unlock();
  uint64_t timer;
  bool more;
  {
    std::lock_guard<std::mutex> lock(st.mu);
    timer = st.flow.nextTimer();
    more = st.flow.wantsToSend();
  }
  // The thread sends what is left and runs the flow's timers (loss probe, timeout).
  if (more) {
    wake();
  } else {
    wakeIfAsleepPast(timer);
  }
}

void RudpEngine::sendFlow(RudpFlowState& st) {
  // A few rounds: a caller's 512 KiB used to send 256 datagrams and leave the rest until its next
  // call found nothing to read, while the peer waited for them. Bounded, so that other flows'
  // ACKs do not wait behind a whole window; sendNow wakes the thread for what is left.
  for (int round = 0; round < 4 && sendRound(st) == kRoom; ++round) {
  }
}

size_t RudpEngine::sendRound(RudpFlowState& st) {
  // Read now, under sendMu_, not when the round began: send times must rise in the order the
  // packets leave (RACK finds losses by them), and the thread, after receiving for a while, would
  // stamp its packets earlier than those a caller sent meanwhile, which left before them.
  const uint64_t now = steadyNowNs();
  out_.clear();
  {
    std::lock_guard<std::mutex> lock(st.mu);
    bool wasFailed = st.flow.failed();
    st.flow.collect(now, out_, kRoom);
    if (!wasFailed && st.flow.failed()) {
      LOOM_WARN(kSubsysNet, rank_, "rudp: ", names_[st.peer], ": ", st.flow.failure());
      st.notifyData();
      drain(st.roomPipe[0].get());
    }
  }
  if (out_.empty()) return 0;
  // Payloads stay valid unlocked: data lies in ring space the channel cannot reuse until both its
  // ACK came and sendDone() below (an ACK that another thread processes meanwhile, for the
  // original of a retransmission being sent, frees nothing yet), and the SACK bitmap changes
  // only in collect(), under sendMu_ as this is.
  // The flow chose each datagram's path (FlowConfig::flowletPackets): trains go out on one path
  // in flowlets of kFlowletTrains, then on the next, so a fabric that hashes on ports still
  // spreads a flow over every path, and the packets of one flowlet arrive in order (which the
  // flow's loss detection relies on). Switching at every train made the kernel itself reorder a
  // third of the packets (trains of two sockets in flight at once on two CPUs), which cost
  // receiving in place and made RACK resend some.
  for (size_t i = 0; i < out_.size(); ++i) {
    rudp::Outgoing& o = out_[i];
    o.h.commId = commId_;
    o.h.src = static_cast<uint32_t>(rank_);
    o.h.dst = static_cast<uint32_t>(st.peer);
    o.h.cls = static_cast<uint8_t>(st.cls);
    // In the send ring right before the payload where the flow has room there (whole packets):
    // a train of them is then one buffer for the kernel to copy.
    char* header = o.headroom != nullptr ? o.headroom : headers_.data() + i * rudp::kHeaderBytes;
    rudp::encodeHeader(o.h, keys_, o.payload, header);
    transmit(o.h.path, st.peer, header, o.payload, now);
  }
  flush();
  {
    std::lock_guard<std::mutex> lock(st.mu);
    st.flow.sendDone();
    st.unblockWriter();  // room the send held back may be free now
  }
  return out_.size();
}

void RudpEngine::transmit(int path, int peer, const char* header, std::span<const char> payload,
                          uint64_t now) {
  if (fault_.drop + fault_.dup + fault_.delay > 0) {
    std::uniform_real_distribution<double> u(0, 1);
    if (u(faultRng_) < fault_.drop) return;
    if (u(faultRng_) < fault_.delay) {
      // Held back up to 2 ms: later packets overtake it (reordering), it is never lost.
      Held h{now + faultRng_() % 2'000'000, path, peer, {}};
      h.bytes.assign(header, header + rudp::kHeaderBytes);
      h.bytes.insert(h.bytes.end(), payload.begin(), payload.end());
      const uint64_t due = h.due;
      held_.push_back(std::move(h));
      wakeIfAsleepPast(due);  // a caller's send: the thread releases it
      return;
    }
    if (u(faultRng_) < fault_.dup) append(path, peer, header, payload);
  }
  append(path, peer, header, payload);
}

void RudpEngine::append(int path, int peer, const char* header, std::span<const char> payload) {
  const size_t bytes = rudp::kHeaderBytes + payload.size();
  Burst& b = burst_;
  if (!b.iov.empty() && (b.path != path || b.peer != peer || b.lastShort || bytes > b.segBytes ||
                         b.iov.size() / 2 >= kMaxSegments || b.total + bytes > kMaxBurstBytes))
    flush();
  if (b.iov.empty()) {
    b.path = path;
    b.peer = peer;
    b.segBytes = bytes;
    b.total = 0;
  }
  b.lastShort = bytes < b.segBytes;
  b.total += bytes;
  b.iov.push_back({const_cast<char*>(header), rudp::kHeaderBytes});
  b.iov.push_back({const_cast<char*>(payload.data()), payload.size()});
}

void RudpEngine::flush() {
  const size_t n = burst_.iov.size() / 2;
  if (n == 0) return;
  if (gso_ && n > 1) {
    // Pieces that lie back to back (headers written into the send ring before their payloads,
    // consecutive packets) are one: per piece, the kernel's copy costs as much as for a datagram.
    std::vector<iovec>& merged = burst_.merged;
    merged.clear();
    for (const iovec& v : burst_.iov) {
      if (v.iov_len == 0) continue;
      if (!merged.empty() && static_cast<char*>(merged.back().iov_base) + merged.back().iov_len ==
                                 static_cast<char*>(v.iov_base))
        merged.back().iov_len += v.iov_len;
      else
        merged.push_back(v);
    }
    sendBurst(0, n, true);
  } else {
    for (size_t first = 0; first < n; first += kBatch)
      sendBurst(first, std::min(kBatch, n - first), false);
  }
  burst_.iov.clear();
}

void RudpEngine::sendBurst(size_t first, size_t count, bool gso) {
  Burst& b = burst_;
  sockaddr_storage* to = &addr_[b.peer][b.path];
  const int fd = sockets_[b.path].get();
  for (int attempt = 0; attempt < 2; ++attempt) {
    int r;
    if (gso) {
      msghdr msg{};
      msg.msg_name = to;
      msg.msg_namelen = addrLen_[b.peer];
      msg.msg_iov = b.merged.data();  // the whole burst: first == 0, count == all
      msg.msg_iovlen = b.merged.size();
      alignas(cmsghdr) char ctrl[CMSG_SPACE(sizeof(uint16_t))] = {};
      msg.msg_control = ctrl;
      msg.msg_controllen = sizeof(ctrl);
      cmsghdr* c = CMSG_FIRSTHDR(&msg);
      c->cmsg_level = SOL_UDP;
      c->cmsg_type = UDP_SEGMENT;
      c->cmsg_len = CMSG_LEN(sizeof(uint16_t));
      uint16_t seg = static_cast<uint16_t>(b.segBytes);
      std::memcpy(CMSG_DATA(c), &seg, sizeof(seg));
      r = static_cast<int>(sendmsg(fd, &msg, MSG_DONTWAIT | MSG_NOSIGNAL));
      if (r < 0 && (errno == EIO || errno == EINVAL || errno == EOPNOTSUPP)) {
        // No segmentation offload on this path after all: datagram by datagram from now on.
        gso_ = false;
        LOOM_INFO(kSubsysNet, rank_, "rudp: UDP GSO refused (", std::strerror(errno),
                  "); sending datagram by datagram");
        for (size_t f = first; f < first + count; f += kBatch)
          sendBurst(f, std::min(kBatch, first + count - f), false);
        return;
      }
      if (r >= 0) return;
    } else {
      mmsghdr msgs[kBatch];
      for (size_t i = 0; i < count; ++i) {
        msgs[i] = {};
        msgs[i].msg_hdr.msg_name = to;
        msgs[i].msg_hdr.msg_namelen = addrLen_[b.peer];
        msgs[i].msg_hdr.msg_iov = b.iov.data() + 2 * (first + i);
        msgs[i].msg_hdr.msg_iovlen = b.iov[2 * (first + i) + 1].iov_len == 0 ? 1 : 2;
      }
      r = sendmmsg(fd, msgs, static_cast<unsigned>(count), MSG_DONTWAIT | MSG_NOSIGNAL);
      if (r > 0) {
        first += static_cast<size_t>(r);
        count -= static_cast<size_t>(r);
        if (count == 0) return;
        continue;
      }
    }
    if (errno != EAGAIN && errno != EWOULDBLOCK && errno != ENOBUFS) return;  // lost: recovered
    pollfd pfd{fd, POLLOUT, 0};
    poll(&pfd, 1, 1);
  }
}

void RudpEngine::releaseHeld(uint64_t now, bool all) {
  for (size_t i = 0; i < held_.size();) {
    if (all || held_[i].due <= now) {
      Held h = std::move(held_[i]);
      held_[i] = std::move(held_.back());
      held_.pop_back();
      if (!all) {
        const char* p = h.bytes.data();
        Fault saved = fault_;
        fault_ = {};  // a held packet is not faulted twice
        transmit(h.path, h.peer, p, {p + rudp::kHeaderBytes, h.bytes.size() - rudp::kHeaderBytes},
                 now);
        flush();  // h dies here
        fault_ = saved;
      }
    } else {
      ++i;
    }
  }
}

}  // namespace loom
