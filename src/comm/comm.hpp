// The communicator: init, split and the dispatch of a call; the rest is in parts with one job
// each: Transports (arena, channels), Health (failure state, the one deadline, peer liveness),
// Group (a set of its ranks that runs collectives: `main_` is the whole communicator, a
// heterogeneous one adds its cluster and exchange groups; each holds its CallChecker, selector,
// algorithm workspaces and native collectives), DeviceCallState (device_calls.cpp: staging, the
// stream jobs), Composition (hetero*.cpp), WindowTable (windows.cpp), the P2PEngine, and the
// ProgressQueue its non-blocking calls, stream jobs and open point-to-point run on. One Comm
// serves one C handle; nothing is shared between communicators.
//
// A collective (collective(), then execute()) takes the first of these ways:
//   a device rank's host buffers (heterogeneous) -> collectiveThroughDevice, on device scratch
//   stream-ordered device rank                   -> enqueueCollective (device_calls.cpp)
//   heterogeneous, composed                      -> executeComposed: phases on the groups
//   heterogeneous, elementwise                   -> executeChunked: chunks (device: pipelined)
//   the selector's algorithm is native           -> NativeCollectives::run (CUDA kernels)
//   host-addressable device (CPU)                -> runAlgorithm: arena algorithm or schedule
//   other devices                                -> runDeviceCall: mapped (one node, the device
//                                                   maps host memory and reduces) or staged
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "algorithms/chunked.hpp"
#include "algorithms/context.hpp"
#include "algorithms/p2p.hpp"
#include "algorithms/ring_steps.hpp"
#include "algorithms/staged.hpp"
#include "base/error.hpp"
#include "bootstrap/bootstrap.hpp"
#include "comm/call_checker.hpp"
#include "comm/flight_recorder.hpp"
#include "comm/group.hpp"
#include "comm/group_run.hpp"
#include "comm/health.hpp"
#include "comm/p2p_engine.hpp"
#include "comm/stream_jobs.hpp"
#include "comm/trace.hpp"
#include "comm/transports.hpp"
#include "exec/progress_queue.hpp"
#include "plan/plan_registry.hpp"
#include "plan/selector.hpp"
#include "topology/cluster_map.hpp"
#include "topology/node_map.hpp"
#include "topology/rank_info.hpp"

