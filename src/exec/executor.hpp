// The executor: the one progress loop of Loom's host side. It runs a schedule (exec/schedule.hpp)
// over a communicator's channels and device until every operation is done: each pass moves every
// lane's first unfinished operation as far as its channel, its dependencies and its bytes allow (a
// lane goes on to its next operation as soon as one finishes; the device lane issues its
// operations to the stream and learns of their end by events); when a pass moves nothing it
// waits, with the usual spin, poll on the channels' sockets, yield and sleep (base/wait.hpp),
// running the health check for the peers still owed bytes (the deadline, the abort flag, a dead
// peer).
//
// Two drivers of one schedule:
//   inline (run): the calling thread drives every lane, the device lane's copies included, and
//     returns when all is done (blocking calls).
//   stream-ordered (enqueueDeviceLane, then runHostLanes): at call time the device lane is
//     enqueued on the caller's stream whole, a gate task (exec/stream_gate.hpp) in front of every
//     device operation that waits for host work and an event behind every one that host work
//     waits for, and the call returns; later the communicator's progress queue runs the host
//     lanes, waiting for those events and releasing the gates in order as their host work ends.
//     StreamOrder says how far the enqueue got, since the host half may have to start before it
//     ends (a long device lane can fill a device's launch queue, which drains past its first gate
//     only once the host half released it).
//
// What a run needs of the communicator comes in an ExecEnv. Nothing is allocated per run once
// the executor has seen a schedule of the same size.
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <span>
#include <vector>

#include "base/wait.hpp"
#include "device/device.hpp"
#include "exec/schedule.hpp"
#include "exec/stream_gate.hpp"
#include "transport/channel.hpp"

namespace loom {

// Work that the progress loop drives: a schedule being run, the point-to-point tickets of a
// communicator (comm/p2p_engine.hpp). pass() moves what can move without waiting and says
// whether anything did; check() throws when the work must give up (deadline, abort, a dead peer
// it still needs); gather() names the descriptors whose readiness would let it move.
class Progress {
 public:
  virtual bool pass() = 0;
  virtual void check() = 0;
  virtual void gather(PollSet& set) = 0;

 protected:
  ~Progress() = default;
};

// The progress loop, the only one: passes until done(), waiting between passes that moved
// nothing (spin, poll on the gathered descriptors, yield or sleep, with the health check). Each
// wait runs inside aroundWait(wait), which calls wait() (an observed run times it there).
template <typename Done, typename AroundWait>
void driveUntil(Progress& work, Done&& done, PollSet& set, const CoreSharing& peers,
                AroundWait&& aroundWait) {
  while (!done()) {
    if (work.pass()) continue;
    aroundWait([&] {
      waitUntil([&] { return work.pass() || done(); }, [&] { work.check(); },
                [&](PollSet& s) { work.gather(s); }, set, peers);
    });
  }
}
template <typename Done>
void driveUntil(Progress& work, Done&& done, PollSet& set, const CoreSharing& peers) {
  driveUntil(work, done, set, peers, [](auto&& wait) { wait(); });
}

// The host work of a schedule's kCall operations, by index.
class HostCalls {
 public:
  virtual void run(uint32_t call) = 0;

 protected:
  ~HostCalls() = default;
};

// What a run reports to a tracer (LOOM_TRACE, comm/trace.hpp), when one is given: each operation
// of a lane from its first step to its end, and the waits of the progress loop longer than
// waitThresholdNs(). Without one (ExecEnv::observer null) the executor reads no clock.
class ExecObserver {
 public:
  virtual void operation(const ScheduleOp& op, const ScheduleLane& lane, int64_t startNs,
                         int64_t endNs) = 0;
  // Nothing could move from startNs to endNs; `peer`: a peer the run still waited for (-1: none
  // in particular, local or device work).
  virtual void waited(int64_t startNs, int64_t endNs, int peer) = 0;
  virtual int64_t waitThresholdNs() const = 0;

