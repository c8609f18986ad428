#include "exec/executor.hpp"

#include <algorithm>

#include "base/dtype.hpp"
#include "base/error.hpp"

namespace loom {

namespace {

// Local work (copies, reductions) is done in slices of this many bytes per pass, so that a large
// copy does not hold back the channels of the other lanes for its whole length.
constexpr uint64_t kLocalSlice = uint64_t{1} << 20;

}  // namespace

void Executor::run(const Schedule& schedule, std::span<char* const> buffers, const ExecEnv& env) {
  schedule_ = &schedule;
  buffers_ = buffers;
  env_ = &env;
  const size_t nops = schedule.ops().size(), nlanes = schedule.lanes().size();
  position_.assign(nops, 0);
  done_.assign(nops, 0);
  head_.assign(nlanes, 0);
  blocked_.assign(nlanes, 0);
  remaining_ = nops;
  networked_ = false;
  for (const ScheduleLane& lane : schedule.lanes()) {
    if (lane.kind == LaneKind::kLocal) continue;
    networked_ |= channel(lane.peer).pollFd(lane.kind == LaneKind::kSendTo) >= 0;
  }
  driveUntil(
      *this, [this] { return remaining_ == 0; }, *env.pollSet, env.corePeers);
}

bool Executor::pass() {
  const Schedule& s = *schedule_;
  const std::vector<ScheduleLane>& lanes = s.lanes();
  const std::vector<uint32_t>& laneOps = s.laneOps();
  bool moved = false;
  for (uint32_t l = 0; l < lanes.size(); ++l) {
    const ScheduleLane& lane = lanes[l];
    uint32_t& head = head_[l];
    blocked_[l] = 0;
    while (lane.begin + head < lane.end) {
      const uint32_t index = laneOps[lane.begin + head];
      Limit limit = limitOf(s.ops()[index]);
      if (!limit.ready) break;
      moved |= step(index, limit.bytes, l);
      if (!done_[index]) break;
      ++head;
      --remaining_;
      moved = true;  // a finished operation may let others go on
    }
  }
  return moved;
}

Executor::Limit Executor::limitOf(const ScheduleOp& op) const {
  const std::vector<ScheduleDep>& deps = schedule_->deps();
  uint64_t limit = op.bytes;
  for (uint32_t d = op.depBegin; d < op.depEnd; ++d) {
    const ScheduleDep& dep = deps[d];
    if (done_[dep.on]) continue;
    // A zero-byte operation has nothing to stream: it waits for the whole.
    if (!dep.streamed || op.bytes == 0) return {false, 0};
    limit = std::min(limit, position_[dep.on]);
  }
  return {true, limit};
}

bool Executor::step(uint32_t index, uint64_t limit, uint32_t lane) {
  const ScheduleOp& op = schedule_->ops()[index];
  uint64_t& position = position_[index];
  bool moved = false;
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
      case OpKind::kCopy:
      case OpKind::kReduce:
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
  bool moved = false;
  while (position < op.bytes) {
    std::span<const char> span = ch.peek(op.bytes - position);
    const size_t n = std::min<size_t>(span.size(), op.bytes - position);
    if (n == 0) break;
    if (op.toOutput && toOutputStreams(op))
      env_->device->copyToOutput(dst + position, span.data(), n);
    else
      env_->device->copy(dst + position, span.data(), n);
    ch.consume(n);
    position += n;
    moved = true;
  }
  return moved;
}

bool Executor::stepRecvReduce(const ScheduleOp& op, uint64_t& position, uint64_t limit) {
  Channel& ch = channel(op.peer);
  const size_t esize = dtypeSize(op.reduction.dtype);
  bool moved = false;
  while (position < limit) {
    std::span<const char> span = ch.peek(op.bytes - position);
    size_t n = std::min<size_t>(span.size(), limit - position);
    // Whole 8-byte groups (whole elements of every type) until the transfer's end.
    if (position + n < op.bytes) n &= ~size_t{7};
    if (n == 0) break;
    const void* srcs[2] = {at(op.src) + position, span.data()};
    env_->device->reduce(at(op.dst) + position, srcs, 2, n / esize, op.reduction.dtype,
                         op.reduction.op, op.reduction.accum, op.reduction.divisor);
    ch.consume(n);
    position += n;
    moved = true;
  }
  return moved;
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

bool Executor::toOutputStreams(const ScheduleOp& op) const {
  return op.toOutput && schedule_->buffers()[Schedule::kOutput].bytes >= env_->streamingMinBytes;
}

void Executor::checkPending() const {
  // Only the peers this rank still needs may fail the wait: a neighbour that got all it needed
  // from this rank may finish and exit while this rank still waits for another.
  const Schedule& s = *schedule_;
  bool localPending = false;
  for (uint32_t l = 0; l < s.lanes().size(); ++l) {
    const ScheduleLane& lane = s.lanes()[l];
    if (lane.begin + head_[l] >= lane.end) continue;
    if (lane.kind == LaneKind::kLocal)
      localPending = true;
    else
      (*env_->check)(lane.peer);
  }
  if (localPending) (*env_->check)(-1);
}

void Executor::gatherPending(PollSet& set) const {
  if (networked_) set.markNetworked();
  const Schedule& s = *schedule_;
  for (uint32_t l = 0; l < s.lanes().size(); ++l) {
    const ScheduleLane& lane = s.lanes()[l];
    if (lane.begin + head_[l] >= lane.end) continue;
    if (lane.kind == LaneKind::kRecvFrom) channel(lane.peer).addPollFds(set, false);
    // A send waits on its socket only when the channel was full; one held back by a dependency
    // waits for whatever that dependency waits for.
    if (lane.kind == LaneKind::kSendTo && blocked_[l]) channel(lane.peer).addPollFds(set, true);
  }
}

}  // namespace loom
