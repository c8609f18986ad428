#include "exec/simulate.hpp"

#include <algorithm>
#include <cstring>
#include <sstream>

#include "base/dtype.hpp"
#include "base/reduce.hpp"

namespace loom {

namespace {

// One direction between two ranks: its bytes and where each transfer begins.
struct SimChannel {
  std::vector<char> bytes;
  size_t read = 0;
  std::vector<uint64_t> transfers;  // sizes, in order
  size_t nextTransfer = 0;          // the next one a receive starts
};

struct RankState {
  std::vector<uint64_t> position;
  std::vector<uint8_t> done;
  std::vector<uint8_t> started;  // a receive took its transfer
  std::vector<uint32_t> head;
  size_t remaining = 0;
};

class Simulator {
 public:
  explicit Simulator(std::span<SimulatedRank> ranks)
      : ranks_(ranks), channels_(ranks.size() * ranks.size()), states_(ranks.size()) {}

  SimulationResult run();

 private:
  SimChannel& channel(int from, int to) { return channels_[from * ranks_.size() + to]; }
  bool counted(int r) const { return !ranks_[r].buffers.empty(); }
  char* at(int r, BufferRef ref) { return ranks_[r].buffers[ref.buffer] + ref.offset; }
  bool step(int r, uint32_t index);
  uint64_t limitOf(int r, const ScheduleOp& op, bool& ready) const;
  void checkBounds(int r, uint32_t index);
  void noteWrite(int r, const ScheduleOp& op, uint64_t from, uint64_t n);
  void fail(const std::string& problem) {
    if (result_.ok) result_.ok = false, result_.problem = problem;
  }
  std::string where(int r, uint32_t index) const;
  std::string stuck() const;