namespace loom {

struct CommConfig {
  std::string device = "cpu";  // a device spec: "cpu", "cuda:1", "loom-emu:0" (device/registry)
  int64_t timeoutMs = 600000;
  bool blocking = true;
  std::string name;
  int accum = -1;
  std::string transport = "tcp";  // between nodes: "tcp" or "rudp" (LOOM_TRANSPORT)
  bool splitChild = false;        // created by split: the launcher's node sizes do not describe it
  // LOOM_CLUSTER_SPLIT.
  std::string clusterSplit;
  // LOOM_ALGO: names host algorithms (and a backend's native ones where it has them); a
  // heterogeneous communicator's exchange group takes it, its cluster groups do not.
  std::string algo;
  // Where the communicator keeps its abort flag, if not in itself: the C handle's, so that a
  // destroy can stop a non-blocking initialization that is still inside the constructor.
  std::atomic<bool>* abortFlag = nullptr;
  // The progress queue of the communicator's tree (exec/progress_queue.hpp): null, its own, or a
  // non-blocking handle's (progressRoot: this communicator reports the queue's failures).
  ProgressQueue* progress = nullptr;
  bool progressRoot = false;
};

// Reads a C config (may be null) plus the environment into a CommConfig; validates it.
CommConfig resolveConfig(const loomConfig_t* config);

class Comm;
class FlightRegistration;

// Device calls (comm/device_calls.cpp): devices the host cannot address, without native
// collectives. Host staging of their data, the stream jobs of stream-ordered ranks, the blocking
// calls' schedule and executor, device scratch for host buffers of a heterogeneous device rank,
// and the staged point-to-point batch between its begin and its end.
struct DeviceCallState {
  std::unique_ptr<HostStaging> staging;
  // The staged point-to-point batch's own: a group's collectives between its begin and its end
  // use `staging` while the batch's sends wait in this.
  std::unique_ptr<HostStaging> p2pStaging;
  std::unique_ptr<StreamJobs> jobs;
  Schedule schedule;
  std::vector<char*> bound;
  AlgorithmCalls calls;
  Executor executor;
  std::unique_ptr<DeviceScratch> hostCallScratch;
  std::vector<std::unique_ptr<P2PTicket>> tickets;  // a pool: tickets hold a mutex
  std::vector<P2PTicket*> posted;
  std::vector<DeviceP2POp> ops;  // the staged batch between begin and end
  loomStream_t stream = nullptr;
  char* host = nullptr;
};

// A heterogeneous communicator's composition (comm/hetero.cpp, hetero_composed.cpp).
struct Composition {
  // Several clusters: no backend's native collectives (they serve one kind); every rank runs the
  // host algorithms, device ranks through host memory, elementwise calls in chunks of
  // chunkBytes (algorithms/chunked.hpp).
  bool hetero = false;
  size_t chunkBytes = 0;      // LOOM_HETERO_CHUNK_BYTES, the same on every rank (0: by size)
  std::string algo = "auto";  // LOOM_HETERO_ALGO: auto, flat, composed (agreed at init)
  bool ready = false;         // set up (at init where some rank is on a device, else lazily)
  bool composed = false;
  // Groups of this communicator's ranks (comm/group.hpp): this rank's cluster, where it
  // collapses to its leader, and the exchange, on the host CPU (its members only).
  std::unique_ptr<Group> cluster;
  std::unique_ptr<Group> exchange;
  // Known on every rank (setUpComposition): which clusters collapse; each rank's rank in the
  // exchange (-1: not a member, its leader stands for it; members are numbered in global rank
  // order); the exchange's blocks (allgather, reduce-scatter): the global
  // ranks each member stands for, member after member (first: where each starts, and the end),
  // and runs of consecutive global ranks with one member (reduce-scatter).
  std::vector<char> collapses;
  std::vector<int> exchangeRank;
  std::vector<int> order, first;
  bool inOrder = false;  // order is 0..nranks-1: no reorder
  struct Run {
    int first, length, member;
  };
  std::vector<Run> runs;
  std::vector<size_t> counts;  // the allgather's alltoallv arrays, 4 x members
  // The leaders' partial results and the exchange's blocks: device memory on device ranks
  // (retired on growth while calls in flight may use it), host memory on the others.
  std::unique_ptr<DeviceScratch> deviceScratch;
  std::vector<char> hostScratch;
  // Guards cluster: set up by the caller's thread while a progress thread may fail.
  std::mutex publish;
};

// Windows (loomCommWindowRegister) and buffers registered alone (loomCommRegister).
struct WindowTable {
  struct Entry {
    uint64_t id;
    void* base;
    size_t bytes;
    bool used;        // the native collectives read and write it directly
    std::string why;  // when not
  };
  std::vector<Entry> windows;
  uint64_t nextWindow = 1;
  std::vector<Entry> registrations;  // ids of their own
  uint64_t nextRegistration = 1;
};

// Point-to-point of communicators without native collectives: every send and receive, host
// buffers or device buffers staged through host memory, progresses on the engine.
struct PointToPointState {
  std::vector<P2PInbox> inboxes;  // per peer: messages that came before their receive
  P2PPeers peers;
  std::unique_ptr<P2PEngine> engine;
};

class Comm {
 public:
  // Collective over the nranks ranks that share `id`.
  Comm(const UniqueId& id, int nranks, int rank, const CommConfig& config);
  ~Comm();
  Comm(const Comm&) = delete;
  Comm& operator=(const Comm&) = delete;

  int rank() const { return rank_; }
  int nranks() const { return nranks_; }
  const CommConfig& config() const { return config_; }
  const Selector& selector() const { return main_->selector(); }
  const std::vector<RankInfo>& ranks() const { return ranks_; }
  const NodeMap& nodes() const { return nodes_; }
  // Ranks grouped by device kind (and LOOM_CLUSTER_SPLIT); more than one cluster: heterogeneous.
  const ClusterMap& clusters() const { return clusters_; }
  // How a heterogeneous communicator runs each collective; empty for one cluster.
  std::string describeHeterogeneous() const;
  // How this rank reaches its peers: transport per peer, counters, network interface.
  const Transports& transports() const { return *transports_; }

