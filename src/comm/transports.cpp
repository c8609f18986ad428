#include "comm/transports.hpp"

#include <algorithm>
#include <cstring>

#include "base/env.hpp"
#include "base/log.hpp"
#include "base/shm_segment.hpp"
#include "base/wait.hpp"
#include "transport/rudp/rudp_engine.hpp"
#include "transport/shm/shm_channel.hpp"
#include "transport/tcp/interfaces.hpp"
#include "transport/tcp/tcp_connect.hpp"

namespace loom {

Transports::Transports(const TransportSetup& setup)
    : rank_(setup.rank), nodes_(*setup.nodes), singleNode_(setup.nodes->singleNode()) {
  collective_.resize(setup.nranks);
  p2p_.resize(setup.nranks);
  // Every node has an arena of its own ranks (abort word, channels inside the node); the flat
  // arena algorithms need all ranks in one, so they run only when there is a single node.
  setUpArena(setup);
  if (!singleNode_) {
    // Every rank must pick the same network transport, or their channels would never meet.
    std::vector<std::string> choices = setup.allGather(setup.transport);
    for (int r = 0; r < setup.nranks; ++r)
      LOOM_CHECK_ARG(choices[r] == setup.transport,
                     "LOOM_TRANSPORT differs between ranks: ", setup.transport, " on rank ", rank_,
                     ", ", choices[r], " on rank ", r);
    if (setup.transport == "rudp")
      setUpRudp(setup);
    else
      setUpTcp(setup);
  }
}

Transports::~Transports() = default;

void Transports::setUpArena(const TransportSetup& setup) {
  const size_t chunk = static_cast<size_t>(std::max<int64_t>(env::shmChunkBytes(), 0));
  const size_t channel = static_cast<size_t>(std::max<int64_t>(env::p2pBufferBytes(), 4096));
  const int node = nodes_.nodeOf(rank_), local = nodes_.localIndex(rank_);
  const std::vector<int>& members = nodes_.members(node);
  ArenaLayout layout = ArenaLayout::compute(nodes_.nodeSize(node), chunk, channel);
  std::string name;
  if (local == 0) {
    name = ShmSegment::uniqueName("/loom-");
    arena_ = ShmArena::create(name, layout);
  }
  // Each node's leader created its node's arena; everyone takes their own leader's name. The
  // same exchange compares what must agree for collectives to meet: the mismatch check (its
  // headers are in the channels' streams) and the selector's settings.
  std::vector<std::string> all = setup.allGather(name + '\n' + setup.settings);
  for (int r = 0; r < setup.nranks; ++r) {
    std::string theirs = all[r].substr(all[r].find('\n') + 1);
    LOOM_CHECK_ARG(theirs == setup.settings, "settings differ between ranks: ",
                   env::settingsDifference(setup.settings, rank_, theirs, r, ' '));
  }
  name = all[members[0]].substr(0, all[members[0]].find('\n'));
  if (local != 0) arena_ = ShmArena::attach(name, layout);
  // Touch this rank's own staging slots now: page faults stay out of the first collective, and
  // the pages land on this rank's memory node, where its copy-in writes them.
  for (uint64_t step = 0; step < 2; ++step) {
    std::memset(arena_.inSlot(local, step), 0, layout.slotBytes);
    std::memset(arena_.outSlot(local, step), 0, layout.slotBytes);
  }
  setup.barrier();  // everyone mapped it: the name can go
  if (local == 0) arena_.unlinkName();
  for (int i = 0; i < static_cast<int>(members.size()); ++i) {
    const int peer = members[i];
    collective_[peer] =
        std::make_unique<ShmChannel>(arena_, ChannelClass::kCollective, local, i, peer);
    p2p_[peer] = std::make_unique<ShmChannel>(arena_, ChannelClass::kPointToPoint, local, i, peer);
  }
  LOOM_INFO(kSubsysShm, rank_, "shared arena ", name, " (", members.size(),
            " ranks): ", layout.totalBytes >> 20, " MiB mapped, slot ", layout.slotBytes,
            " B, channel ", layout.channelBytes, " B");
}

void Transports::setUpTcp(const TransportSetup& setup) {
  const std::vector<RankInfo>& ranks = *setup.ranks;
  TcpSetup tcp;
  tcp.rank = rank_;
  tcp.nranks = setup.nranks;
  tcp.classes = 2;  // collectives and point-to-point never share a byte stream
  int64_t streams = env::socketStreams();
  LOOM_CHECK_ARG(streams >= 1 && streams <= 64, "LOOM_SOCKET_STREAMS=", streams,
                 " is out of range (1 to 64)");
  tcp.streams = static_cast<int>(streams);
  for (int r = 0; r < setup.nranks; ++r) {
    tcp.remote.push_back(!nodes_.sameNode(r, rank_));
    tcp.names.push_back("rank " + std::to_string(r) + " on " + ranks[r].hostname);
  }
  tcp.itf = chooseInterface(listInterfaces(), env::socketIfname(), allOnOneMachine(ranks));
  tcp.secret = deriveSecret(setup.id.secret, setup.id.jobNonce, "tcp-transport");
  tcp.allGather = setup.allGather;
  tcp.deadline = deadlineAfterMs(setup.timeoutMs);
  tcp.abortFlag = setup.abortFlag;
  TcpSockets sockets = connectTcpPeers(tcp);
  const size_t staging = static_cast<size_t>(std::max<int64_t>(env::p2pBufferBytes(), 4096));
  for (int peer = 0; peer < setup.nranks; ++peer) {
    if (!tcp.remote[peer]) continue;
    auto coll = std::make_unique<TcpChannel>(peer, std::move(sockets[0][peer]), staging);
    auto p2p = std::make_unique<TcpChannel>(peer, std::move(sockets[1][peer]), staging);
    tcp_.push_back(coll.get());
    tcp_.push_back(p2p.get());
    collective_[peer] = std::move(coll);
    p2p_[peer] = std::move(p2p);
  }
  // No data may flow before every listener has registered all of its connections.
  setup.barrier();
  interface_ = tcp.itf.name + " " + tcp.itf.address;
  LOOM_INFO(kSubsysNet, rank_, "TCP transport on ", interface_, ", ", tcp.streams,
            " connections per peer and channel; ", nodes_.describe());
}

void Transports::setUpRudp(const TransportSetup& setup) {
  const std::vector<RankInfo>& ranks = *setup.ranks;
  RudpSetup rudp;
  rudp.rank = rank_;
  rudp.nranks = setup.nranks;
  rudp.classes = 2;  // collectives and point-to-point never share a stream
  rudp.paths = static_cast<int>(env::rudpPaths());
  for (int r = 0; r < setup.nranks; ++r) {
    rudp.remote.push_back(!nodes_.sameNode(r, rank_));
    rudp.names.push_back("rank " + std::to_string(r) + " on " + ranks[r].hostname);
  }
  rudp.itf = chooseInterface(listInterfaces(), env::socketIfname(), allOnOneMachine(ranks));
  rudp.secret = deriveSecret(setup.id.secret, setup.id.jobNonce, "rudp-transport");
  const int64_t window = env::rudpWindowBytes(), retries = env::rudpRetries();
  const int64_t rtoMax = env::rudpRtoMaxMs();
  LOOM_CHECK_ARG(window >= 65536 && window <= (int64_t{1} << 32) && window % 8 == 0,
                 "LOOM_RUDP_WINDOW_BYTES=", window, " must be a multiple of 8 in [64 KiB, 4 GiB]");
  LOOM_CHECK_ARG(retries >= 1 && retries <= 1000, "LOOM_RUDP_RETRIES=", retries,
                 " is out of range (1 to 1000)");
  LOOM_CHECK_ARG(rtoMax >= 10 && rtoMax <= 60000, "LOOM_RUDP_RTO_MAX_MS=", rtoMax,
                 " is out of range (10 to 60000)");
  rudp.flow.windowBytes = static_cast<size_t>(window);
  rudp.flow.maxRetries = static_cast<uint32_t>(retries);
  rudp.flow.rtoMaxNs = static_cast<uint64_t>(rtoMax) * 1'000'000;
  rudp.faults = env::rudpFaults();
  rudp.gso = env::rudpGso();
  // auto: only where cores are scarce. Measured: on a 2-core host a rank's progress thread on its
  // caller's core made 1 MiB calls 1.2-2.5x faster; on 16 cores it made them up to 1.3x slower
  // (the two threads no longer ran in parallel). Scarce: the node's ranks' callers and progress
  // threads, plus a core for the kernel's network processing, outnumber the cores.
  const std::string follow = env::rudpFollowCaller();
  LOOM_CHECK_ARG(follow == "auto" || follow == "1" || follow == "0",
                 "LOOM_RUDP_FOLLOW_CALLER=", follow, " must be auto, 1 or 0");
  rudp.followCaller =
      follow == "1" || (follow == "auto" && usableCores() < 2 * nodes_.localSize(rank_) + 2);
  rudp.callerReceives = env::rudpCallerReceives();
  rudp.lingerMs = std::min<int64_t>(setup.timeoutMs, 2000);
  rudp.allGather = setup.allGather;
  rudp_ = std::make_unique<RudpEngine>(rudp);
  for (int peer = 0; peer < setup.nranks; ++peer) {
    if (!rudp.remote[peer]) continue;
    collective_[peer] = rudp_->channel(peer, 0);
    p2p_[peer] = rudp_->channel(peer, 1);
  }
  interface_ = rudp.itf.name + " " + rudp.itf.address;
  LOOM_INFO(kSubsysNet, rank_, "rudp transport on ", interface_, ", ", rudp_->paths(), " paths, ",
            rudp_->mss(), " B per packet; ", nodes_.describe());
}

const char* Transports::to(int peer) const {
  return nodes_.sameNode(peer, rank_) ? "shm" : rudp_ ? "rudp" : "tcp";
}

std::string Transports::counters() const {
  return rudp_ ? rudp_->describeCounters() : std::string();
}

void Transports::shutDown(const std::string& reason) {
  for (TcpChannel* channel : tcp_) channel->shutdown();
  if (rudp_) rudp_->reset(reason);
}

}  // namespace loom