  std::span<SimulatedRank> ranks_;
  std::vector<SimChannel> channels_;
  std::vector<RankState> states_;
  SimulationResult result_;
};

std::string Simulator::where(int r, uint32_t index) const {
  const Schedule& s = *ranks_[r].schedule;
  const ScheduleOp& op = s.ops()[index];
  const ScheduleLane& lane = s.lanes()[op.lane];
  std::ostringstream out;
  out << "rank " << r << ", lane "
      << (lane.kind == LaneKind::kSendTo     ? "send to "
          : lane.kind == LaneKind::kRecvFrom ? "recv from "
          : lane.kind == LaneKind::kLocal    ? "local "
                                             : "device ")
      << lane.peer << ", op #" << index << " (" << opKindName(op.kind) << " " << op.bytes << " B)";
  return out.str();
}

void Simulator::checkBounds(int r, uint32_t index) {
  const Schedule& s = *ranks_[r].schedule;
  const ScheduleOp& op = s.ops()[index];
  auto inside = [&](BufferRef ref) {
    return ref.buffer < s.buffers().size() &&
           ref.offset + op.bytes <= s.buffers()[ref.buffer].bytes;
  };
  if (op.bytes == 0) return;
  bool ok = true;
  if (op.kind != OpKind::kSend) ok &= inside(op.dst);
  if (op.kind == OpKind::kSend || op.kind == OpKind::kCopy || op.kind == OpKind::kRecvReduce ||
      op.kind == OpKind::kDeviceCopy)
    ok &= inside(op.src);
  for (uint32_t i = op.sourceBegin; i < op.sourceEnd; ++i) ok &= inside(s.sources()[i]);
  if (!ok) fail(where(r, index) + " reaches past the end of a buffer");
}

uint64_t Simulator::limitOf(int r, const ScheduleOp& op, bool& ready) const {
  const Schedule& s = *ranks_[r].schedule;
  const RankState& st = states_[r];
  uint64_t limit = op.bytes;
  ready = true;
  for (uint32_t d = op.depBegin; d < op.depEnd; ++d) {
    const ScheduleDep& dep = s.deps()[d];
    if (st.done[dep.on]) continue;
    if (!dep.streamed || op.bytes == 0) {
      ready = false;
      return 0;
    }
    limit = std::min(limit, st.position[dep.on]);
  }
  return limit;
}

void Simulator::noteWrite(int r, const ScheduleOp& op, uint64_t from, uint64_t n) {
  if (op.kind == OpKind::kSend || op.dst.buffer != Schedule::kOutput || n == 0) return;
  std::vector<uint8_t>& writes = result_.outputWrites[r];
  for (uint64_t i = op.dst.offset + from; i < op.dst.offset + from + n && i < writes.size(); ++i)
    writes[i] = static_cast<uint8_t>(std::min(writes[i] + 1, 255));
}

bool Simulator::step(int r, uint32_t index) {
  const Schedule& s = *ranks_[r].schedule;
  const ScheduleOp& op = s.ops()[index];
  RankState& st = states_[r];
  uint64_t& pos = st.position[index];
  bool ready = false;
  const uint64_t limit = limitOf(r, op, ready);
  if (!ready) return false;
  if (!st.started[index] && op.bytes > 0) {
    checkBounds(r, index);
    if (op.kind != OpKind::kSend && op.kind != OpKind::kRecv && op.kind != OpKind::kRecvReduce)
      st.started[index] = 1;
  }
  uint64_t n = 0;
  if (op.kind == OpKind::kSend) {
    SimChannel& ch = channel(r, op.peer);
    if (!st.started[index] && op.bytes > 0) ch.transfers.push_back(op.bytes);
    st.started[index] = 1;
    n = limit - pos;
    const size_t old = ch.bytes.size();
    ch.bytes.resize(old + n);
    if (counted(r) && n > 0) std::memcpy(ch.bytes.data() + old, at(r, op.src) + pos, n);
  } else if (op.kind == OpKind::kRecv || op.kind == OpKind::kRecvReduce) {
    SimChannel& ch = channel(op.peer, r);
    if (!st.started[index] && op.bytes > 0) {
      if (ch.nextTransfer >= ch.transfers.size()) return false;  // nothing sent yet
      if (ch.transfers[ch.nextTransfer] != op.bytes) {
        fail(where(r, index) + " receives a transfer of " +
             std::to_string(ch.transfers[ch.nextTransfer]) + " B from rank " +
             std::to_string(op.peer));
        return false;
      }
      ++ch.nextTransfer;
      st.started[index] = 1;
    }
    const uint64_t want = (op.kind == OpKind::kRecv ? op.bytes : limit) - pos;
    n = std::min<uint64_t>(want, ch.bytes.size() - ch.read);
    if (counted(r) && n > 0) {
      const char* data = ch.bytes.data() + ch.read;
      if (op.kind == OpKind::kRecv) {
        std::memcpy(at(r, op.dst) + pos, data, n);
      } else {
        const void* srcs[2] = {at(r, op.src) + pos, data};
        const Reduction& red = op.reduction;
        reduceManyAndScale(at(r, op.dst) + pos, srcs, 2, n / dtypeSize(red.dtype), red.dtype,
                           red.op, red.accum, red.divisor);
      }
    }
    ch.read += n;
  } else if (op.kind == OpKind::kCall || op.kind == OpKind::kGate) {
    // Host work the schedule does not spell out, a hand-over from it: done once its
    // dependencies are.
    st.done[index] = 1;
    return true;
  } else {
    n = limit - pos;
    if (counted(r) && n > 0) {
      if (op.kind == OpKind::kCopy || op.kind == OpKind::kDeviceCopy) {
        std::memmove(at(r, op.dst) + pos, at(r, op.src) + pos, n);
      } else {
        std::vector<const void*> srcs;
        for (uint32_t i = op.sourceBegin; i < op.sourceEnd; ++i)
          srcs.push_back(at(r, s.sources()[i]) + pos);
        const Reduction& red = op.reduction;
        reduceManyAndScale(at(r, op.dst) + pos, srcs.data(), static_cast<int>(srcs.size()),
                           n / dtypeSize(red.dtype), red.dtype, red.op, red.accum, red.divisor);
      }
    }
  }
  noteWrite(r, op, pos, n);
  pos += n;
  if (pos == op.bytes) {
    st.done[index] = 1;
    return true;
  }
  return n > 0;
}

std::string Simulator::stuck() const {
  std::ostringstream out;
  out << "no operation can go on (a cycle of waits, or a receive with no send):";
  for (size_t r = 0; r < ranks_.size(); ++r) {
    const Schedule& s = *ranks_[r].schedule;
    for (uint32_t l = 0; l < s.lanes().size(); ++l) {
      const ScheduleLane& lane = s.lanes()[l];
      const uint32_t h = states_[r].head[l];
      if (lane.begin + h >= lane.end) continue;
      const uint32_t index = s.laneOps()[lane.begin + h];
      out << " [" << where(static_cast<int>(r), index) << ", " << states_[r].position[index]
          << " B done]";
    }
  }
  return out.str();
}

SimulationResult Simulator::run() {
  result_.outputWrites.resize(ranks_.size());
  for (size_t r = 0; r < ranks_.size(); ++r) {
    const Schedule& s = *ranks_[r].schedule;
    RankState& st = states_[r];
    st.position.assign(s.ops().size(), 0);
    st.done.assign(s.ops().size(), 0);
    st.started.assign(s.ops().size(), 0);
    st.head.assign(s.lanes().size(), 0);
    st.remaining = s.ops().size();
    result_.outputWrites[r].assign(s.buffers()[Schedule::kOutput].bytes, 0);
    for (const ScheduleOp& op : s.ops())
      if (op.peer >= static_cast<int>(ranks_.size()))
        fail("rank " + std::to_string(r) + " names peer " + std::to_string(op.peer) + " of " +
             std::to_string(ranks_.size()) + " ranks");
  }
  bool more = result_.ok;
  while (more && result_.ok) {
    bool progress = false;
    more = false;
    for (size_t r = 0; r < ranks_.size(); ++r) {
      const Schedule& s = *ranks_[r].schedule;
      RankState& st = states_[r];
      for (uint32_t l = 0; l < s.lanes().size(); ++l) {
        const ScheduleLane& lane = s.lanes()[l];
        uint32_t& h = st.head[l];
        while (lane.begin + h < lane.end && result_.ok) {
          const uint32_t index = s.laneOps()[lane.begin + h];
          progress |= step(static_cast<int>(r), index);
          if (!st.done[index]) break;
          ++h;
          --st.remaining;
        }
      }
      more |= st.remaining > 0;
    }
    if (more && !progress && result_.ok) fail(stuck());
  }
  for (size_t from = 0; from < ranks_.size() && result_.ok; ++from)
    for (size_t to = 0; to < ranks_.size(); ++to) {
      const SimChannel& ch = channel(static_cast<int>(from), static_cast<int>(to));
      if (ch.read != ch.bytes.size())
        fail("rank " + std::to_string(from) + " sent rank " + std::to_string(to) + " " +
             std::to_string(ch.bytes.size() - ch.read) + " B that it never received");
    }
  return result_;
}

}  // namespace

std::string SimulationResult::unwritten() const {
  std::ostringstream out;
  for (size_t r = 0; r < outputWrites.size(); ++r) {
    const std::vector<uint8_t>& w = outputWrites[r];
    for (size_t i = 0; i < w.size();) {
      if (w[i] != 0) {
        ++i;
        continue;
      }
      size_t j = i;
      while (j < w.size() && w[j] == 0) ++j;
      out << (out.tellp() > 0 ? "; " : "") << "rank " << r << ": bytes " << i << "-" << j - 1;
      i = j;
    }
  }
  return out.str();
}

SimulationResult simulateSchedules(std::span<SimulatedRank> ranks) {
  return Simulator(ranks).run();
}

}  // namespace loom