  // Runs one collective (arguments already validated). Failures other than bad arguments abort the
  // communicator and are reported to the peers.
  void collective(const CollArgs& args);
  // Builds the point-to-point operation for a send or receive (peer kAnySource: a receive from
  // any rank), to be run by p2pEngine().
  P2POp pointToPoint(bool isSend, int peer, void* buffer, size_t bytes, int64_t tag);
  // Host communicators: progresses every send and receive, blocking or not (p2p_engine.hpp).
  P2PEngine& p2pEngine() { return *p2p_.engine; }
  // Runs the groups queued on this communicator's progress thread (non-blocking communicators).
  GroupRunner& groupRunner() { return groupRunner_; }
  // Communicators on a device: a group's sends and receives, ordered on `stream` (native
  // collectives, or staged through host memory and the P2PEngine).
  void devicePointToPoint(const std::vector<DeviceP2POp>& ops, loomStream_t stream);
  // Devices without native collectives stage point-to-point through the P2PEngine, in two halves
  // so that a group's collectives can run between them (api/group.cpp): begin stages the sends
  // and posts every op, end waits for them and copies the receives back (devicePointToPoint runs
  // both). One staged batch at a time per communicator.
  bool stagesPointToPoint() const { return onDevice() && native() == nullptr; }
  void beginStagedPointToPoint(const std::vector<DeviceP2POp>& ops, loomStream_t stream);
  void endStagedPointToPoint();
  // True when this communicator's buffers live on a device the host cannot address (calls take
  // a stream).
  bool onDevice() const { return !device_->caps().hostAddressable; }
  // A device rank of a heterogeneous communicator given host memory: it runs as a host rank for
  // that buffer (collectives on device scratch, sends and receives as they are).
  bool heteroHostBuffer(const void* buffer) const;
  // True when its calls return once enqueued and complete in stream order (comm/stream_jobs.hpp).
  bool streamOrdered() const { return deviceCalls_.jobs != nullptr; }
  // "loom-emu:0 (loom Loom emulated accelerator; host algorithms staged through host memory)"
  const std::string& deviceDescription() const { return deviceDescription_; }

  // Windows (loomCommWindowRegister): collective, in the same order on every rank, which all pass
  // `bytes`. `symmetric`: the caller promises that collectives on the window use the same offsets
  // on every rank, so the backend's native collectives may read and write peers' parts directly.
  // Returns the window's id (the same on every rank).
  uint64_t registerWindow(void* ptr, size_t bytes, bool symmetric);
  // Collective, in the same order on every rank; waits for this rank's device work.
  void deregisterWindow(uint64_t id);
  // Whether collectives use window `id` directly, and if not, why.
  bool windowUsed(uint64_t id, std::string* why = nullptr) const;
  // Local registration (loomCommRegister): not collective. Returns the registration's id.
  uint64_t registerBuffer(void* ptr, size_t bytes);
  // Waits for this rank's device work when the registration was used.
  void deregisterBuffer(uint64_t id);
  // Whether collectives may use registration `id` directly, and if not, why.
  bool bufferRegistrationUsed(uint64_t id, std::string* why = nullptr) const;
  // Device memory of this communicator's device, for windows (loomMemAlloc).
  void* allocateMemory(size_t bytes);
  void releaseMemory(void* ptr);

  // Execution plans (comm/plans.cpp, docs/plans.md). registerPlan is collective: every rank
  // passes the same plan (JSON text or a file's path), checked on every rank and compared across
  // them; returns its algorithm name ("plan:NAME").
  const std::string& registerPlan(const std::string& jsonOrPath);
  void setPlanSelector(Selector::Callback callback);
  std::string describePlans() const;

