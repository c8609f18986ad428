// What an algorithm gets: the call's arguments and the communicator's resources (device, shared
// arena, channels, step counter, health check). Algorithms never know which transport carries a
// channel nor which communicator they serve.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <vector>

#include "algorithms/ring_steps.hpp"
#include "base/call_signature.hpp"
#include "base/coll_args.hpp"
#include "base/wait.hpp"
#include "device/device.hpp"
#include "device/native.hpp"
#include "exec/executor.hpp"
#include "exec/schedule.hpp"
#include "exec/threaded_run.hpp"
#include "loom/loom.h"
#include "transport/channel.hpp"
#include "transport/shm/shm_arena.hpp"

namespace loom {

struct Hierarchy;  // below
struct BuiltCall;  // below

// Work that moves while a context's arena phases run: a schedule on the network channels run
// beside them (AlongsideRun, below), so the network carries one chunk while the arena reduces or
// shares another. Either this thread moves it, in the arena's waits and between its steps
// (`work`), or a thread of its own does (`thread`: the arena's waits only watch for its failure).
// Set for one call.
struct Alongside {
  Progress* work = nullptr;
  const ThreadedRun* thread = nullptr;
};

// How the work beside an arena moves (LOOM_BESIDE_WAIT): in this thread, whose arena waits block
// on the work's sockets too while it waits on the network (block), or spin and yield as an arena
// wait does, moving the work at every look (spin); on a thread of its own (thread: its sends,
// receives and reductions take another core than the arena's copies); or auto: thread for runs
// of kThreadBesideMinBytes and more where the host has a core for every rank and one more for its
// thread (CoreSharing::roomForThreadPerRank; never with one rank on the host), else block.
enum class BesideWait : uint8_t { kBlock, kSpin, kThread, kAuto };
// Below this a hierarchical call is one or two pipeline chunks (hierarchical_view.hpp), so there
// is little to overlap, and handing a run to its thread costs a wake-up (tens of microseconds).
inline constexpr uint64_t kThreadBesideMinBytes = uint64_t{2} << 20;

class AlgoContext {
 public:
  int rank = 0;
  int nranks = 1;
  Device* device = nullptr;
  const ShmArena* arena = nullptr;                  // null when the ranks do not share a host
  const std::vector<Channel*>* channels = nullptr;  // collective channels, by rank of this context
  uint64_t* step = nullptr;                         // shared step counter of the communicator
  CoreSharing peers;  // the ranks on this host (base/wait.hpp): whom a wait may yield to
  // Throws on timeout, abort, or when `peer` (the rank of this context being waited for; -1: none
  // in particular) is gone. Only the awaited peer matters: a rank that finished its part and exited
  // is no fault.
  std::function<void(int peer)> check;
  std::vector<char>* scratch = nullptr;  // grow-once scratch of the communicator
  size_t streamingMinBytes = 0;          // outputs at least this large bypass the cache
  // Per-communicator workspaces, sized at init or grown once, so no call allocates.
  std::vector<const void*>* sources = nullptr;  // one entry per rank, for reductions
  std::vector<RingStep>* ringSteps = nullptr;
  std::vector<uint32_t>* opList = nullptr;    // builders: operation indices to refer back to
  std::vector<BufferRef>* refList = nullptr;  // builders: a reduction's sources
  PollSet* pollSet = nullptr;  // the descriptors of a wait on network channels (base/wait.hpp)
  // Algorithms that build a schedule: the communicator's schedule and executor (exec/), and the
  // buffer addresses a run binds; reused from call to call.
  Schedule* schedule = nullptr;
  BuiltCall* builtCall = nullptr;  // what `schedule` was last built for by buildSchedule
  Executor* executor = nullptr;
  ExecObserver* observer = nullptr;  // LOOM_TRACE: the runs' operations and waits (null: none)
  std::vector<char*>* bindings = nullptr;
  // Communicators whose backend has native collectives: they run the native algorithms.
  NativeCollectives* native = nullptr;
  // Ranks on several nodes: the sub-groups the hierarchical algorithms compose (null otherwise).
  const Hierarchy* hierarchy = nullptr;
  // The current call's signature (shm_stage.hpp compares it at every arrival); null: no check.
  CallCheck* callCheck = nullptr;
  // Throws the mismatch error for the signatures seen at one step, by rank of this context
  // (empty: that rank did not arrive in time).
  std::function<void(const std::vector<std::optional<CallSignature>>&)> mismatch;