 protected:
  ~ExecObserver() = default;
};

struct ExecEnv {
  Device* device = nullptr;            // copies and reductions of host-addressable memory
  std::span<Channel* const> channels;  // by rank: the channel each send or receive uses
  // Throws when the call must give up: the deadline passed, the communicator was aborted, or
  // `peer` (a rank; -1: none in particular) is gone.
  const std::function<void(int peer)>* check = nullptr;
  PollSet* pollSet = nullptr;
  CoreSharing corePeers;             // whom a wait may yield its core to
  size_t streamingMinBytes = 0;      // outputs at least this large are written past the cache
  Device* streamDevice = nullptr;    // the device lane: copies and events of this device ...
  loomStream_t stream = nullptr;     // ... in this stream's order
  HostCalls* calls = nullptr;        // kCall operations
  ExecObserver* observer = nullptr;  // spans of operations and long waits (tracing; null: none)
};

// A stream-ordered run's device lane as enqueued, shared by its two halves.
struct StreamOrder {
  std::vector<DeviceEvent*> events;    // by operation: the event behind it (null: none)
  std::atomic<size_t> enqueued{0};     // device-lane operations enqueued, in lane order
  std::atomic<bool> abandoned{false};  // the enqueue failed: nothing more will be enqueued
  std::vector<uint8_t> hostWaits, waitsForHost;  // deviceLaneLinks(), kept for the enqueue
  // Empties the order for `schedule`, taking an event (from take()) for every device operation
  // that host work waits for.
  template <typename TakeEvent>
  void prepare(const Schedule& schedule, TakeEvent&& take);
};

class Executor final : private Progress {
 public:
  // Runs `schedule` to its end (the inline driver). buffers[b] is the address of the schedule's
  // buffer b (input, output, then its scratch buffers); the input is only read. Throws what the
  // health check, a channel or the device throws; the call has then failed, and nothing of it is
  // left in flight on the device.
  void run(const Schedule& schedule, std::span<char* const> buffers, const ExecEnv& env);
  // The stream-ordered driver's call-time half (see above); it may block where the device's
  // launch queue is full. Returns the number of gate tasks enqueued.
  static int enqueueDeviceLane(const Schedule& schedule, std::span<char* const> buffers,
                               const ExecEnv& env, StreamGate& gate, StreamOrder& order);
  // ... and its host half, on the progress queue: every lane but the device's.
  void runHostLanes(const Schedule& schedule, std::span<char* const> buffers, const ExecEnv& env,
                    StreamGate& gate, const StreamOrder& order);

  // The stepwise driver, for a caller that interleaves the run with host work of its own (a
  // hierarchical call's node phases on the arena, AlongsideRun in algorithms/context.hpp):
  // begin() starts a run of host lanes (no device lane); it moves whenever the caller passes
  // progress() (between its steps and in its waits); kGate operations wait until the caller opens
  // them; driveUntilDone(op) drives the run alone until `op` is done, finish() until all is.
  // `buffers` and `env` must outlive the run.
  void begin(const Schedule& schedule, std::span<char* const> buffers, const ExecEnv& env);
  Progress& progress() { return *this; }
  void open(uint32_t gate);
  void driveUntilDone(uint32_t op);
  void finish();
  bool isDone(uint32_t op) const { return done_[op] != 0; }
  bool finished() const { return remaining_ == 0; }  // every operation of the run is done
  bool onNetwork() const { return onNetwork_; }      // some lane's channel is a network one
  // The progress loop over `work` (this run, or work that passes it: a threaded run's gates,
  // exec/threaded_run.hpp) until done(), timing its waits for the run's observer, if any.
  template <typename Done>
  void driveWith(Progress& work, Done&& done, PollSet& set, const CoreSharing& peers) {
    if (observer_ == nullptr) return driveUntil(work, done, set, peers);
    driveUntil(work, done, set, peers, [&](auto&& wait) {
      const int64_t start = static_cast<int64_t>(steadyNowNs());
      wait();
      const int64_t end = static_cast<int64_t>(steadyNowNs());
      if (end - start >= observer_->waitThresholdNs()) observer_->waited(start, end, pendingPeer());
    });
  }