  // Layers above the communicator (ep/) run calls of their own on its resources
  // (comm/extension_calls.cpp): this rank's device and the host CPU, the host algorithms' context
  // (host memory, the collective channels, the arena on one node, the health check, the
  // executor), an all-gather over the bootstrap for their set-up (collective), and runCall:
  // `body` as one collective call (after this rank's queued stream work, with the call's
  // deadline, counted and signed as `signature` for the mismatch check on its channels; null: a
  // local step that may wait for peers, neither counted nor signed; an error other than a bad
  // argument aborts the communicator and reaches the peers).
  Device& device() const { return *device_; }
  Device& hostDevice() const { return *hostDevice_; }
  const AlgoContext& hostContext() const { return main_->hostCtx(); }
  std::vector<std::string> allGatherForSetUp(const std::string& mine);
  void runCall(const CollArgs* signature, const std::function<void()>& body);

  std::unique_ptr<Comm> split(int color, int key, const CommConfig& config);

  // Marks the communicator aborted: waits in progress fail promptly (any thread), peers learn it.
  void abort(const std::string& reason);
  // Its flight recorder (comm/flight_recorder.hpp): loomCommDumpFlight, the status socket.
  const FlightRecorder& flight() const { return *flight_; }
  // loomSuccess, or the error that aborted the communicator.
  loomResult_t asyncError() const { return health_.error(); }
  std::string asyncMessage() const { return health_.message(); }

