#include "exec/executor.hpp"

#include <algorithm>

#include "base/dtype.hpp"
#include "base/error.hpp"

namespace loom {

namespace {

// Local work (copies, reductions) is done in slices of this many bytes per pass, so that a large
// copy does not hold back the channels of the other lanes for its whole length.
constexpr uint64_t kLocalSlice = uint64_t{1} << 20;

// Channel lanes move one step per pass: a receive through the channel's buffer takes one look at
// the channel (one peek), and a lane whose send or receive finishes stops there for the pass. So
// what streams behind a receive (the next ring step's send) leaves between its pieces, as with
// the ring engine before the executor. Taking all that kept arriving, and the next step's data in
// the same pass, held every hop back: ring reduce-scatter on 2 nodes x 4 ranks over TCP took
// 1.25-2.0x as long at 256 KiB-1 MiB (16-core host; bench/results/ring-steps-2026-11-29/).

bool onDevice(const ScheduleOp& op) { return op.kind == OpKind::kDeviceCopy; }

}  // namespace

void deviceLaneLinks(const Schedule& schedule, std::vector<uint8_t>& hostWaits,
                     std::vector<uint8_t>* waitsForHost) {
  const std::vector<ScheduleOp>& ops = schedule.ops();
  hostWaits.assign(ops.size(), 0);
  if (waitsForHost != nullptr) waitsForHost->assign(ops.size(), 0);
  for (const ScheduleDep& d : schedule.deps()) {
    if (onDevice(ops[d.on]) && !onDevice(ops[d.op])) hostWaits[d.on] = 1;
    if (waitsForHost != nullptr && onDevice(ops[d.op]) && !onDevice(ops[d.on]))
      (*waitsForHost)[d.op] = 1;
  }
}

void Executor::start(const Schedule& schedule, std::span<char* const> buffers, const ExecEnv& env) {
  schedule_ = &schedule;
  buffers_ = buffers;
  env_ = &env;
  const size_t nops = schedule.ops().size(), nlanes = schedule.lanes().size();
  position_.assign(nops, 0);
  done_.assign(nops, 0);
  head_.assign(nlanes, 0);
  blocked_.assign(nlanes, 0);
  remaining_ = nops;
  networked_.assign(nlanes, 0);
  for (size_t l = 0; l < nlanes; ++l) {
    const ScheduleLane& lane = schedule.lanes()[l];
    if (lane.kind != LaneKind::kSendTo && lane.kind != LaneKind::kRecvFrom) continue;
    networked_[l] = channel(lane.peer).pollFd(lane.kind == LaneKind::kSendTo) >= 0;
  }
  onNetwork_ = std::find(networked_.begin(), networked_.end(), 1) != networked_.end();
  deviceLaneLinks(schedule, hostWaits_);
  inFlight_.clear();
  eventsUsed_ = 0;
  issued_ = false;
  observer_ = env.observer;
  if (observer_ != nullptr) opStart_.assign(nops, 0);
}

template <typename Done>
void Executor::drive(Done&& done) {
  driveWith(*this, done, *env_->pollSet, env_->corePeers);
}

int Executor::pendingPeer() const {
  const Schedule& s = *schedule_;
  for (uint32_t l = 0; l < s.lanes().size(); ++l) {
    const ScheduleLane& lane = s.lanes()[l];
    if (lane.begin + head_[l] < lane.end && lane.kind == LaneKind::kRecvFrom) return lane.peer;
  }
  for (uint32_t l = 0; l < s.lanes().size(); ++l) {
    const ScheduleLane& lane = s.lanes()[l];
    if (lane.begin + head_[l] < lane.end && lane.kind == LaneKind::kSendTo) return lane.peer;
  }
  return -1;
}

void Executor::operationDone(uint32_t index, const ScheduleLane& lane) {
  const int64_t end = static_cast<int64_t>(steadyNowNs());
  const int64_t start = opStart_[index] != 0 ? opStart_[index] : end;
  observer_->operation(schedule_->ops()[index], lane, start, end);
}

void Executor::run(const Schedule& schedule, std::span<char* const> buffers, const ExecEnv& env) {
  start(schedule, buffers, env);
  gate_ = nullptr;
  order_ = nullptr;
  // The run ends when the stream has done the device lane's last operation.
  for (const ScheduleLane& lane : schedule.lanes())
    if (lane.kind == LaneKind::kDevice && lane.end > lane.begin)
      hostWaits_[schedule.laneOps()[lane.end - 1]] = 1;
  try {
    drive([this] { return remaining_ == 0; });
  } catch (...) {
    drainDevice();
    throw;
  }
}

void Executor::begin(const Schedule& schedule, std::span<char* const> buffers, const ExecEnv& env) {
  for (const ScheduleLane& lane : schedule.lanes())
    LOOM_CHECK_INTERNAL(lane.kind != LaneKind::kDevice || lane.end == lane.begin,
                        "a schedule with device work driven step by step");
  start(schedule, buffers, env);
  gate_ = nullptr;
  order_ = nullptr;
}

void Executor::open(uint32_t gate) {
  LOOM_CHECK_INTERNAL(schedule_->ops()[gate].kind == OpKind::kGate, "operation ", gate,
                      " opened is not a gate");
  // Done from now on: what waits for it may go; its lane passes it at the next pass.
  done_[gate] = 1;
}

void Executor::driveUntilDone(uint32_t op) {
  drive([this, op] { return done_[op] != 0; });
}

void Executor::finish() {
  drive([this] { return remaining_ == 0; });
}

int Executor::enqueueDeviceLane(const Schedule& schedule, std::span<char* const> buffers,
                                const ExecEnv& env, StreamGate& gate, StreamOrder& order) {
  int gates = 0;
  for (const ScheduleLane& lane : schedule.lanes()) {
    if (lane.kind != LaneKind::kDevice) continue;
    for (uint32_t i = lane.begin; i < lane.end; ++i) {
      const uint32_t index = schedule.laneOps()[i];
      const ScheduleOp& op = schedule.ops()[index];
      if (order.waitsForHost[index]) {
        env.streamDevice->enqueueHostTask(gate, env.stream);
        ++gates;
      }
      if (op.bytes > 0)
        env.streamDevice->copyAsync(buffers[op.dst.buffer] + op.dst.offset,
                                    buffers[op.src.buffer] + op.src.offset, op.bytes, op.copyKind,
                                    env.stream);
      if (order.events[index] != nullptr)
        env.streamDevice->recordEvent(*order.events[index], env.stream);
      order.enqueued.store(i - lane.begin + 1, std::memory_order_release);
    }
  }
  return gates;
}

void Executor::runHostLanes(const Schedule& schedule, std::span<char* const> buffers,
                            const ExecEnv& env, StreamGate& gate, const StreamOrder& order) {
  start(schedule, buffers, env);
  gate_ = &gate;
  order_ = &order;
  gates_.clear();
  nextGate_ = 0;
  // The device lane ran at call time: what the host waits for is watched through its events,
  // the rest is done as far as this half knows; its gates open in order.
  for (const ScheduleLane& lane : schedule.lanes()) {
    if (lane.kind != LaneKind::kDevice) continue;
    for (uint32_t i = lane.begin; i < lane.end; ++i) {
      const uint32_t index = schedule.laneOps()[i];
      if (order.waitsForHost[index]) gates_.push_back(index);
      if (order.events[index] != nullptr) {
        inFlight_.emplace_back(index, i - lane.begin);
      } else {
        done_[index] = 1;
        --remaining_;
      }
    }
    head_[&lane - schedule.lanes().data()] = lane.end - lane.begin;
  }
  drive([this] { return remaining_ == 0 && nextGate_ == gates_.size(); });
}

bool Executor::pass() {
  const Schedule& s = *schedule_;
  const std::vector<ScheduleLane>& lanes = s.lanes();
  const std::vector<uint32_t>& laneOps = s.laneOps();
  bool moved = false;
  if (!inFlight_.empty()) moved |= order_ != nullptr ? pollStreamOrder() : pollDevice();
  for (uint32_t l = 0; l < lanes.size(); ++l) {
    const ScheduleLane& lane = lanes[l];
    uint32_t& head = head_[l];
    blocked_[l] = 0;
    while (lane.begin + head < lane.end) {
      const uint32_t index = laneOps[lane.begin + head];
      Limit limit = limitOf(s.ops()[index]);
      if (!limit.ready) break;
      if (observer_ != nullptr && opStart_[index] == 0)
        opStart_[index] = static_cast<int64_t>(steadyNowNs());
      if (lane.kind == LaneKind::kDevice) {
        moved |= issueDevice(index);
        if (observer_ != nullptr && done_[index]) operationDone(index, lane);
        ++head;
        continue;
      }
      moved |= step(index, limit.bytes, l);
      if (!done_[index]) break;
      if (observer_ != nullptr) operationDone(index, lane);
      ++head;
      --remaining_;
      moved = true;  // a finished operation may let others go on
      // A channel's lane takes one step per pass, so the lanes that stream behind it (the next
      // ring step's send) move before its next receive does.
      if (lane.kind == LaneKind::kSendTo || lane.kind == LaneKind::kRecvFrom) break;
    }
  }
  if (gate_ != nullptr) releaseGates();
  return moved;
}

Executor::Limit Executor::limitOf(const ScheduleOp& op) const {
  const std::vector<ScheduleDep>& deps = schedule_->deps();
  uint64_t limit = op.bytes;
  for (uint32_t d = op.depBegin; d < op.depEnd; ++d) {
    const ScheduleDep& dep = deps[d];
    if (done_[dep.on]) continue;
    // A zero-byte operation, a device or host call: nothing to stream, they wait for the whole.
    if (!dep.streamed || op.bytes == 0 || onDevice(op) || op.kind == OpKind::kCall ||
        op.kind == OpKind::kGate)
      return {false, 0};
    limit = std::min(limit, position_[dep.on]);
  }
  return {true, limit};
}

bool Executor::step(uint32_t index, uint64_t limit, uint32_t lane) {
  const ScheduleOp& op = schedule_->ops()[index];
  uint64_t& position = position_[index];
  bool moved = false;
  if (op.kind == OpKind::kGate) return false;  // open() makes it done
  if (op.kind == OpKind::kCall) {
    LOOM_CHECK_INTERNAL(env_->calls != nullptr, "a schedule with host calls run without them");
    env_->calls->run(op.call);
    done_[index] = 1;
    return true;
  }
  if (op.bytes > 0) {
    switch (op.kind) {
      case OpKind::kSend:
        moved = stepSend(op, position, limit, lane);
        break;
      case OpKind::kRecv:
        moved = stepRecv(op, position);
        break;
      case OpKind::kRecvReduce:
        moved = stepRecvReduce(op, position, limit);
        break;
      default:
        moved = stepLocal(op, position, limit);
        break;
    }
  }
  if (position == op.bytes) done_[index] = 1;
  return moved;
}

bool Executor::stepSend(const ScheduleOp& op, uint64_t& position, uint64_t limit, uint32_t lane) {
  uint64_t want = limit - position;
  if (limit < op.bytes) want &= ~uint64_t{7};  // a partial send stays 8-byte granular
  if (want == 0) return false;
  const size_t sent = channel(op.peer).trySend(at(op.src) + position, want);
  position += sent;
  blocked_[lane] = sent < want;
  return sent > 0;
}

bool Executor::stepRecv(const ScheduleOp& op, uint64_t& position) {
  Channel& ch = channel(op.peer);
  char* dst = at(op.dst);
  if (ch.receivesDirect()) {
    // A network channel reads the kernel's buffer straight into the destination.
    const size_t n = ch.tryReceive(dst + position, op.bytes - position);
    position += n;
    return n > 0;
  }
  // One look at the channel per pass (see the top of this file).
  std::span<const char> span = ch.peek(op.bytes - position);
  const size_t n = std::min<size_t>(span.size(), op.bytes - position);
  if (n == 0) return false;
  if (toOutputStreams(op))
    env_->device->copyToOutput(dst + position, span.data(), n);
  else
    env_->device->copy(dst + position, span.data(), n);
  ch.consume(n);
  position += n;
  return true;
}

bool Executor::stepRecvReduce(const ScheduleOp& op, uint64_t& position, uint64_t limit) {
  Channel& ch = channel(op.peer);
  const size_t esize = dtypeSize(op.reduction.dtype);
  if (position >= limit) return false;
  // One look at the channel per pass (see the top of this file).
  std::span<const char> span = ch.peek(op.bytes - position);
  size_t n = std::min<size_t>(span.size(), limit - position);
  // Whole 8-byte groups (whole elements of every type) until the transfer's end.
  if (position + n < op.bytes) n &= ~size_t{7};
  if (n == 0) return false;
  const void* srcs[2] = {at(op.src) + position, span.data()};
  env_->device->reduce(at(op.dst) + position, srcs, 2, n / esize, op.reduction.dtype,
                       op.reduction.op, op.reduction.accum, op.reduction.divisor);
  ch.consume(n);
  position += n;
  return true;
}

bool Executor::stepLocal(const ScheduleOp& op, uint64_t& position, uint64_t limit) {
  uint64_t n = std::min(limit - position, kLocalSlice);
  if (limit < op.bytes) n &= ~uint64_t{7};
  if (n == 0) return false;
  char* dst = at(op.dst) + position;
  if (op.kind == OpKind::kCopy) {
    if (toOutputStreams(op))
      env_->device->copyToOutput(dst, at(op.src) + position, n);
    else
      env_->device->copy(dst, at(op.src) + position, n);
  } else {
    const std::vector<BufferRef>& sources = schedule_->sources();
    srcs_.clear();
    for (uint32_t s = op.sourceBegin; s < op.sourceEnd; ++s)
      srcs_.push_back(at(sources[s]) + position);
    env_->device->reduce(dst, srcs_.data(), static_cast<int>(srcs_.size()),
                         n / dtypeSize(op.reduction.dtype), op.reduction.dtype, op.reduction.op,
                         op.reduction.accum, op.reduction.divisor);
  }
  position += n;
  return true;
}

DeviceEvent& Executor::eventAt(size_t i) {
  while (events_.size() <= i) events_.push_back(env_->streamDevice->createEvent());
  return *events_[i];
}

bool Executor::issueDevice(uint32_t index) {
  // Issued in the lane's order: the stream runs them in that order. Host work waits only for
  // the ones that have an event behind them.
  const ScheduleOp& op = schedule_->ops()[index];
  Device& device = *env_->streamDevice;
  if (op.bytes > 0) device.copyAsync(at(op.dst), at(op.src), op.bytes, op.copyKind, env_->stream);
  issued_ = true;
  if (hostWaits_[index]) {
    DeviceEvent& event = eventAt(eventsUsed_);
    device.recordEvent(event, env_->stream);
    inFlight_.emplace_back(index, eventsUsed_++);
    return true;
  }
  done_[index] = 1;
  --remaining_;
  return true;
}

bool Executor::pollDevice() {
  bool moved = false;
  for (size_t i = 0; i < inFlight_.size();) {
    if (!env_->streamDevice->eventDone(*events_[inFlight_[i].second])) {
      ++i;
      continue;
    }
    done_[inFlight_[i].first] = 1;
    if (observer_ != nullptr) operationDone(inFlight_[i].first, deviceLane());
    --remaining_;
    inFlight_[i] = inFlight_.back();
    inFlight_.pop_back();
    moved = true;
  }
  return moved;
}

bool Executor::pollStreamOrder() {
  // An event is asked about only once it was recorded: a device reports one never recorded as
  // done.
  bool moved = false;
  const size_t enqueued = order_->enqueued.load(std::memory_order_acquire);
  for (size_t i = 0; i < inFlight_.size();) {
    const auto [index, position] = inFlight_[i];
    if (position >= enqueued) {
      if (order_->abandoned.load(std::memory_order_acquire) &&
          position >= order_->enqueued.load(std::memory_order_acquire))
        LOOM_THROW(loomInternalError,
                   "the call failed on its rank while its device work was enqueued on the stream");
      ++i;
      continue;
    }
    if (!env_->streamDevice->eventDone(*order_->events[index])) {
      ++i;
      continue;
    }
    done_[index] = 1;
    if (observer_ != nullptr) operationDone(index, deviceLane());
    --remaining_;
    inFlight_[i] = inFlight_.back();
    inFlight_.pop_back();
    moved = true;
  }
  return moved;
}

const ScheduleLane& Executor::deviceLane() const {
  for (const ScheduleLane& lane : schedule_->lanes())
    if (lane.kind == LaneKind::kDevice) return lane;
  return schedule_->lanes().front();
}

void Executor::releaseGates() {
  // A gate opens once every host operation its device operation waits for is done, in order.
  const Schedule& s = *schedule_;
  while (nextGate_ < gates_.size()) {
    const ScheduleOp& op = s.ops()[gates_[nextGate_]];
    for (uint32_t d = op.depBegin; d < op.depEnd; ++d) {
      const ScheduleDep& dep = s.deps()[d];
      if (!onDevice(s.ops()[dep.on]) && !done_[dep.on]) return;
    }
    gate_->release();
    ++nextGate_;
  }
}

void Executor::drainDevice() noexcept {
  // A failed run must leave nothing in flight into memory the caller may free or reuse.
  if (!issued_ || env_->streamDevice == nullptr) return;
  try {
    env_->streamDevice->synchronize(env_->stream);
  } catch (...) {  // the device's own failure: the error being reported already says it
  }
}

bool Executor::toOutputStreams(const ScheduleOp& op) const {
  return op.toOutput && schedule_->buffers()[Schedule::kOutput].bytes >= env_->streamingMinBytes;
}

void Executor::checkPending() const {
  // Only the peers this rank still needs may fail the wait: a neighbour that got all it needed
  // from this rank may finish and exit while this rank still waits for another.
  const Schedule& s = *schedule_;
  bool localPending = !inFlight_.empty();
  for (uint32_t l = 0; l < s.lanes().size(); ++l) {
    const ScheduleLane& lane = s.lanes()[l];
    if (lane.begin + head_[l] >= lane.end) continue;
    if (lane.kind == LaneKind::kSendTo || lane.kind == LaneKind::kRecvFrom)
      (*env_->check)(lane.peer);
    else
      localPending = true;
  }
  if (localPending || (gate_ != nullptr && nextGate_ < gates_.size())) (*env_->check)(-1);
}

bool Executor::canTakeBytes(uint32_t index) const {
  const Limit limit = limitOf(schedule_->ops()[index]);
  return limit.ready && limit.bytes > position_[index];
}

void Executor::gatherPending(PollSet& set) const {
  // Device work has no descriptor: the wait polls it in short sleeps.
  if (!inFlight_.empty()) set.add(-1, POLLIN);
  const Schedule& s = *schedule_;
  // A run that relays (a ring, a chain) waits as a network one to its end: what its shared-memory
  // peer passes on comes from the network too, so spinning for it after this rank's sockets are
  // done takes the CPU from ranks and kernel work it waits for (2x2 namespace nodes on 2 cores,
  // ring allgather of 8-64 KiB: 2.1-2.6x the time of a run that sleeps there).
  if (onNetwork_ && s.relays()) set.markNetworked();
  for (uint32_t l = 0; l < s.lanes().size(); ++l) {
    const ScheduleLane& lane = s.lanes()[l];
    if (lane.begin + head_[l] >= lane.end) continue;
    // Otherwise only a network lane still to finish makes the wait a network one
    // (PollSet::markNetworked): once the sockets are done, what is left on shared memory waits as
    // shared memory does, not in poll slices of up to 200 us on no descriptor (pairwise alltoall
    // of 2-8 MiB on 2x2 nodes: 1.1-1.35x the time of the transfers before the executor, which
    // waited so).
    if (networked_[l]) set.markNetworked();
    // A receive waits on its socket only when arriving bytes would let it move: one held back
    // by a dependency (a gate, a local operand) would find the socket readable at once, again
    // and again, and spin on poll while whatever it waits for needs the CPU.
    if (lane.kind == LaneKind::kRecvFrom && canTakeBytes(s.laneOps()[lane.begin + head_[l]]))
      channel(lane.peer).addPollFds(set, false);
    // A send waits on its socket only when the channel was full; one held back by a dependency
    // waits for whatever that dependency waits for.
    if (lane.kind == LaneKind::kSendTo && blocked_[l]) channel(lane.peer).addPollFds(set, true);
  }
}

}  // namespace loom