 private:
  struct Limit {
    bool ready;      // every dependency allows the operation to start
    uint64_t bytes;  // how far it may go
  };
  void start(const Schedule& schedule, std::span<char* const> buffers, const ExecEnv& env);
  bool pass() override;
  void check() override { checkPending(); }
  void gather(PollSet& set) override { gatherPending(set); }
  Limit limitOf(const ScheduleOp& op) const;
  bool step(uint32_t index, uint64_t limit, uint32_t lane);
  bool stepSend(const ScheduleOp& op, uint64_t& position, uint64_t limit, uint32_t lane);
  bool stepRecv(const ScheduleOp& op, uint64_t& position);
  bool stepRecvReduce(const ScheduleOp& op, uint64_t& position, uint64_t limit);
  bool stepLocal(const ScheduleOp& op, uint64_t& position, uint64_t limit);
  bool issueDevice(uint32_t index);
  bool pollDevice();
  bool pollStreamOrder();
  void releaseGates();
  void drainDevice() noexcept;
  void checkPending() const;
  void gatherPending(PollSet& set) const;
  bool canTakeBytes(uint32_t index) const;  // its dependencies let more bytes in
  // driveUntil, timing each wait for the observer.
  template <typename Done>
  void drive(Done&& done);
  int pendingPeer() const;  // a peer some unfinished lane still needs, or -1
  void operationDone(uint32_t index, const ScheduleLane& lane);
  const ScheduleLane& deviceLane() const;
  char* at(BufferRef ref) const { return buffers_[ref.buffer] + ref.offset; }
  Channel& channel(int peer) const { return *env_->channels[peer]; }
  bool toOutputStreams(const ScheduleOp& op) const;
  DeviceEvent& eventAt(size_t i);

  // The run in progress.
  const Schedule* schedule_ = nullptr;
  std::span<char* const> buffers_;
  const ExecEnv* env_ = nullptr;
  StreamGate* gate_ = nullptr;          // stream-ordered host half: the run's gate ...
  const StreamOrder* order_ = nullptr;  // ... and its enqueued device lane
  std::vector<uint8_t> networked_;      // per lane: its channel is a network channel
  bool onNetwork_ = false;              // some lane's is
  size_t remaining_ = 0;                // operations not yet done
  // Per operation and lane, reused from run to run.
  std::vector<uint64_t> position_;  // bytes done
  std::vector<uint8_t> done_;
  std::vector<uint8_t> hostWaits_;  // device operations some host operation waits for
  std::vector<uint32_t> head_;      // per lane: its first unfinished operation (index into it)
  std::vector<uint8_t> blocked_;    // per lane: its last send found the channel full
  std::vector<const void*> srcs_;   // a reduction's sources
  // Inline device lane: operations issued and not yet seen finished, with their events.
  std::vector<std::pair<uint32_t, size_t>> inFlight_;
  std::vector<std::unique_ptr<DeviceEvent>> events_;
  size_t eventsUsed_ = 0;
  bool issued_ = false;  // some device operation was issued (a failure must drain the stream)
  // Stream-ordered host half: the gated device operations in lane order, the next to release.
  std::vector<uint32_t> gates_;
  size_t nextGate_ = 0;
  // Tracing only (env.observer): when each operation took its first step.
  ExecObserver* observer_ = nullptr;
  std::vector<int64_t> opStart_;
};

// Device operations that some host operation waits for (gets an event) and device operations
// that wait for some host operation (get a gate), by operation index.
void deviceLaneLinks(const Schedule& schedule, std::vector<uint8_t>& hostWaits,
                     std::vector<uint8_t>* waitsForHost = nullptr);

template <typename TakeEvent>
void StreamOrder::prepare(const Schedule& schedule, TakeEvent&& take) {
  deviceLaneLinks(schedule, hostWaits, &waitsForHost);
  events.assign(schedule.ops().size(), nullptr);
  for (size_t i = 0; i < hostWaits.size(); ++i)
    if (hostWaits[i]) events[i] = take();
  enqueued.store(0, std::memory_order_relaxed);
  abandoned.store(false, std::memory_order_relaxed);
}

}  // namespace loom