 private:
  void crossCheckLauncher() const;
  void setUpTransports(const std::string& planSettings);
  // What every group of this communicator's ranks shares (channels, devices, checks).
  GroupSetup groupSetup(std::vector<int> members);
  void setUpMainGroup();
  void describeDevice();
  void setUpClusters();
  void setUpNative(Group& group);
  NativeCollectives* native() const { return main_->native(); }
  void checkBuffers(const CollArgs& args) const;
  void execute(const Algorithm& algo, const CollArgs& args);
  void executeChunked(const Algorithm& algo, const CollArgs& args);
  // The algorithm every chunk of a call chosen as `algo` runs (null: each chunk's own choice).
  static const Algorithm* chunksRun(const Algorithm& algo);
  // A device rank of a heterogeneous communicator may pass host buffers (a torch rank's CPU
  // tensors beside its CUDA ones): the call runs on device scratch, so that every rank still runs
  // the same algorithm, and returns when the output is back in host memory.
  bool passesHostBuffers(const CollArgs& args) const;
  // `algo`: run that algorithm on the scratch as an internal call (a plan registration's vote:
  // the built-in one, never a plan or the user's selector); null: the call as any collective.
  void collectiveThroughDevice(const CollArgs& args, const Algorithm* algo = nullptr);
  bool hostBufferOfHetero(const DeviceP2POp& op) const;  // ... and their sends and receives
  // An elementwise call of `group` in chunks of heteroChunk's bytes (device ranks pipelined);
  // every rank cuts the same chunks (LOOM_HETERO_CHUNK_BYTES, agreed at init).
  void runInChunks(Group& group, const CollArgs& args, const Algorithm* everyChunk = nullptr);
  size_t heteroChunk(const CollArgs& args) const;
  // Runs body; an error it throws aborts the communicator (peers learn it) and is rethrown.
  template <typename Body>
  void failOnError(Body&& body) {
    try {
      body();
    } catch (const Error& e) {
      Error error = e.code() == loomRemoteError || e.code() == loomTimeout ? withRemoteCause(e) : e;
      fail(error);
      throw error;
    } catch (const std::exception& e) {
      Error wrapped(loomInternalError, e.what());
      fail(wrapped);
      throw wrapped;
    }
  }
  // Device calls (comm/device_calls.cpp): a call's shape as a schedule, run inline (blocking)
  // or enqueued in stream order (the host half runs as a job); its host calls run the host
  // algorithms of `group` (the whole communicator, or a heterogeneous one's cluster or exchange).
  enum class DeviceShape { kStaged, kMapped, kPipelined };
  struct DeviceCall {
    Schedule* schedule;
    std::vector<char*>* bound;
    AlgorithmCalls* calls;
  };
  void buildDeviceCall(Group& group, DeviceCall& call, DeviceShape shape, const CollArgs& a,
                       const Algorithm* algo, size_t chunkBytes);
  ExecEnv deviceEnv(const Group& group, loomStream_t stream, HostCalls& calls);
  void runDeviceCall(Group& group, DeviceShape shape, const CollArgs& a, const Algorithm* algo,
                     size_t chunkBytes);
  void enqueueDeviceCall(Group& group, DeviceShape shape, const CollArgs& args,
                         const Algorithm* algo, size_t chunkBytes);
  void enqueueCollective(const Algorithm& algo, const CollArgs& args);
  void runJob(StreamJob& job);
  void releaseStagingIfIdle();
  bool composes(const CollArgs& args, const Algorithm& chosen);
  void prepareComposition();
  void setUpComposition();
  // A group of this communicator's ranks: on its device (a cluster) or on the host CPU (the
  // exchange, with LOOM_ALGO's host algorithms).
  std::unique_ptr<Group> makeGroup(std::vector<int> members, bool onHost);
  // Collective over the whole communicator: gives `group` (null: none here) an arena of its own
  // where its ranks share this rank's node.
  void attachGroupArena(Group* group);
  void numberExchange();  // composition_'s exchange numbering and blocks
  // The composed collectives (comm/hetero_composed.cpp).
  void executeComposed(const CollArgs& args);
  void composedAllReduce(const CollArgs& args);
  void composedBroadcast(const CollArgs& args);
  void composedReduce(const CollArgs& args);
  void composedAllGather(const CollArgs& args);
  void composedReduceScatter(const CollArgs& args);
  // The phases of a composed allreduce, broadcast or reduce as this rank takes part in them
  // (absent where it has none): its cluster's call before the exchange, the exchange's call,
  // its cluster's call after it.
  struct ComposedPhases {
    std::optional<CollArgs> before, exchange, after;
  };
  void runComposedPhases(const ComposedPhases& phases, const CollArgs& args);
  // `chunk`: the call's exchange chunk in bytes (heteroChunk).
  bool clusterPhasesInChunks(const CollArgs& args, size_t chunk) const;
  void composedPhasesInChunks(const ComposedPhases& phases, const CollArgs& args, size_t chunk);
  // Runs the exchange's chunk now, or begins it beside the cluster's phases (true).
  bool exchangeChunkBeside(const CollArgs& args, std::optional<AlongsideRun>& beside);
  void clusterCollective(const CollArgs& args);  // a call of this rank's collapsed cluster
  void exchangeInChunks(const CollArgs& args);   // an elementwise call of the exchange
  void exchangeInOnePiece(const CollArgs& args);
  char* composedScratch(size_t bytes, loomStream_t stream);  // this rank's kind of memory
  void copyLocal(void* dst, const void* src, size_t bytes, loomStream_t stream);
  int exchangeRoot(int rank) const;  // the exchange's rank that stands for `rank`
  // failOnError, but a bad argument is the caller's mistake: reported, the communicator lives on.
  template <typename Body>
  void failOnErrorExceptArguments(Body&& body) {
    try {
      body();
    } catch (const Error& e) {
      if (e.code() != loomInvalidArgument) fail(e);
      throw;
    } catch (const std::exception& e) {
      Error wrapped(loomInternalError, e.what());
      fail(wrapped);
      throw wrapped;
    }
  }
  void setUpP2PEngine();
  const Hierarchy& setUpHierarchy();
  // LOOM_PLAN_DIR's plans: loaded before the transports (their hashes join the settings the
  // ranks compare), entered in the selector once it exists (comm/plans.cpp).
  std::string loadPlanDir();
  void selectPlans();
  bool runsPlans() const;
  std::string whyNoPlans() const;  // the refusal's message where !runsPlans()
  // Loads `program` into the native collectives where there are any (their index for it; -1
  // without); throws loomInvalidArgument with their reason where they refuse it.
  int loadNativePlan(const PlanProgram& program);
  std::string deviceKind() const;
  // The flight recorder, the trace and the hang report (comm/comm_observe.cpp).
  void setUpFlight();
  void recordStart(FlightScope& scope, const CollArgs& args, const Algorithm& algo);
  // A stream-ordered call of `group`.
  uint64_t recordQueued(const Group& group, const CollArgs& args, const Algorithm* algo);
  void recordFailure(const Error& error);
  uint64_t enteredCall(int peer) const;  // the last call a rank of this host entered
  // This host's ranks but `except` that have not entered seq, or are dead or stopped.
  std::string ranksBehind(uint64_t seq, int except = -1) const;
  // A rank of this host's process state letter (/proc: 'R', 'S', 'T', ...; 'X' when it exited),
  // or 0 where its process cannot be seen from here.
  char processLetter(int peer) const;
  std::string describeWait(int peer) const;  // a timeout's message: the call and whom it awaited
  std::string describePeer(int peer, uint64_t mySeq) const;
  // checkUsable() (throws if aborted or a peer failed) and a new deadline for this call.
  void beginOperation();
  void checkUsable();
  void startClock() { health_.startClock(); }
  // The failure relay: records the first failure (Health) and tells everyone who could be
  // waiting: the native engines, the stream's gates, the node's arena, the network channels, the
  // other nodes through the bootstrap.
  void fail(const Error& error);
  void check(int peer) {
    if (flight_) flight_->waitingFor(peer);
    health_.check(peer, main_->checker().calls());
  }
  // LOOM_CHECK=2: every rank's description of this call, compared through the bootstrap.
  void verifyFingerprint(const CollArgs& args);
  // The call's number and signature (the mismatch check).
  void beginCall(const CollArgs& args) { beginCall(*main_, args); }
  void beginCall(Group& group, const CollArgs& args) {
    const int accum = args.accum >= 0 ? args.accum : config_.accum;
    group.checker().begin(args, accum);
    if (&group == main_.get() && nodeGroup_) nodeGroup_->checker().begin(args, accum);
  }
  // A remote error or a timeout on a communicator of several hosts, with what the control plane
  // knows of its cause: a mismatch a peer found becomes this rank's own error; another cause (a
  // peer's abort, a rank that left or vanished, a hub that does not answer) is added to it.
  Error withRemoteCause(const Error& error);
  // What this rank says to the others as it destroys its communicator: after which call.
  std::string leavingNote() const;