  Alongside* alongside = nullptr;  // the workspace's (null: never any)
  BesideWait besideWait = BesideWait::kBlock;
  std::unique_ptr<ThreadedRun>* threadedRun = nullptr;  // the workspace's, made at first use

  // Whether a run of `bytes` (its input or output, the larger) beside this context's arena phases
  // goes on a thread of its own now, or moves in this thread with spinning waits (BesideWait).
  bool threadsBeside(uint64_t bytes) const {
    return besideWait == BesideWait::kThread ||
           (besideWait == BesideWait::kAuto && bytes >= kThreadBesideMinBytes && peers &&
            peers.roomForThreadPerRank());
  }
  bool spinsBeside() const { return besideWait == BesideWait::kSpin; }

  template <typename Ready>
  void wait(Ready&& ready, int peer) const {
    if (alongside != nullptr && alongside->work != nullptr)
      return waitAlongside(ready, peer, *alongside->work);
    if (alongside != nullptr && alongside->thread != nullptr) {
      const ThreadedRun& beside = *alongside->thread;
      return waitUntil(
          ready,
          [&] {
            check(peer);
            beside.throwIfFailed();
          },
          peers);
    }
    waitUntil(
        ready, [&] { check(peer); }, peers);
  }
  // One pass of the work alongside, if any: an arena step's turn for it.
  void moveAlongside() const {
    if (alongside != nullptr && alongside->work != nullptr) alongside->work->pass();
  }
  // Writes part of a call's result; outputBytes is the whole result's size on this rank.
  void copyOut(void* dst, const void* src, size_t bytes, size_t outputBytes) const {
    if (outputBytes >= streamingMinBytes)
      device->copyToOutput(dst, src, bytes);
    else
      device->copy(dst, src, bytes);
  }
  Channel& channel(int peer) const { return *(*channels)[peer]; }
  // An arena wait that keeps `work` moving: it passes the work while the flag is not there and
  // gives up on either's failure. Spinning (spinsBeside), it spins and yields as an arena wait
  // does (the flag is seen at once); else it blocks on the work's sockets too, in short slices
  // (the arena's flags have no descriptor), leaving the cores to the kernel's network processing.
  // Spinning measured (2 x 4 fake nodes, tcp, 16 shared cores: hierarchical allreduce 64-256 MiB
  // 0.74-0.93x the time of blocking, two noisy runs; 2 x 2 on 2 cores: 16 MiB 1.33x). Where the
  // work gathers no descriptor, nothing of it can move until this thread opens a gate: the wait
  // is the arena's own then, for the rest of it (a pass that frees a send or a receive on the
  // way is served at the arena wait's looks, not by poll).
  template <typename Ready>
  void waitAlongside(Ready& ready, int peer, Progress& work) const {
    if (ready()) return;
    auto readyOrMove = [&] { return ready() || (work.pass(), ready()); };
    auto checkBoth = [&] {
      check(peer);
      work.check();
    };
    if (spinsBeside()) return waitUntil(readyOrMove, checkBoth, peers);
    waitUntil(
        readyOrMove, checkBoth,
        [&](PollSet& set) {
          work.gather(set);
          // No socket would let the work move (its lanes wait for gates this thread opens, or
          // for operations behind them): the wait is the arena's alone, and waits as one. Else
          // it would sleep in slices on the sockets, as it did while a 2 x 4 allreduce's column
          // sat idle between chunks (a trace, 16 cores, 256 MiB: busy 3 ms of each 12).
          if (!set.hasDescriptors()) return set.clear();
          set.add(-1, POLLIN);
        },
        *pollSet, peers);
  }
  char* scratchBytes(size_t bytes) const {
    // Grows once to the largest size seen; never allocates again for smaller calls.
    if (scratch->size() < bytes) scratch->resize(bytes);
    return scratch->data();
  }
};

// The groups of a communicator that spans nodes, built once at init: the ranks of every node (by
// local index) and, for each local index below the smallest node's size, its column (the ranks
// with that local index, one per node). Only local indices below the smallest node's size have a
// column (every node has such a rank), so uneven nodes still give every column one rank per node;
// the rest of a larger node takes part in the intra-node phases only.
struct Hierarchy {
  std::vector<std::vector<int>> members;  // global ranks of each node, ascending
  std::vector<int> nodeOf, localIndex;    // of each global rank
  int nodeIndex = 0;                      // this rank's node
  int columns = 1;                        // the smallest node's size
  // This rank's node as a group with its own arena (host memory): the allreduce's node phases.
  const AlgoContext* node = nullptr;
};

// Builds this rank's schedule of a call (ranks in the schedule are the communicator's) into a
// cleared schedule; the executor then runs it.
using ScheduleFn = void (*)(const AlgoContext&, const CollArgs&, Schedule&);

// What a schedule was built for by buildSchedule: a call like it (the same builder, context and
// arguments) runs the schedule as built, without building it again (~700 instructions of a 1 KiB
// ring reduce's 4,500). A builder reads the call's buffers only as their distance (in place, a
// block inside the output, ...), so that distance is what is kept of them; calls with per-peer
// counts (alltoallv) are always built, as their counts' contents may change.
struct BuiltCall {
  ScheduleFn build = nullptr;
  const std::vector<Channel*>* channels = nullptr;
  int rank = -1;
  loomFunc_t func = loomFuncAllReduce;
  size_t count = 0;
  loomDataType_t dtype = loomFloat32;
  loomRedOp_t op = loomSum;
  int root = 0;
  int accum = -1;
  bool hasSend = false, hasRecv = false;
  uintptr_t sendMinusRecv = 0;
  loomStream_t stream = nullptr;
  uint64_t generation = 0;  // the schedule's then: a clear() since (another builder) voids this
  bool operator==(const BuiltCall&) const = default;
};

// What the algorithms of one communicator reuse from call to call, so that no call allocates
// once warm: scratch, reduction sources, ring steps, builders' lists, the schedule and its
// executor, the poll set of network waits, and the arena's step counter.
struct AlgoWorkspace {
  std::vector<char> scratch;
  std::vector<const void*> sources;
  std::vector<RingStep> ringSteps;
  std::vector<uint32_t> opList;
  std::vector<BufferRef> refList;
  Schedule schedule;
  BuiltCall builtCall;
  Executor executor;
  std::vector<char*> bindings;
  PollSet pollSet;
  Alongside alongside;
  std::unique_ptr<ThreadedRun> threadedRun;
  uint64_t step = 0;
  // Points ctx's workspace fields here, sized for `nranks` ranks.
  void attach(AlgoContext& ctx, int nranks);
};

using AlgorithmFn = void (*)(const AlgoContext&, const CollArgs&);

struct Algorithm {
  loomFunc_t func;
  const char* name;
  // Hand-written (the arena's), a composition, or a schedule's run with conditions of its own
  // (runs first where both are set); null: the executor runs `build`'s schedule.
  AlgorithmFn run;
  bool needsArena;  // runs only where all ranks share one host's memory
  // Moves and reduces data only through ctx.device (and the arena): runs unchanged on a device
  // whose copies and reductions take host pointers (DeviceCaps::mapsHostMemory).
  bool dataThroughDevice = false;
  int native = -1;             // a backend's own: the index of its NativeAlgorithm
  ScheduleFn build = nullptr;  // this rank's schedule of a call (tests, loom-info), if it has one
  // An algorithm that carries data of its own (a loaded execution plan, plan/): runs the call.
  std::function<void(const AlgoContext&, const CollArgs&)> runWith = nullptr;
};

// Every host algorithm Loom has, for the selector and for forcing one in tests.
const std::vector<Algorithm>& allAlgorithms();
const Algorithm* findAlgorithm(loomFunc_t func, const std::string& name);
const char* funcName(loomFunc_t func);  // "allreduce", "allgather", ... (LOOM_ALGO keys)

// The table entries of a backend's native collectives (names point into `native`).
std::vector<Algorithm> nativeAlgorithms(const NativeCollectives& native);

// Builds the schedule with `build` into ctx's schedule and runs it with ctx's executor: the call's
// send and receive buffers as its input and output, its scratch buffers in ctx's scratch.
void runSchedule(const AlgoContext& ctx, const CollArgs& args, ScheduleFn build);
// Builds `args`' schedule with `build` into ctx's schedule (cleared, extents set, finished).
void buildSchedule(const AlgoContext& ctx, const CollArgs& args, ScheduleFn build);
// Runs ctx's schedule as built (finish() called), binding input and output as given.
void runBuilt(const AlgoContext& ctx, const void* input, void* output);
// The same for a schedule the caller keeps (built once for calls of one shape).
void runBuiltSchedule(const AlgoContext& ctx, const Schedule& s, const void* input, void* output);
// Binds the buffers of a built schedule into ctx's bindings (scratch in ctx's scratch) and
// returns the environment of its run (the stepwise driver's; runBuiltSchedule runs it at once).
ExecEnv bindSchedule(const AlgoContext& ctx, const Schedule& s, const void* input, void* output);

inline void runAlgorithm(const Algorithm& algo, const AlgoContext& ctx, const CollArgs& args) {
  if (algo.native >= 0)
    ctx.native->run(algo.native, args);
  else if (algo.run != nullptr)
    algo.run(ctx, args);
  else if (algo.runWith)
    algo.runWith(ctx, args);
  else
    runSchedule(ctx, args, algo.build);
}

// An operation index that names none (a builder's "nothing to wait for").
constexpr uint32_t kNoOp = ~uint32_t{0};

// A schedule on ctx's channels run beside arena phases of another context, `beside`: begun at
// construction, it moves until this ends, either in every wait of `beside`'s arena and at each of
// its arena steps (AlgoContext::wait; ShmStage's constructor calls moveAlongside), or on ctx's
// thread for runs beside (ThreadedRun) where `beside` threads its work (threadsBeside). So the
// network carries one chunk of a call while the arena reduces or shares another, and the arena's
// bytes never enter a channel. Its users: a hierarchical call's column beside its node phases
// (hierarchical.cpp, hierarchical_blocks.cpp) and a heterogeneous leader's exchange beside its
// cluster's phases (comm/hetero_composed.cpp). Its kGate operations wait for open() (the arena
// phase that writes what they guard is done). Destroyed early (a failure), it abandons the run.
class AlongsideRun {
 public:
  // onThread: whether the run goes to ctx's thread, as the caller decided; unset: as
  // beside.threadsBeside says for the run's bytes. Where the thread cannot be had (no thread or
  // descriptor left), the run moves inline.
  AlongsideRun(const AlgoContext& ctx, const AlgoContext& beside, const Schedule& s,
               const void* input, void* output, std::optional<bool> onThread = std::nullopt);
  ~AlongsideRun();
  AlongsideRun(const AlongsideRun&) = delete;
  AlongsideRun& operator=(const AlongsideRun&) = delete;

  void open(uint32_t gate);
  // Until `op` is done (kNoOp: nothing to wait for); inline, drives the run alone meanwhile.
  void waitFor(uint32_t op);
  void finish();

 private:
  ThreadedRun* startOnThread(const AlgoContext& ctx, const Schedule& s);  // null: failed

  Executor& executor_;
  const ExecEnv env_;  // the run's, for its length
  Alongside& slot_;
  const CoreSharing waiter_;       // the calling rank's, for waits on the thread
  ThreadedRun* thread_ = nullptr;  // the run's thread; null: moved inline
};

}  // namespace loom
