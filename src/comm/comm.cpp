#include "comm/comm.hpp"

#include <algorithm>
#include <cstring>
#include <sstream>
#include <thread>

#include "base/dtype.hpp"
#include "base/env.hpp"
#include "base/log.hpp"
#include "base/wait.hpp"
#include "comm/flight_registry.hpp"
#include "device/cpu/cpu_device.hpp"
#include "device/registry.hpp"

namespace loom {

namespace {

// How long a failed call may wait for the control plane's word on its cause: an abort sent a
// moment after its sender's EOF reached this rank, or rank 0's answer.
constexpr int64_t kRemoteCauseBudgetMs = 300;

size_t defaultDirectMax(int nranks) {
  // One-shot makes every rank pull every other rank's buffer across cores; pipelined pulls each
  // byte about twice whatever the rank count. Crossovers measured on a 64-core host
  // (docs/benchmarks.md): ~6 KiB at 4 ranks, under 1 KiB at 8 and 16.
  if (nranks <= 2) return 64 * 1024;
  if (nranks <= 4) return 8 * 1024;
  if (nranks <= 8) return 1024;
  return 512;
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
      health_(rank, config.timeoutMs, config.abortFlag),
      checkMode_(env::checkMode()) {
  // Its progress queue: a non-blocking handle's, or one of its own. Whoever owns the queue's
  // failures reports them (from the end of this constructor on).
  if (config_.progress == nullptr) ownProgress_ = std::make_unique<ProgressQueue>();
  progress_ = config_.progress != nullptr ? config_.progress : ownProgress_.get();
  device_ = DeviceRegistry::process().create(config_.device);
  hostDevice_ = createCpuDevice();
  // "cuda" means the current device at init: split children must use the same one.
  config_.device = device_->spec();
  Bootstrap::Options options;
  options.timeoutMs = config_.timeoutMs;
  options.abortFlag = health_.abortFlag();
  bootstrap_ = std::make_unique<Bootstrap>(
      id, rank, nranks, RankInfo::local(rank, *device_, config_.clusterSplit).serialize(), options);
  for (const std::string& bytes : bootstrap_->rankInfos())
    ranks_.push_back(RankInfo::deserialize(bytes));
  nodes_ = NodeMap::compute(ranks_);
  crossCheckLauncher();
  const std::string planSettings = loadPlanDir();
  setUpTransports(planSettings);
  setUpFlight();
  setUpClusters();
  setUpMainGroup();
  if (!composition_.hetero) setUpNative(*main_);
  selectPlans();
  if (onDevice() && !native()) {
    deviceCalls_.staging = std::make_unique<HostStaging>(*device_);
    deviceCalls_.p2pStaging = std::make_unique<HostStaging>(*device_);
  }
  if (!native()) setUpP2PEngine();
  if (trace_ && native()) native()->setTimeline(trace_.get());
  if (deviceCalls_.staging && device_->caps().hostTasks && !env::deviceBlocking()) {
    StreamJobs::Hooks hooks;
    hooks.run = [this](StreamJob& job) { runJob(job); };
    hooks.fail = [this](const Error& e) { fail(e); };
    hooks.timeoutMs = config_.timeoutMs;
    deviceCalls_.jobs = std::make_unique<StreamJobs>(*device_, std::move(hooks), *progress_);
  }
  describeDevice();
  if (rank_ == 0) LOOM_INFO(kSubsysTune, rank_, main_->selector().explain());
  if (composition_.hetero && rank_ == 0) LOOM_INFO(kSubsysInit, rank_, describeHeterogeneous());
  if (composition_.hetero) prepareComposition();
  if (config_.progressRoot || ownProgress_)
    progress_->setFailHook([this](const Error& e) { fail(e); });
}

void Comm::setUpTransports(const std::string& planSettings) {
  TransportSetup setup;
  setup.rank = rank_;
  setup.nranks = nranks_;
  setup.ranks = &ranks_;
  setup.nodes = &nodes_;
  setup.id = id_;
  setup.transport = config_.transport;
  setup.timeoutMs = config_.timeoutMs;
  setup.abortFlag = health_.abortFlag();
  setup.settings = "LOOM_CHECK=" + std::to_string(checkMode_) + " LOOM_ALGO=" + config_.algo +
                   " LOOM_DIRECT_MAX_BYTES=" + std::to_string(env::directMaxBytes()) + planSettings;
  setup.allGather = [this](const std::string& mine) {
    return withBootstrap([&](Bootstrap& b) { return b.allGather(mine); });
  };
  setup.barrier = [this] { withBootstrap([](Bootstrap& b) { b.barrier(); }); };
  transports_ = std::make_unique<Transports>(setup);
  health_.watch(ranks_, nodes_, transports_->arena());
}

GroupSetup Comm::groupSetup(std::vector<int> members) {
  GroupSetup setup;
  for (size_t i = 0; i < members.size(); ++i)
    if (members[i] == rank_) setup.rank = static_cast<int>(i);
  setup.members = std::move(members);
  for (int r = 0; r < nranks_; ++r) setup.channels.push_back(transports_->collective(r));
  setup.device = device_.get();
  setup.hostDevice = hostDevice_.get();
  setup.checkMode = checkMode_;
  const int64_t directMax = env::directMaxBytes();
  setup.directMaxBytes = directMax >= 0 ? static_cast<size_t>(directMax)
                                        : defaultDirectMax(static_cast<int>(setup.members.size()));
  setup.streamingMinBytes = static_cast<size_t>(std::max<int64_t>(env::streamingMinBytes(), 0));
  // The ranks on this host, whichever algorithm runs: whom a wait may yield its core to.
  const ShmArena& arena = transports_->arena();
  setup.corePeers =
      CoreSharing(arena.presence(), arena.nranks(), nodes_.localIndex(rank_), usableCores());
  const std::string beside = env::besideWait();
  setup.besideWait = beside == "spin"     ? BesideWait::kSpin
                     : beside == "thread" ? BesideWait::kThread
                     : beside == "auto"   ? BesideWait::kAuto
                                          : BesideWait::kBlock;
  setup.check = [this](int peer) { check(peer); };
  setup.observer = trace_.get();
  return setup;
}

void Comm::setUpMainGroup() {
  std::vector<int> everyone(nranks_);
  for (int r = 0; r < nranks_; ++r) everyone[r] = r;
  GroupSetup setup = groupSetup(std::move(everyone));
  setup.algo = config_.algo;
  setup.deviceName = composition_.hetero ? "heterogeneous" : device_->identity().kind;
  setup.nodesShared = !transports_->singleNode() && nodes_.maxNodeSize() > 1;
  setup.arena = transports_->singleNode() ? &transports_->arena() : nullptr;
  // Several nodes: the node and column groups of the hierarchical algorithms (host algorithms
  // only; a backend's native collectives serve one node).
  if (!transports_->singleNode()) setup.hierarchy = &setUpHierarchy();
  setup.awaitsNative = !composition_.hetero;  // setUpNative follows
  main_ = std::make_unique<Group>(std::move(setup));
}

void Comm::describeDevice() {
  const DeviceIdentity& identity = device_->identity();
  const DeviceCaps caps = device_->caps();
  std::string how =
      native()              ? "native collectives: " + native()->describe()
      : composition_.hetero ? std::string(onDevice() ? "heterogeneous: host algorithms, this "
                                                       "rank's data pipelined through pinned host "
                                                       "memory"
                                                     : "heterogeneous: host algorithms on its own "
                                                       "memory")
      : !onDevice()         ? std::string("host algorithms")
      : caps.mapsHostMemory && caps.reduces
          ? std::string(
                "host algorithms with the device's copies and reductions on one node, "
                "else staged through host memory")
          : std::string("host algorithms staged through host memory");
  deviceDescription_ =
      device_->spec() + " (" + identity.vendor + " " + identity.model + "; " + how +
      (deviceCalls_.jobs ? "; calls return at once and complete in stream order" : "") + ")";
  LOOM_INFO(kSubsysInit, rank_, "communicator ", config_.name.empty() ? "" : config_.name + " ",
            "ready: rank ", rank_, " of ", nranks_, ", device ", deviceDescription_, ", ",
            transports_->singleNode() ? "shared memory" : "several hosts", ", timeout ",
            config_.timeoutMs, " ms");
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
  // Said first, for the peers that may still wait for this rank in a call: those of this host
  // read it in the arena, the others may ask rank 0.
  if (transports_)
    transports_->arena()
        .progress(nodes_.localIndex(rank_))
        .destroyed.store(1, std::memory_order_release);
  if (bootstrap_ && transports_) {
    const std::string note = leavingNote();
    withBootstrap([&](Bootstrap& b) { b.leave(note); });
  }
  flightRegistration_.reset();
  // First: its jobs run host algorithms of this communicator's groups of ranks on the
  // staging memory. If the device's stream did not get past them, the memory stays allocated.
  if (deviceCalls_.jobs && !deviceCalls_.jobs->stop()) (void)deviceCalls_.staging.release();
  p2p_.engine.reset();  // its driving checks the peers' pidfds and drives the channels
  composition_.exchange.reset();
  composition_.cluster.reset();  // its native engine's watchdog, as the main group's
  main_.reset();  // its native engine's watchdog uses the peers' pidfds and the bootstrap
  deviceCalls_.staging.reset();
  deviceCalls_.p2pStaging.reset();
  if (config_.progressRoot) progress_->setFailHook(nullptr);  // the handle's queue outlives it
  // The trace's spans name algorithms by pointer, "plan:NAME" into plans_, which goes before
  // trace_: they are written while the names still exist.
  if (flight_) flight_->flushTrace();
}

const Hierarchy& Comm::setUpHierarchy() {
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
  // This rank's node as a group with an arena of its own (host memory, in local-rank order): the
  // hierarchical allreduce's node phases. Its call check follows the whole communicator's
  // (beginCall), so node mates that disagree on a call fail with the mismatch error.
  GroupSetup node = groupSetup(nodes_.members(hierarchy_.nodeIndex));
  node.device = hostDevice_.get();
  node.deviceName = "cpu";
  nodeGroup_ = std::make_unique<Group>(std::move(node));
  attachGroupArena(nodeGroup_.get());
  hierarchy_.node = &nodeGroup_->hostCtx();
  return hierarchy_;
}

void Comm::setUpNative(Group& group) {
  // The whole communicator sets up over the bootstrap; a group over its own channels (only its
  // members take part).
  const bool whole = group.size() == nranks_;
  NativeSetup setup;
  setup.rank = group.rank();
  setup.nranks = group.size();
  setup.timeoutMs = config_.timeoutMs;
  const std::vector<int> process = processNumbers(ranks_);
  for (int member : group.members()) setup.process.push_back(process[member]);
  if (whole)
    setup.allGather = [this](const std::string& mine) {
      return withBootstrap([&](Bootstrap& b) { return b.allGather(mine); });
    };
  else
    setup.allGather = [&group](const std::string& mine) { return group.allGather(mine); };
  setup.peerFailure = [this] { return health_.peerFailure(); };
  setup.fail = [this](const Error& e) { fail(e); };
  setup.aborted = health_.abortFlag();
  group.attachNative(device_->createCollectives(setup));
}

void Comm::beginOperation() {
  checkUsable();
  startClock();
}

void Comm::checkUsable() {
  health_.throwIfAborted();
  // A peer may have failed while this rank was between calls; a call that would not need to
  // wait must not report success on a communicator the others consider aborted.
  if (health_.peerAborted()) {
    try {
      health_.throwPeerAbort();
    } catch (const Error& e) {
      fail(e);
      throw;
    }
  }
}

void Comm::fail(const Error& error) {
  std::string reason;
  const bool first = health_.record(error, reason);
  if (first) recordFailure(error);
  if (native()) native()->stop();
  // Streams waiting at this communicator's gates run on (the calls' outputs are undefined).
  if (deviceCalls_.jobs) deviceCalls_.jobs->openGate();
  // A heterogeneous communicator's cluster may have native collectives of its own (set up by
  // the caller's thread while a progress thread may fail).
  {
    std::lock_guard<std::mutex> lock(composition_.publish);
    if (composition_.cluster && composition_.cluster->native())
      composition_.cluster->native()->stop();
  }
  // Once: this rank's reason slot in the arena has one writer (two threads failing together, a
  // collective and loomCommAbort, would race on it while peers read it).
  if (first) transports_->arena().raiseAbort(error.code(), nodes_.localIndex(rank_), reason);
  transports_->shutDown(reason);
  withBootstrap([&](Bootstrap& b) { b.broadcastAbort(reason); });
  // Said once: a stream job's failure reaches here from the job and again from its queue.
  if (first) LOOM_WARN(kSubsysColl, rank_, "communicator aborted: ", error.what());
}

void Comm::abort(const std::string& reason) { fail(Error(loomRemoteError, reason)); }

void Comm::verifyFingerprint(const CollArgs& a) {
  // The algorithm too: ranks with different LOOM_ALGO settings would otherwise hang; for a
  // native one, what it runs on these buffers (one rank's registered and another's not).
  const Algorithm& algo = main_->select(a.func, a.count * dtypeSize(a.dtype));
  const std::string description =
      describeCall(a) + " via " +
      (algo.native >= 0 ? native()->describeCall(algo.native, a) : std::string(algo.name));
  main_->checker().verify(description, [this](const std::string& mine) {
    return withBootstrap([&](Bootstrap& b) { return b.allGather(mine); });
  });
}

Error Comm::withRemoteCause(const Error& error) {
  // A peer on another node that failed shuts its connections (this rank sees EOF or a reset,
  // which names only that peer) and reports why on the control plane a moment later; a rank that
  // timed out waiting for a peer of another host cannot see that peer's process at all. Rank 0
  // hears every rank's abort, goodbye or death: ask it, briefly.
  if (transports_->singleNode()) return error;
  const std::string text = withBootstrap([](Bootstrap& b) { return b.news(kRemoteCauseBudgetMs); });
  if (text.empty() || text == error.what()) return error;
  const size_t at = text.find(kMismatchMessage);
  if (at != std::string::npos && main_->checker().enabled())
    return Error(loomInvalidUsage, text.substr(at), error.file(), error.line());
  return Error(error.code(), std::string(error.what()) + "; the control plane says: " + text,
               error.file(), error.line());
}

void Comm::checkBuffers(const CollArgs& args) const {
  if (!onDevice()) return;
  CallExtents extents = callExtents(args, rank_, nranks_);
  device_->checkBuffer(args.send, extents.sendBytes, "sendbuff");
  device_->checkBuffer(args.recv, extents.recvBytes, "recvbuff");
}

void Comm::execute(const Algorithm& algo, const CollArgs& args) {
  if (composition_.hetero && composes(args, algo)) return executeComposed(args);
  if (composition_.hetero && elementwise(args.func)) return executeChunked(algo, args);
  // Native collectives run every call themselves, execution plans included (loadPlan).
  if (algo.native >= 0 || !onDevice() || native() != nullptr)
    return runAlgorithm(algo, main_->ctx(), args);
  const bool mapped = transports_->singleNode() && runsMapped(algo, device_->caps());
  runDeviceCall(*main_, mapped ? DeviceShape::kMapped : DeviceShape::kStaged, args, &algo, 0);
}

void Comm::collective(const CollArgs& args) {
  if (passesHostBuffers(args)) return collectiveThroughDevice(args);
  // Before anything that could abort the communicator: a bad pointer is the caller's mistake.
  checkBuffers(args);
  if (deviceCalls_.jobs) {
    // The progress thread owns the deadline and the peer timers: only check the state here.
    checkUsable();
    size_t bytes = args.count * dtypeSize(args.dtype);
    return failOnError([&] { enqueueCollective(main_->select(args.func, bytes), args); });
  }
  beginOperation();
  FlightScope record(*flight_, health_.errorWord());
  failOnError([&] {
    const Algorithm& algo = main_->select(args.func, args.count * dtypeSize(args.dtype));
    // A composed call's phases are calls of the groups they run on, which count and check them;
    // the whole communicator does not count it (nor do its stream-ordered ranks).
    if (composition_.hetero && composes(args, algo)) {
      CollArgs a = args;
      if (a.accum < 0) a.accum = config_.accum;
      return executeComposed(a);
    }
    beginCall(args);
    recordStart(record, args, algo);
    if (main_->checker().mode() >= 2) verifyFingerprint(args);
    LOOM_INFO(kSubsysColl, rank_, funcName(args.func), " #", main_->checker().calls(), " count ",
              args.count, " ", dtypeName(args.dtype), " -> ", algo.name,
              composition_.hetero && elementwise(args.func) ? " (heterogeneous: in chunks)" : "");
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
    op.channel = transports_->pointToPoint(peer);
    op.inbox = &p2p_.inboxes[peer];
  }
  op.peers = &p2p_.peers;
  op.ctx = &main_->ctx();
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
  failOnErrorExceptArguments([&] { native()->pointToPoint(ops, stream); });
}

void Comm::beginStagedPointToPoint(const std::vector<DeviceP2POp>& ops, loomStream_t stream) {
  for (const DeviceP2POp& op : ops)
    if (!hostBufferOfHetero(op))
      device_->checkBuffer(op.buffer, op.bytes, op.isSend ? "sendbuff" : "recvbuff");
  // Blocking, after the queued calls: their host parts are done and their copies have left the
  // staging memory that the transfers below use.
  if (deviceCalls_.jobs) failOnError([&] { deviceCalls_.jobs->quiesce(); });
  beginOperation();
  failOnErrorExceptArguments([&] {
    // Every op gets its own stretch of one host buffer: sends staged after the caller's stream,
    // the host transfers posted to the P2PEngine together (any order of sends and receives
    // completes). Host buffers of a heterogeneous communicator's device rank need no stretch: the
    // engine uses them as they are.
    deviceCalls_.ops = ops;
    deviceCalls_.stream = stream;
    size_t total = 0;
    for (const DeviceP2POp& op : ops)
      if (!hostBufferOfHetero(op)) total += op.bytes;
    deviceCalls_.host = deviceCalls_.p2pStaging->send(total);
    // Blocking, after the queued calls: none uses old staging memory.
    deviceCalls_.p2pStaging->releaseRetired();
    size_t offset = 0;
    for (const DeviceP2POp& op : ops) {
      if (hostBufferOfHetero(op)) continue;
      if (op.isSend)
        device_->copyAsync(deviceCalls_.host + offset, op.buffer, op.bytes, CopyKind::kDeviceToHost,
                           stream);
      offset += op.bytes;
    }
    device_->synchronize(stream);
    while (deviceCalls_.tickets.size() < ops.size())
      deviceCalls_.tickets.push_back(std::make_unique<P2PTicket>());
    deviceCalls_.posted.clear();
    offset = 0;
    try {
      for (size_t i = 0; i < ops.size(); ++i) {
        const DeviceP2POp& op = ops[i];
        P2PTicket& ticket = *deviceCalls_.tickets[i];
        ticket.reset();
        const bool direct = hostBufferOfHetero(op);
        ticket.op = pointToPoint(op.isSend, op.peer,
                                 direct ? op.buffer : deviceCalls_.host + offset, op.bytes, op.tag);
        p2p_.engine->postOwned(ticket);
        deviceCalls_.posted.push_back(&ticket);
        if (!direct) offset += op.bytes;
      }
    } catch (...) {
      // A post fails only on an aborted communicator; tickets posted before it point into the
      // pool and the staging buffer, and end (at once, with the abort) before either is reused.
      try {
        p2p_.engine->finish(deviceCalls_.posted);
      } catch (...) {  // the first error is the one to report
      }
      deviceCalls_.posted.clear();
      throw;
    }
  });
}

void Comm::endStagedPointToPoint() {
  failOnErrorExceptArguments([&] {
    // The tickets point into the pool and the staging: they end before anything else happens.
    try {
      p2p_.engine->finish(deviceCalls_.posted);
    } catch (...) {
      deviceCalls_.posted.clear();
      throw;
    }
    deviceCalls_.posted.clear();
    size_t offset = 0;
    for (const DeviceP2POp& op : deviceCalls_.ops) {
      if (hostBufferOfHetero(op)) continue;
      if (!op.isSend)
        device_->copyAsync(op.buffer, deviceCalls_.host + offset, op.bytes, CopyKind::kHostToDevice,
                           deviceCalls_.stream);
      offset += op.bytes;
    }
    device_->synchronize(deviceCalls_.stream);
  });
}

void Comm::setUpP2PEngine() {
  p2p_.inboxes.resize(nranks_);
  for (int peer = 0; peer < nranks_; ++peer)
    p2p_.peers.channels.push_back(transports_->pointToPoint(peer));
  p2p_.peers.inboxes = &p2p_.inboxes;
  P2PEngineHooks hooks;
  hooks.timeoutMs = config_.timeoutMs;
  hooks.checkPeer = [this](int peer) { health_.checkAlive(peer); };
  hooks.fail = [this](const Error& e) { fail(e); };
  hooks.flight = flight_.get();
  p2p_.engine = std::make_unique<P2PEngine>(std::move(hooks), *progress_);
}

std::unique_ptr<Comm> Comm::split(int color, int key, const CommConfig& config) {
  // Only the bootstrap (its own deadline) runs here: the clock of the calls stays with the
  // progress thread while calls are queued, which may wait for a stream the caller still holds.
  if (deviceCalls_.jobs)
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
    // A communicator of its own: its own progress queue (a caller's config copied from this
    // communicator's must not hand it this one's).
    childConfig.progress = nullptr;
    childConfig.progressRoot = false;
    child.jobNonce =
        id_.jobNonce ^ (splitCount_ * 0x9e3779b97f4a7c15ull) ^ static_cast<uint64_t>(color);
    return std::make_unique<Comm>(child, static_cast<int>(members.size()), newRank, childConfig);
  } catch (const Error& e) {
    if (e.code() != loomInvalidArgument) fail(e);
    throw;
  }
}

}  // namespace loom