  // First: destroyed last, after everything that queues work on it.
  std::unique_ptr<ProgressQueue> ownProgress_;
  // Early: every part below may record into them until it is destroyed.
  std::unique_ptr<Trace> trace_;                            // LOOM_TRACE (null: off)
  std::unique_ptr<FlightRecorder> flight_;                  // always, once the ranks are known
  std::unique_ptr<FlightRegistration> flightRegistration_;  // after flight_: leaves first
  CommConfig config_;
  ProgressQueue* progress_ = nullptr;  // the tree's (ownProgress_ or the config's)
  int rank_;
  int nranks_;
  UniqueId id_;
  Health health_;      // the failure state, the deadline, the peers' liveness
  int64_t checkMode_;  // LOOM_CHECK, the same on every rank (compared at init)
  std::unique_ptr<Device> device_;
  std::unique_ptr<Device> hostDevice_;  // the host CPU: host algorithms on staged device data
  std::string deviceDescription_;
  // The bootstrap is not thread-safe; loomCommAbort may report a failure from another thread.
  std::mutex bootstrapMutex_;
  std::unique_ptr<Bootstrap> bootstrap_;
  std::vector<RankInfo> ranks_;
  NodeMap nodes_;
  ClusterMap clusters_;
  std::unique_ptr<Transports> transports_;
  // Several nodes: the node and column picture of the hierarchical algorithms.
  Hierarchy hierarchy_;
  std::unique_ptr<Group> nodeGroup_;  // several nodes: this rank's node (hierarchy_.node)
  // The whole communicator as a group: its channels with the mismatch check, its algorithm
  // table, the algorithms' contexts and workspaces, its device's native collectives if any.
  std::unique_ptr<Group> main_;
  std::unique_ptr<PlanRegistry> plans_;  // execution plans (comm/plans.cpp)
  DeviceCallState deviceCalls_;          // comm/device_calls.cpp
  Composition composition_;              // heterogeneous communicators: comm/hetero*.cpp
  WindowTable windows_;                  // comm/windows.cpp
  uint64_t splitCount_ = 0;
  GroupRunner groupRunner_;
  // Last: the engine's driving stops before the channels and inboxes it drives go away.
  PointToPointState p2p_;

  template <typename Body>
  auto withBootstrap(Body&& body) {
    std::lock_guard<std::mutex> lock(bootstrapMutex_);
    return body(*bootstrap_);
  }
};

}  // namespace loom
