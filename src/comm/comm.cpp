#include "comm/comm.hpp"

#include <poll.h>
#include <signal.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <sstream>
#include <thread>

#include "base/dtype.hpp"
#include "base/env.hpp"
#include "base/log.hpp"
#include "base/shm_segment.hpp"
#include "base/wait.hpp"
#include "comm/flight_registry.hpp"
#include "device/cpu/cpu_device.hpp"
#include "device/registry.hpp"
#include "transport/rudp/rudp_engine.hpp"
#include "transport/shm/shm_channel.hpp"
#include "transport/tcp/interfaces.hpp"
#include "transport/tcp/tcp_channel.hpp"
#include "transport/tcp/tcp_connect.hpp"

namespace loom {

namespace {

constexpr auto kPeerCheckInterval = std::chrono::milliseconds(5);

size_t defaultDirectMax(int nranks) {
  // One-shot makes every rank pull every other rank's buffer across cores; pipelined pulls each
  // byte about twice whatever the rank count. Crossovers measured on a 64-core host
  // (docs/benchmarks.md): ~6 KiB at 4 ranks, under 1 KiB at 8 and 16.
  if (nranks <= 2) return 64 * 1024;
  if (nranks <= 4) return 8 * 1024;
  if (nranks <= 8) return 1024;
  return 512;
}

int openPidfd(int pid) {
#ifdef SYS_pidfd_open
  return static_cast<int>(syscall(SYS_pidfd_open, pid, 0));
#else
  (void)pid;
  return -1;
#endif
}

}  // namespace

CommConfig resolveConfig(const loomConfig_t* c) {
  CommConfig cfg;
  cfg.device = env::device();
  cfg.timeoutMs = env::timeoutMs();
  std::string accum = env::accumType();
  if (!accum.empty()) {
    auto type = dtypeFromName(accum);
    LOOM_CHECK_ARG(type.has_value(), "LOOM_ACCUM_TYPE='", accum, "' is not a data type name");
    cfg.accum = *type;
  }
  cfg.transport = env::transport();
  cfg.clusterSplit = env::clusterSplit();
  cfg.algo = env::algoOverride();
  LOOM_CHECK_ARG(cfg.transport == "tcp" || cfg.transport == "rudp", "LOOM_TRANSPORT='",
                 cfg.transport, "' is not tcp or rudp");
  if (c == nullptr) return cfg;
  LOOM_CHECK_ARG(c->magic == LOOM_CONFIG_MAGIC && c->size >= sizeof(size_t) * 2,
                 "config was not initialized with LOOM_CONFIG_INITIALIZER");
  if (c->device != nullptr) cfg.device = c->device;
  LOOM_CHECK_ARG(c->timeoutMs >= 0, "config timeoutMs must be >= 0, got ", c->timeoutMs);
  if (c->timeoutMs > 0) cfg.timeoutMs = c->timeoutMs;
  cfg.blocking = c->blocking != 0;
  if (c->name != nullptr) cfg.name = c->name;
  if (c->accumType >= 0) {
    LOOM_CHECK_ARG(dtypeValid(c->accumType), "config accumType ", c->accumType, " is not a type");
    cfg.accum = c->accumType;
  }
  LOOM_CHECK_ARG(cfg.blocking || parseDeviceSpec(cfg.device).first == "cpu",
                 "non-blocking communicators are supported on the CPU only (device \"", cfg.device,
                 "\")");
  return cfg;
}

Comm::Comm(const UniqueId& id, int nranks, int rank, const CommConfig& config)
    : config_(config),
      rank_(rank),
      nranks_(nranks),
      id_(id),
      aborted_(config.abortFlag != nullptr ? config.abortFlag : &ownAborted_) {
  // The tree's progress queue: the caller's (a non-blocking handle's, a parent's), or one of its
  // own. The tree's root reports the queue's failures (from the end of this constructor on).
  if (config_.progress == nullptr) ownProgress_ = std::make_unique<ProgressQueue>();
  progress_ = config_.progress != nullptr ? config_.progress : ownProgress_.get();
  device_ = DeviceRegistry::process().create(config_.device);
  hostDevice_ = createCpuDevice();
  // "cuda" means the current device at init: split children must use the same one.
  config_.device = device_->spec();
  nextPeerCheck_.resize(nranks_ + 1);
  deadline_ = Clock::now() + std::chrono::milliseconds(config_.timeoutMs);
  Bootstrap::Options options;
  options.timeoutMs = config_.timeoutMs;
  options.abortFlag = aborted_;
  bootstrap_ = std::make_unique<Bootstrap>(
      id, rank, nranks, RankInfo::local(rank, *device_, config_.clusterSplit).serialize(), options);
  for (const std::string& bytes : bootstrap_->rankInfos())
    ranks_.push_back(RankInfo::deserialize(bytes));
  nodes_ = NodeMap::compute(ranks_);
  crossCheckLauncher();
  // Every node has an arena of its own ranks (abort word, channels inside the node); the flat
  // arena algorithms need all ranks in one, so they run only when there is a single node.
  sharedMemory_ = nodes_.singleNode();
  collChannels_.resize(nranks_);
  p2pChannels_.resize(nranks_);
  peerPidfds_.assign(nranks_, -1);
  checkMode_ = env::checkMode();
  callCheck_.enabled = checkMode_ >= 1;
  setUpSharedMemory();
  if (!sharedMemory_) setUpTcp();
  setUpClusters();
  if (!hetero_) setUpNative();
  // Native kernels (CUDA) carry no signature: LOOM_CHECK=2's round trip is their check.
  if (native_) callCheck_.enabled = false;
  setUpFlight();

  SelectorInputs inputs;
  inputs.nranks = nranks_;
  inputs.sharedMemory = sharedMemory_;
  inputs.nodesShared = !sharedMemory_ && nodes_.maxNodeSize() > 1;
  int64_t directMax = env::directMaxBytes();
  inputs.directMaxBytes =
      directMax >= 0 ? static_cast<size_t>(directMax) : defaultDirectMax(nranks);
  inputs.device = hetero_ ? "heterogeneous" : device_->identity().kind;
  if (native_) {
    nativeAlgorithms_ = nativeAlgorithms(*native_);
    inputs.native = &nativeAlgorithms_;
    inputs.nativeRows = native_->selectorRows();
  }
  selector_ = std::make_unique<Selector>(inputs, config_.algo);

  ctx_.rank = rank_;
  ctx_.nranks = nranks_;
  ctx_.device = device_.get();
  ctx_.arena = sharedMemory_ ? &arena_ : nullptr;
  // The ranks on this host, whichever algorithm runs: whom a wait may yield its core to.
  ctx_.peers =
      CoreSharing(arena_.presence(), arena_.nranks(), nodes_.localIndex(rank_), usableCores());
  for (auto& channel : collChannels_) collChannelViews_.push_back(channel.get());
  ctx_.channels = &collChannelViews_;
  ctx_.step = &step_;
  ctx_.check = [this](int peer) { check(peer); };
  ctx_.callCheck = &callCheck_;
  ctx_.mismatch = [this](const std::vector<std::optional<CallSignature>>& seen) {
    throwArenaMismatch(seen);
  };
  ctx_.scratch = &scratch_;
  sources_.resize(nranks_);
  inboxes_.resize(nranks_);
  ringSteps_.reserve(2 * nranks_);
  ctx_.sources = &sources_;
  ctx_.ringSteps = &ringSteps_;
  ctx_.opList = &opList_;
  ctx_.refList = &refList_;
  ctx_.schedule = &schedule_;
  ctx_.executor = &executor_;
  ctx_.bindings = &bindings_;
  ctx_.pollSet = &pollSet_;
  ctx_.streamingMinBytes = static_cast<size_t>(std::max<int64_t>(env::streamingMinBytes(), 0));
  ctx_.native = native_.get();
  hostCtx_ = ctx_;
  hostCtx_.device = hostDevice_.get();
  if (!sharedMemory_ && !native_) setUpHierarchy();
  if (onDevice() && !native_) staging_ = std::make_unique<HostStaging>(*device_);
  if (!native_) setUpP2PEngine();
  if (staging_ && device_->caps().hostTasks && !env::deviceBlocking()) {
    StreamJobs::Hooks hooks;
    hooks.run = [this](StreamJob& job) { runJob(job); };
    hooks.timeoutMs = config_.timeoutMs;
    jobs_ = std::make_unique<StreamJobs>(*device_, std::move(hooks), *progress_);
  }
  const DeviceIdentity& identity = device_->identity();
  deviceDescription_ =
      device_->spec() + " (" + identity.vendor + " " + identity.model + "; " +
      (native_       ? "native collectives: " + native_->describe()
       : hetero_     ? std::string(onDevice() ? "heterogeneous: host algorithms, this rank's data "
                                                    "pipelined through pinned host memory"
                                              : "heterogeneous: host algorithms on its own memory")
       : !onDevice() ? std::string("host algorithms")
       : device_->caps().mapsHostMemory && device_->caps().reduces
           ? std::string("host algorithms with the device's copies and reductions on one node, "
                         "else staged through host memory")
           : std::string("host algorithms staged through host memory")) +
      (jobs_ ? "; calls return at once and complete in stream order" : "") + ")";
  LOOM_INFO(kSubsysInit, rank_, "communicator ", config_.name.empty() ? "" : config_.name + " ",
            "ready: rank ", rank_, " of ", nranks_, ", device ", deviceDescription_, ", ",
            sharedMemory_ ? "shared memory" : "several hosts", ", timeout ", config_.timeoutMs,
            " ms");
  if (rank_ == 0) LOOM_INFO(kSubsysTune, rank_, selector_->explain());
  if (hetero_ && rank_ == 0) LOOM_INFO(kSubsysInit, rank_, describeHeterogeneous());
  if (hetero_) prepareComposition();
  if (config_.progressRoot || ownProgress_)
    progress_->setFailHook([this](const Error& e) { fail(e); });
}

void Comm::crossCheckLauncher() const {
  // Only the world communicator matches the launcher's picture; a subset of it never does.
  if (config_.splitChild) return;
  std::optional<std::string> worldSize = env::get("WORLD_SIZE");
  if (!worldSize) worldSize = env::get("OMPI_COMM_WORLD_SIZE");
  if (!worldSize || *worldSize != std::to_string(nranks_)) return;
  std::string why = localSizeMismatch(nodes_, rank_, launcherLocalSize());
  if (!why.empty()) LOOM_WARN(kSubsysInit, rank_, why);
}

Comm::~Comm() {
  if (flight_) FlightRegistry::process().remove(*flight_);
  // First: its jobs run host algorithms of this communicator and its sub-communicators on the
  // staging memory. If the device's stream did not get past them, the memory stays allocated.
  if (jobs_ && !jobs_->stop()) (void)staging_.release();
  p2pEngine_.reset();  // its thread checks the peers' pidfds and drives the channels
  leaderComm_.reset();
  clusterComm_.reset();
  native_.reset();  // its watchdog uses the peers' pidfds and the bootstrap
  staging_.reset();
  for (int fd : peerPidfds_)
    if (fd >= 0) close(fd);
  if (config_.progressRoot) progress_->setFailHook(nullptr);  // the handle's queue outlives it
}

void Comm::setUpSharedMemory() {
  size_t chunk = static_cast<size_t>(std::max<int64_t>(env::shmChunkBytes(), 0));
  size_t channel = static_cast<size_t>(std::max<int64_t>(env::p2pBufferBytes(), 4096));
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
  std::string settings = "LOOM_CHECK=" + std::to_string(checkMode_) + " LOOM_ALGO=" + config_.algo +
                         " LOOM_DIRECT_MAX_BYTES=" + std::to_string(env::directMaxBytes());
  std::vector<std::string> all =
      withBootstrap([&](Bootstrap& b) { return b.allGather(name + '\n' + settings); });
  for (int r = 0; r < nranks_; ++r) {
    std::string theirs = all[r].substr(all[r].find('\n') + 1);
    LOOM_CHECK_ARG(theirs == settings, "settings differ between ranks: ", settings, " on rank ",
                   rank_, ", ", theirs, " on rank ", r);
  }
  name = all[members[0]].substr(0, all[members[0]].find('\n'));
  if (local != 0) arena_ = ShmArena::attach(name, layout);
  // Touch this rank's own staging slots now: page faults stay out of the first collective, and
  // the pages land on this rank's memory node, where its copy-in writes them.
  for (uint64_t step = 0; step < 2; ++step) {
    std::memset(arena_.inSlot(local, step), 0, layout.slotBytes);
    std::memset(arena_.outSlot(local, step), 0, layout.slotBytes);
  }
  withBootstrap([](Bootstrap& b) { b.barrier(); });  // everyone mapped it: the name can go
  if (local == 0) arena_.unlinkName();
  for (int i = 0; i < static_cast<int>(members.size()); ++i) {
    int peer = members[i];
    collChannels_[peer] =
        checked(std::make_unique<ShmChannel>(arena_, ChannelClass::kCollective, local, i, peer));
    p2pChannels_[peer] =
        std::make_unique<ShmChannel>(arena_, ChannelClass::kPointToPoint, local, i, peer);
    bool samePidNamespace = ranks_[peer].pidNamespace == ranks_[rank_].pidNamespace;
    peerPidfds_[peer] = peer == rank_ || !samePidNamespace ? -1 : openPidfd(ranks_[peer].pid);
  }
  LOOM_INFO(kSubsysShm, rank_, "shared arena ", name, " (", members.size(),
            " ranks): ", layout.totalBytes >> 20, " MiB mapped, slot ", layout.slotBytes,
            " B, channel ", layout.channelBytes, " B");
}

void Comm::setUpTcp() {
  // Every rank must pick the same network transport, or their channels would never meet.
  std::vector<std::string> choices =
      withBootstrap([&](Bootstrap& b) { return b.allGather(config_.transport); });
  for (int r = 0; r < nranks_; ++r)
    LOOM_CHECK_ARG(choices[r] == config_.transport,
                   "LOOM_TRANSPORT differs between ranks: ", config_.transport, " on rank ", rank_,
                   ", ", choices[r], " on rank ", r);
  if (config_.transport == "rudp") return setUpRudp();
  TcpSetup setup;
  setup.rank = rank_;
  setup.nranks = nranks_;
  setup.classes = 2;  // collectives and point-to-point never share a byte stream
  int64_t streams = env::socketStreams();
  LOOM_CHECK_ARG(streams >= 1 && streams <= 64, "LOOM_SOCKET_STREAMS=", streams,
                 " is out of range (1 to 64)");
  setup.streams = static_cast<int>(streams);
  for (int r = 0; r < nranks_; ++r) {
    setup.remote.push_back(!nodes_.sameNode(r, rank_));
    setup.names.push_back("rank " + std::to_string(r) + " on " + ranks_[r].hostname);
  }
  setup.itf = chooseInterface(listInterfaces(), env::socketIfname(), allOnOneMachine(ranks_));
  setup.secret = deriveSecret(id_.secret, id_.jobNonce, "tcp-transport");
  setup.allGather = [this](const std::string& mine) {
    return withBootstrap([&](Bootstrap& b) { return b.allGather(mine); });
  };
  setup.deadline = deadlineAfterMs(config_.timeoutMs);
  setup.abortFlag = aborted_;
  TcpSockets sockets = connectTcpPeers(setup);
  size_t staging = static_cast<size_t>(std::max<int64_t>(env::p2pBufferBytes(), 4096));
  for (int peer = 0; peer < nranks_; ++peer) {
    if (!setup.remote[peer]) continue;
    auto coll = std::make_unique<TcpChannel>(peer, std::move(sockets[0][peer]), staging);
    auto p2p = std::make_unique<TcpChannel>(peer, std::move(sockets[1][peer]), staging);
    tcpChannels_.push_back(coll.get());
    tcpChannels_.push_back(p2p.get());
    collChannels_[peer] = checked(std::move(coll));
    p2pChannels_[peer] = std::move(p2p);
  }
  // No data may flow before every listener has registered all of its connections.
  withBootstrap([](Bootstrap& b) { b.barrier(); });
  tcpInterface_ = setup.itf.name + " " + setup.itf.address;
  LOOM_INFO(kSubsysNet, rank_, "TCP transport on ", tcpInterface_, ", ", setup.streams,
            " connections per peer and channel; ", nodes_.describe());
}

void Comm::setUpRudp() {
  RudpSetup setup;
  setup.rank = rank_;
  setup.nranks = nranks_;
  setup.classes = 2;  // collectives and point-to-point never share a stream
  setup.paths = static_cast<int>(env::rudpPaths());
  for (int r = 0; r < nranks_; ++r) {
    setup.remote.push_back(!nodes_.sameNode(r, rank_));
    setup.names.push_back("rank " + std::to_string(r) + " on " + ranks_[r].hostname);
  }
  setup.itf = chooseInterface(listInterfaces(), env::socketIfname(), allOnOneMachine(ranks_));
  setup.secret = deriveSecret(id_.secret, id_.jobNonce, "rudp-transport");
  int64_t window = env::rudpWindowBytes(), retries = env::rudpRetries();
  int64_t rtoMax = env::rudpRtoMaxMs();
  LOOM_CHECK_ARG(window >= 65536 && window <= (int64_t{1} << 32) && window % 8 == 0,
                 "LOOM_RUDP_WINDOW_BYTES=", window, " must be a multiple of 8 in [64 KiB, 4 GiB]");
  LOOM_CHECK_ARG(retries >= 1 && retries <= 1000, "LOOM_RUDP_RETRIES=", retries,
                 " is out of range (1 to 1000)");
  LOOM_CHECK_ARG(rtoMax >= 10 && rtoMax <= 60000, "LOOM_RUDP_RTO_MAX_MS=", rtoMax,
                 " is out of range (10 to 60000)");
  setup.flow.windowBytes = static_cast<size_t>(window);
  setup.flow.maxRetries = static_cast<uint32_t>(retries);
  setup.flow.rtoMaxNs = static_cast<uint64_t>(rtoMax) * 1'000'000;
  setup.faults = env::rudpFaults();
  setup.gso = env::rudpGso();
  // auto: only where cores are scarce. Measured: on a 2-core host a rank's progress thread on its
  // caller's core made 1 MiB calls 1.2-2.5x faster; on 16 cores it made them up to 1.3x slower
  // (the two threads no longer ran in parallel). Scarce: the node's ranks' callers and progress
  // threads, plus a core for the kernel's network processing, outnumber the cores.
  const std::string follow = env::rudpFollowCaller();
  LOOM_CHECK_ARG(follow == "auto" || follow == "1" || follow == "0",
                 "LOOM_RUDP_FOLLOW_CALLER=", follow, " must be auto, 1 or 0");
  setup.followCaller =
      follow == "1" || (follow == "auto" && usableCores() < 2 * nodes_.localSize(rank_) + 2);
  setup.callerReceives = env::rudpCallerReceives();
  setup.lingerMs = std::min<int64_t>(config_.timeoutMs, 2000);
  setup.allGather = [this](const std::string& mine) {
    return withBootstrap([&](Bootstrap& b) { return b.allGather(mine); });
  };
  rudp_ = std::make_unique<RudpEngine>(setup);
  for (int peer = 0; peer < nranks_; ++peer) {
    if (!setup.remote[peer]) continue;
    collChannels_[peer] = checked(rudp_->channel(peer, 0));
    p2pChannels_[peer] = rudp_->channel(peer, 1);
  }
  tcpInterface_ = setup.itf.name + " " + setup.itf.address;
  LOOM_INFO(kSubsysNet, rank_, "rudp transport on ", tcpInterface_, ", ", rudp_->paths(),
            " paths, ", rudp_->mss(), " B per packet; ", nodes_.describe());
}

std::string Comm::transportCounters() const {
  return rudp_ ? rudp_->describeCounters() : std::string();
}

void Comm::setUpHierarchy() {
  int columns = nodes_.nranks();
  for (int n = 0; n < nodes_.nodeCount(); ++n) {
    hierarchy_.members.push_back(nodes_.members(n));
    columns = std::min(columns, nodes_.nodeSize(n));
  }
  for (int r = 0; r < nranks_; ++r) {
    hierarchy_.nodeOf.push_back(nodes_.nodeOf(r));
    hierarchy_.localIndex.push_back(nodes_.localIndex(r));
  }
  hierarchy_.nodeIndex = nodes_.nodeOf(rank_);
  hierarchy_.columns = columns;
  ctx_.hierarchy = &hierarchy_;
  hostCtx_.hierarchy = &hierarchy_;
}

void Comm::setUpNative() {
  NativeSetup setup;
  setup.rank = rank_;
  setup.nranks = nranks_;
  setup.timeoutMs = config_.timeoutMs;
  setup.process = processNumbers(ranks_);
  setup.allGather = [this](const std::string& mine) {
    return withBootstrap([&](Bootstrap& b) { return b.allGather(mine); });
  };
  setup.peerFailure = [this] { return peerFailure(); };
  setup.fail = [this](const Error& e) { fail(e); };
  setup.aborted = aborted_;
  native_ = device_->createCollectives(setup);
}

std::optional<Error> Comm::peerFailure() {
  try {
    if (arena_.aborted()) throwArenaAbort();
    for (int peer = 0; peer < nranks_; ++peer) checkPeer(peer);
  } catch (const Error& e) {
    return e;
  }
  return std::nullopt;
}

void Comm::beginOperation() {
  checkUsable();
  startClock();
}

void Comm::checkUsable() {
  if (aborted_->load()) {
    loomResult_t code = asyncError_.load();
    LOOM_THROW(code == loomSuccess ? loomInvalidUsage : code,
               "communicator is aborted: ", asyncMessage());
  }
  // A peer may have failed while this rank was between calls; a call that would not need to
  // wait must not report success on a communicator the others consider aborted.
  if (arena_.aborted()) {
    try {
      throwArenaAbort();
    } catch (const Error& e) {
      fail(e);
      throw;
    }
  }
}

void Comm::startClock() {
  Clock::time_point now = Clock::now();
  deadline_ = now + std::chrono::milliseconds(config_.timeoutMs);
  std::fill(nextPeerCheck_.begin(), nextPeerCheck_.end(), now + kPeerCheckInterval);
}

void Comm::check(int peer) {
  if (aborted_->load(std::memory_order_relaxed))
    LOOM_THROW(loomRemoteError, "communicator aborted: ", asyncMessage());
  if (arena_.aborted()) throwArenaAbort();
  Clock::time_point now = Clock::now();
  // One timer per peer: a wait that alternates between peers (the ring's two neighbours, a
  // group's sends and receives) still checks each of them.
  Clock::time_point& next = nextPeerCheck_[peer >= 0 && peer < nranks_ ? peer + 1 : 0];
  if (now >= next) {
    next = now + kPeerCheckInterval;
    checkPeer(peer);
  }
  flight_->waitingFor(peer);
  // The peer the wait was for: a rank that never called this collective, or is stuck.
  if (now >= deadline_) LOOM_THROW(loomTimeout, describeWait(peer));
}

void Comm::checkAlive(int peer) {
  if (aborted_->load(std::memory_order_relaxed))
    LOOM_THROW(loomRemoteError, "communicator aborted: ", asyncMessage());
  if (arena_.aborted()) throwArenaAbort();
  checkPeer(peer);
}

void Comm::throwArenaAbort() const {
  ArenaAbort info = arena_.abortInfo();
  // The arena holds one node's ranks: its slots are local indices.
  const std::vector<int>& members = nodes_.members(nodes_.nodeOf(rank_));
  int who =
      info.rank >= 0 && info.rank < static_cast<int>(members.size()) ? members[info.rank] : -1;
  // A mismatch is every rank's misuse, and its message already names the ranks.
  if (info.code == loomInvalidUsage && info.reason.rfind(kMismatchMessage, 0) == 0)
    LOOM_THROW(loomInvalidUsage, info.reason, " (found by rank ", who, ")");
  LOOM_THROW(loomRemoteError, "rank ", who, " failed (", loomGetErrorString(info.code),
             "): ", info.reason);
}

void Comm::checkPeer(int peer) {
  // A peer on another node: its death or failure shows on the TCP connections the wait uses
  // (EOF, reset: a failing rank shuts its connections down). Not the control plane: a peer that
  // got all it needed and destroyed its communicator closes that too, and is no failure.
  if (peer < 0 || peer >= nranks_ || !nodes_.sameNode(peer, rank_)) return;
  if (peer == rank_) return;
  // A peer in another PID namespace (containers sharing only network and IPC) has a pid that
  // means nothing here: its death shows as the abort word or the deadline instead.
  if (ranks_[peer].pidNamespace != ranks_[rank_].pidNamespace) return;
  int fd = peerPidfds_[peer];
  bool gone = false;
  if (fd >= 0) {
    pollfd p{fd, POLLIN, 0};
    gone = poll(&p, 1, 0) > 0;
  } else {
    gone = kill(ranks_[peer].pid, 0) != 0 && errno == ESRCH;
  }
  if (gone)
    LOOM_THROW(loomRemoteError, "rank ", peer, " (pid ", ranks_[peer].pid, " on ",
               ranks_[peer].hostname, ") exited while this rank waited for it");
}

void Comm::fail(const Error& error) {
  bool first = false;
  std::string reason;
  {
    std::lock_guard<std::mutex> lock(errorMutex_);
    if (asyncError_.load() == loomSuccess) {
      asyncMessage_ = error.what();
      asyncError_.store(error.code());
      first = true;
    }
    // Peers are told the first failure, the cause. A later one may be its echo: a wait that
    // loomCommAbort on another thread ended says only "aborted", and may get here first.
    reason = asyncMessage_;
  }
  aborted_->store(true);
  if (first) recordFailure(error);
  if (native_) native_->stop();
  // Streams waiting at this communicator's gates run on (the calls' outputs are undefined).
  if (jobs_) jobs_->openGate();
  // A heterogeneous communicator's peers may be waiting inside its sub-communicators (set up by
  // the caller's thread while a progress thread may fail: read under the lock).
  Comm *cluster = nullptr, *leaders = nullptr;
  {
    std::lock_guard<std::mutex> lock(errorMutex_);
    cluster = clusterComm_.get();
    leaders = leaderComm_.get();
  }
  if (cluster) cluster->abort(reason);
  if (leaders) leaders->abort(reason);
  // Once: this rank's reason slot in the arena has one writer (two threads failing together, a
  // collective and loomCommAbort, would race on it while peers read it).
  if (first) arena_.raiseAbort(error.code(), nodes_.localIndex(rank_), reason);
  for (TcpChannel* channel : tcpChannels_) channel->shutdown();
  if (rudp_) rudp_->reset(reason);
  withBootstrap([&](Bootstrap& b) { b.broadcastAbort(reason); });
  LOOM_WARN(kSubsysColl, rank_, "communicator aborted: ", error.what());
  if (first && config_.onFail) config_.onFail(error);
}

void Comm::abort(const std::string& reason) { fail(Error(loomRemoteError, reason)); }

std::string Comm::asyncMessage() const {
  std::lock_guard<std::mutex> lock(errorMutex_);
  return asyncMessage_;
}

void Comm::verifyFingerprint(const CollArgs& a) {
  std::ostringstream fp;
  fp << funcName(a.func) << "(count=" << a.count << ", " << dtypeName(a.dtype);
  if (a.func == loomFuncAllReduce || a.func == loomFuncReduce || a.func == loomFuncReduceScatter)
    fp << ", " << opName(a.op);
  if (a.func == loomFuncBroadcast || a.func == loomFuncReduce || a.func == loomFuncGather ||
      a.func == loomFuncScatter)
    fp << ", root=" << a.root;
  // The algorithm too: ranks with different LOOM_ALGO settings would otherwise hang; for a
  // native one, what it runs on these buffers (one rank's registered and another's not).
  const Algorithm& algo = selector_->select(a.func, a.count * dtypeSize(a.dtype));
  fp << ") via " << (algo.native >= 0 ? native_->describeCall(algo.native, a) : algo.name);
  std::vector<std::string> all = withBootstrap([&](Bootstrap& b) { return b.allGather(fp.str()); });
  if (std::all_of(all.begin(), all.end(), [&](const std::string& s) { return s == all[0]; }))
    return;
  std::ostringstream msg;
  msg << "LOOM_CHECK: collective #" << collectiveCount_ << " differs across ranks:";
  std::vector<bool> listed(all.size(), false);
  for (size_t i = 0; i < all.size(); ++i) {
    if (listed[i]) continue;
    msg << " ranks";
    for (size_t j = i; j < all.size(); ++j)
      if (all[j] == all[i]) listed[j] = true, msg << (j == i ? " " : ",") << j;
    msg << " called " << all[i] << ";";
  }
  LOOM_THROW(loomInvalidUsage, msg.str());
}

namespace {

bool hasOp(loomFunc_t f) {
  return f == loomFuncAllReduce || f == loomFuncReduce || f == loomFuncReduceScatter;
}
bool hasRoot(loomFunc_t f) {
  return f == loomFuncBroadcast || f == loomFuncReduce || f == loomFuncGather ||
         f == loomFuncScatter;
}

struct Shape {
  loomFunc_t func;
  loomDataType_t dtype;
  loomRedOp_t op;
  int accum;
  int root;
};
Shape unpack(uint64_t shape) {
  return {static_cast<loomFunc_t>(shape & 0xff), static_cast<loomDataType_t>((shape >> 8) & 0xff),
          static_cast<loomRedOp_t>((shape >> 16) & 0xff),
          static_cast<int>((shape >> 24) & 0xff) - 1,
          static_cast<int>(static_cast<uint32_t>(shape >> 32))};
}

std::string describe(const CallSignature& s) {
  Shape p = unpack(s.shape);
  std::ostringstream out;
  out << funcName(p.func) << "(count=" << s.count << ", " << dtypeName(p.dtype);
  if (hasOp(p.func)) out << ", " << opName(p.op);
  if (hasRoot(p.func)) out << ", root=" << p.root;
  if (p.accum >= 0) out << ", accum=" << dtypeName(static_cast<loomDataType_t>(p.accum));
  out << ")";
  return out.str();
}

// What differs between two signatures, in the user's words.
std::string differences(const CallSignature& a, const CallSignature& b) {
  Shape x = unpack(a.shape), y = unpack(b.shape);
  std::vector<const char*> what;
  if (a.seq != b.seq) what.push_back("call number (a rank skipped or added a collective)");
  if (x.func != y.func) what.push_back("collective");
  if (a.count != b.count) what.push_back("count");
  if (x.dtype != y.dtype) what.push_back("dtype");
  if (x.op != y.op) what.push_back("op");
  if (x.root != y.root) what.push_back("root");
  if (x.accum != y.accum) what.push_back("accumulation type");
  std::string out;
  for (const char* w : what) out += (out.empty() ? "" : ", ") + std::string(w);
  return out;
}

}  // namespace

void Comm::beginCall(const CollArgs& a) {
  ++collectiveCount_;
  callCheck_.previous = callCheck_.mine;
  CallSignature& s = callCheck_.mine;
  s.seq = collectiveCount_;
  s.count = a.count;
  int accum = a.accum >= 0 ? a.accum : config_.accum;
  s.shape = static_cast<uint64_t>(a.func) | static_cast<uint64_t>(a.dtype) << 8 |
            static_cast<uint64_t>(hasOp(a.func) ? a.op : 0) << 16 |
            static_cast<uint64_t>(accum + 1) << 24 |
            static_cast<uint64_t>(static_cast<uint32_t>(hasRoot(a.func) ? a.root : 0)) << 32;
  callCheck_.minePacked = pack(s);
  callCheck_.mineHash = callCheck_.enabled ? hash24(callCheck_.minePacked) : 0;
}

void Comm::throwMismatch(const std::vector<std::optional<CallSignature>>& seen,
                         const CallSignature& mine, const char* note) const {
  // Ranks grouped by what they called, in rank order: the same text on every rank that saw the
  // same signatures.
  std::ostringstream msg;
  msg << kMismatchMessage << " in collective #" << mine.seq << note << ":";
  std::vector<bool> listed(seen.size(), false);
  const CallSignature* other = nullptr;
  for (size_t i = 0; i < seen.size(); ++i) {
    if (listed[i] || !seen[i]) continue;
    msg << " ranks";
    for (size_t j = i; j < seen.size(); ++j)
      if (seen[j] && *seen[j] == *seen[i]) listed[j] = true, msg << (j == i ? " " : ",") << j;
    msg << " called " << describe(*seen[i]) << ";";
    if (!(*seen[i] == mine) && other == nullptr) other = &*seen[i];
  }
  std::string unseen;
  for (size_t r = 0; r < seen.size(); ++r)
    if (!seen[r]) unseen += (unseen.empty() ? "" : ",") + std::to_string(r);
  if (!unseen.empty()) msg << " (ranks " << unseen << " not seen by rank " << rank_ << ")";
  if (other != nullptr) msg << " they differ in " << differences(mine, *other);
  LOOM_THROW(loomInvalidUsage, msg.str());
}

void Comm::throwArenaMismatch(const std::vector<std::optional<CallSignature>>& seen) const {
  // The step may be one of an earlier call, where this rank did not wait for everyone.
  const CallSignature& mine = seen[rank_] ? *seen[rank_] : callCheck_.mine;
  throwMismatch(seen, mine,
                mine.seq == callCheck_.mine.seq ? "" : " (found at a later collective)");
}

std::unique_ptr<Channel> Comm::checked(std::unique_ptr<Channel> channel) {
  return std::make_unique<CheckedChannel>(
      std::move(channel), callCheck_, [this](int peer, const CallSignature& theirs) {
        // What the peer sent in the previous call, untaken: that call is the one that differed
        // (this rank returned from it: it only sent).
        bool late = theirs.seq + 1 == callCheck_.mine.seq;
        const CallSignature& mine = late ? callCheck_.previous : callCheck_.mine;
        std::vector<std::optional<CallSignature>> seen(nranks_);
        seen[rank_] = mine;
        seen[peer] = theirs;
        throwMismatch(seen, mine, late ? " (found at the next collective)" : "");
      });
}

Error Comm::withRemoteCause(const Error& error) {
  // A peer on another node that found a mismatch shuts its connections (this rank sees EOF)
  // and reports the cause on the control plane a moment later: wait for it briefly.
  if (!callCheck_.enabled || sharedMemory_) return error;
  Clock::time_point until = Clock::now() + std::chrono::milliseconds(300);
  while (Clock::now() < until) {
    try {
      withBootstrap([](Bootstrap& b) { b.checkHealth(); });
    } catch (const Error& cause) {
      std::string text = cause.what();
      size_t at = text.find(kMismatchMessage);
      if (at == std::string::npos) return error;
      return Error(loomInvalidUsage, text.substr(at), cause.file(), cause.line());
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  return error;
}

void Comm::checkBuffers(const CollArgs& args) const {
  if (!onDevice()) return;
  CallExtents extents = callExtents(args, rank_, nranks_);
  device_->checkBuffer(args.send, extents.sendBytes, "sendbuff");
  device_->checkBuffer(args.recv, extents.recvBytes, "recvbuff");
}

void Comm::execute(const Algorithm& algo, const CollArgs& args) {
  if (hetero_ && composes(args)) return executeComposed(args);
  if (hetero_ && elementwise(args.func)) return executeChunked(args);
  if (algo.native >= 0 || !onDevice()) return runAlgorithm(algo, ctx_, args);
  const bool mapped = sharedMemory_ && runsMapped(algo, device_->caps());
  runDeviceCall(mapped ? DeviceShape::kMapped : DeviceShape::kStaged, args, &algo, 0, *device_,
                *staging_);
}

void Comm::collective(const CollArgs& args) {
  if (passesHostBuffers(args)) return collectiveThroughDevice(args);
  // Before anything that could abort the communicator: a bad pointer is the caller's mistake.
  checkBuffers(args);
  if (jobs_) {
    // The progress thread owns the deadline and the peer timers: only check the state here.
    checkUsable();
    size_t bytes = args.count * dtypeSize(args.dtype);
    return failOnError([&] { enqueueCollective(selector_->select(args.func, bytes), args); });
  }
  beginOperation();
  FlightScope record(*flight_, asyncError_);
  failOnError([&] {
    // A composed call's phases are calls of the sub-communicators, which count and check
    // themselves; this communicator does not count it (nor do its stream-ordered ranks).
    if (hetero_ && composes(args)) {
      CollArgs a = args;
      if (a.accum < 0) a.accum = config_.accum;
      return executeComposed(a);
    }
    beginCall(args);
    size_t bytes = args.count * dtypeSize(args.dtype);
    const Algorithm& algo = selector_->select(args.func, bytes);
    recordStart(record, args, algo);
    if (checkMode_ >= 2) verifyFingerprint(args);
    LOOM_INFO(kSubsysColl, rank_, funcName(args.func), " #", collectiveCount_, " count ",
              args.count, " ", dtypeName(args.dtype), " -> ", algo.name,
              hetero_ && elementwise(args.func) ? " (heterogeneous: in chunks)" : "");
    CollArgs a = args;
    if (a.accum < 0) a.accum = config_.accum;
    execute(algo, a);
  });
  record.done();
}

P2POp Comm::pointToPoint(bool isSend, int peer, void* buffer, size_t bytes, int64_t tag) {
  P2POp op;
  op.isSend = isSend;
  op.peer = peer;
  op.buffer = static_cast<char*>(buffer);
  op.bytes = bytes;
  op.tag = tag;
  if (peer != kAnySource) {
    op.channel = p2pChannels_[peer].get();
    op.inbox = &inboxes_[peer];
  }
  op.peers = &p2pPeers_;
  op.ctx = &ctx_;
  return op;
}

void Comm::devicePointToPoint(const std::vector<DeviceP2POp>& ops, loomStream_t stream) {
  if (stagesPointToPoint()) {
    beginStagedPointToPoint(ops, stream);
    endStagedPointToPoint();
    return;
  }
  for (const DeviceP2POp& op : ops)
    device_->checkBuffer(op.buffer, op.bytes, op.isSend ? "sendbuff" : "recvbuff");
  beginOperation();
  failOnErrorExceptArguments([&] { native_->pointToPoint(ops, stream); });
}

void Comm::beginStagedPointToPoint(const std::vector<DeviceP2POp>& ops, loomStream_t stream) {
  for (const DeviceP2POp& op : ops)
    if (!hostBufferOfHetero(op))
      device_->checkBuffer(op.buffer, op.bytes, op.isSend ? "sendbuff" : "recvbuff");
  // Blocking, after the queued calls: their host parts are done and their copies have left the
  // staging memory that the transfers below use.
  if (jobs_) failOnError([&] { jobs_->quiesce(); });
  beginOperation();
  failOnErrorExceptArguments([&] {
    // Every op gets its own stretch of one host buffer: sends staged after the caller's stream,
    // the host transfers posted to the P2PEngine together (any order of sends and receives
    // completes). Host buffers of a heterogeneous communicator's device rank need no stretch: the
    // engine uses them as they are.
    stagedOps_ = ops;
    stagedStream_ = stream;
    size_t total = 0;
    for (const DeviceP2POp& op : ops)
      if (!hostBufferOfHetero(op)) total += op.bytes;
    stagedHost_ = staging_->send(total);
    staging_->releaseRetired();  // blocking, after the queued calls: none uses old staging memory
    size_t offset = 0;
    for (const DeviceP2POp& op : ops) {
      if (hostBufferOfHetero(op)) continue;
      if (op.isSend)
        device_->copyAsync(stagedHost_ + offset, op.buffer, op.bytes, CopyKind::kDeviceToHost,
                           stream);
      offset += op.bytes;
    }
    device_->synchronize(stream);
    while (stagedTickets_.size() < ops.size())
      stagedTickets_.push_back(std::make_unique<P2PTicket>());
    stagedPosted_.clear();
    offset = 0;
    try {
      for (size_t i = 0; i < ops.size(); ++i) {
        const DeviceP2POp& op = ops[i];
        P2PTicket& ticket = *stagedTickets_[i];
        ticket.reset();
        const bool direct = hostBufferOfHetero(op);
        ticket.op = pointToPoint(op.isSend, op.peer, direct ? op.buffer : stagedHost_ + offset,
                                 op.bytes, op.tag);
        p2pEngine_->postOwned(ticket);
        stagedPosted_.push_back(&ticket);
        if (!direct) offset += op.bytes;
      }
    } catch (...) {
      // A post fails only on an aborted communicator; tickets posted before it point into the
      // pool and the staging buffer, and end (at once, with the abort) before either is reused.
      try {
        p2pEngine_->finish(stagedPosted_);
      } catch (...) {  // the first error is the one to report
      }
      stagedPosted_.clear();
      throw;
    }
  });
}

void Comm::endStagedPointToPoint() {
  failOnErrorExceptArguments([&] {
    // The tickets point into the pool and the staging: they end before anything else happens.
    try {
      p2pEngine_->finish(stagedPosted_);
    } catch (...) {
      stagedPosted_.clear();
      throw;
    }
    stagedPosted_.clear();
    size_t offset = 0;
    for (const DeviceP2POp& op : stagedOps_) {
      if (hostBufferOfHetero(op)) continue;
      if (!op.isSend)
        device_->copyAsync(op.buffer, stagedHost_ + offset, op.bytes, CopyKind::kHostToDevice,
                           stagedStream_);
      offset += op.bytes;
    }
    device_->synchronize(stagedStream_);
  });
}

void Comm::setUpP2PEngine() {
  for (auto& channel : p2pChannels_) p2pPeers_.channels.push_back(channel.get());
  p2pPeers_.inboxes = &inboxes_;
  P2PEngineHooks hooks;
  hooks.timeoutMs = config_.timeoutMs;
  hooks.checkPeer = [this](int peer) { checkAlive(peer); };
  hooks.fail = [this](const Error& e) { fail(e); };
  hooks.flight = flight_.get();
  p2pEngine_ = std::make_unique<P2PEngine>(std::move(hooks), *progress_);
}

std::unique_ptr<Comm> Comm::split(int color, int key, const CommConfig& config) {
  // Only the bootstrap (its own deadline) runs here: the clock of the calls stays with the
  // progress thread while calls are queued, which may wait for a stream the caller still holds.
  if (jobs_)
    checkUsable();
  else
    beginOperation();
  try {
    ++splitCount_;
    std::ostringstream mine;
    mine << color << ' ' << key;
    std::vector<std::string> all =
        withBootstrap([&](Bootstrap& b) { return b.allGather(mine.str()); });
    struct Member {
      int key, parentRank;
    };
    std::vector<Member> members;
    for (int r = 0; r < nranks_; ++r) {
      std::istringstream in(all[r]);
      int c = 0, k = 0;
      in >> c >> k;
      if (c == color && color >= 0) members.push_back({k, r});
    }
    std::stable_sort(members.begin(), members.end(),
                     [](const Member& a, const Member& b) { return a.key < b.key; });
    int newRank = -1;
    for (size_t i = 0; i < members.size(); ++i)
      if (members[i].parentRank == rank_) newRank = static_cast<int>(i);

    // The first member of each color hosts the new rendezvous; its address travels on the
    // (authenticated) parent bootstrap, and the new secret is derived, so it never travels at all.
    std::string label = "split/" + std::to_string(splitCount_) + "/" + std::to_string(color);
    JobSecret childSecret = deriveSecret(id_.secret, id_.jobNonce, label);
    std::string address;
    if (newRank == 0) {
      UniqueId root = startRendezvousRoot("", 0, childSecret, config.timeoutMs);
      address = root.host + " " + std::to_string(root.port);
    }
    std::vector<std::string> addresses =
        withBootstrap([&](Bootstrap& b) { return b.allGather(address); });
    if (newRank < 0) return nullptr;
    UniqueId child;
    std::istringstream in(addresses[members[0].parentRank]);
    in >> child.host >> child.port;
    child.secret = childSecret;
    CommConfig childConfig = config;
    childConfig.splitChild = true;
    child.jobNonce =
        id_.jobNonce ^ (splitCount_ * 0x9e3779b97f4a7c15ull) ^ static_cast<uint64_t>(color);
    return std::make_unique<Comm>(child, static_cast<int>(members.size()), newRank, childConfig);
  } catch (const Error& e) {
    if (e.code() != loomInvalidArgument) fail(e);
    throw;
  }
}

}  // namespace loom
