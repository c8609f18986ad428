#include "exec/schedule.hpp"

#include <sstream>

#include "base/dtype.hpp"
#include "base/error.hpp"

namespace loom {

const char* opKindName(OpKind kind) {
  switch (kind) {
    case OpKind::kSend:
      return "send";
    case OpKind::kRecv:
      return "recv";
    case OpKind::kRecvReduce:
      return "recvReduce";
    case OpKind::kCopy:
      return "copy";
    case OpKind::kReduce:
      return "reduce";
    case OpKind::kDeviceCopy:
      return "deviceCopy";
    case OpKind::kCall:
      return "call";
    case OpKind::kGate:
      return "gate";
  }
  return "?";
}

void Schedule::clear(int nranks) {
  relays_ = false;
  ops_.clear();
  deps_.clear();
  sources_.clear();
  buffers_.clear();
  buffers_.push_back({"in", 0});
  buffers_.push_back({"out", 0});
  lanes_.clear();
  laneOps_.clear();
  sendLane_.assign(nranks, -1);
  recvLane_.assign(nranks, -1);
  localLane_.clear();
  deviceLane_.clear();
  finished_ = false;
  ++generation_;
}

uint16_t Schedule::addScratch(const char* name, uint64_t bytes) {
  buffers_.push_back({name, bytes, false});
  return static_cast<uint16_t>(buffers_.size() - 1);
}

uint16_t Schedule::addStaging(const char* name, uint64_t bytes) {
  buffers_.push_back({name, bytes, true});
  return static_cast<uint16_t>(buffers_.size() - 1);
}

uint16_t Schedule::laneFor(LaneKind kind, int peer) {
  std::vector<int32_t>* table = kind == LaneKind::kSendTo     ? &sendLane_
                                : kind == LaneKind::kRecvFrom ? &recvLane_
                                : kind == LaneKind::kLocal    ? &localLane_
                                                              : &deviceLane_;
  LOOM_CHECK_INTERNAL(peer >= 0, "a lane needs a peer or local number, got ", peer);
  const bool numbered = kind == LaneKind::kLocal || kind == LaneKind::kDevice;
  if (numbered && static_cast<size_t>(peer) >= table->size()) table->resize(peer + 1, -1);
  LOOM_CHECK_INTERNAL(static_cast<size_t>(peer) < table->size(), "peer ", peer, " is not a rank");
  int32_t& lane = (*table)[peer];
  if (lane < 0) {
    lane = static_cast<int32_t>(lanes_.size());
    lanes_.push_back({kind, peer, 0, 0});
  }
  return static_cast<uint16_t>(lane);
}

uint32_t Schedule::add(const ScheduleOp& op) {
  ops_.push_back(op);
  return static_cast<uint32_t>(ops_.size() - 1);
}

uint32_t Schedule::send(int peer, BufferRef src, uint64_t bytes) {
  ScheduleOp op;
  op.kind = OpKind::kSend;
  op.lane = laneFor(LaneKind::kSendTo, peer);
  op.peer = peer;
  op.src = src;
  op.bytes = bytes;
  return add(op);
}

uint32_t Schedule::recv(int peer, BufferRef dst, uint64_t bytes, bool toOutput) {
  ScheduleOp op;
  op.kind = OpKind::kRecv;
  op.lane = laneFor(LaneKind::kRecvFrom, peer);
  op.peer = peer;
  op.dst = dst;
  op.bytes = bytes;
  op.toOutput = toOutput;
  return add(op);
}

uint32_t Schedule::recvReduce(int peer, BufferRef dst, BufferRef with, uint64_t bytes,
                              const Reduction& reduction, bool toOutput) {
  ScheduleOp op;
  op.kind = OpKind::kRecvReduce;
  op.lane = laneFor(LaneKind::kRecvFrom, peer);
  op.peer = peer;
  op.dst = dst;
  op.src = with;
  op.bytes = bytes;
  op.reduction = reduction;
  op.toOutput = toOutput;
  return add(op);
}

uint32_t Schedule::copy(BufferRef dst, BufferRef src, uint64_t bytes, bool toOutput,
                        int localLane) {
  ScheduleOp op;
  op.kind = OpKind::kCopy;
  op.lane = laneFor(LaneKind::kLocal, localLane);
  op.dst = dst;
  op.src = src;
  op.bytes = bytes;
  op.toOutput = toOutput;
  return add(op);
}

uint32_t Schedule::reduce(BufferRef dst, const BufferRef* sources, int count, uint64_t bytes,
                          const Reduction& reduction, bool toOutput, int localLane) {
  LOOM_CHECK_INTERNAL(count >= 1, "a reduction needs a source");
  ScheduleOp op;
  op.kind = OpKind::kReduce;
  op.lane = laneFor(LaneKind::kLocal, localLane);
  op.dst = dst;
  op.bytes = bytes;
  op.reduction = reduction;
  op.toOutput = toOutput;
  op.sourceBegin = static_cast<uint32_t>(sources_.size());
  sources_.insert(sources_.end(), sources, sources + count);
  op.sourceEnd = static_cast<uint32_t>(sources_.size());
  return add(op);
}

uint32_t Schedule::deviceCopy(BufferRef dst, BufferRef src, uint64_t bytes, CopyKind kind) {
  ScheduleOp op;
  op.kind = OpKind::kDeviceCopy;
  op.lane = laneFor(LaneKind::kDevice, 0);
  op.dst = dst;
  op.src = src;
  op.bytes = bytes;
  op.copyKind = kind;
  return add(op);
}

uint32_t Schedule::call(uint32_t index, int localLane) {
  ScheduleOp op;
  op.kind = OpKind::kCall;
  op.lane = laneFor(LaneKind::kLocal, localLane);
  op.call = index;
  return add(op);
}

uint32_t Schedule::gate(int localLane) {
  ScheduleOp op;
  op.kind = OpKind::kGate;
  op.lane = laneFor(LaneKind::kLocal, localLane);
  return add(op);
}

void Schedule::finish() {
  // Lanes: each lane's operations in the order they were added (a counting sort by lane).
  laneCounts_.assign(lanes_.size() + 1, 0);
  for (const ScheduleOp& op : ops_) ++laneCounts_[op.lane + 1];
  for (size_t l = 0; l < lanes_.size(); ++l) {
    laneCounts_[l + 1] += laneCounts_[l];
    lanes_[l].begin = lanes_[l].end = laneCounts_[l];
  }
  laneOps_.resize(ops_.size());
  for (uint32_t i = 0; i < ops_.size(); ++i) laneOps_[lanes_[ops_[i].lane].end++] = i;
  // Dependencies grouped by the waiting operation, in the order they were added.
  laneCounts_.assign(ops_.size() + 1, 0);
  for (const ScheduleDep& d : deps_) {
    LOOM_CHECK_INTERNAL(d.op < ops_.size() && d.on < ops_.size() && d.op != d.on, "dependency ",
                        d.op, " on ", d.on, " is not between two operations");
    ++laneCounts_[d.op + 1];
  }
  for (size_t i = 0; i < ops_.size(); ++i) laneCounts_[i + 1] += laneCounts_[i];
  depScratch_.resize(deps_.size());
  for (size_t i = 0; i < ops_.size(); ++i) ops_[i].depBegin = ops_[i].depEnd = laneCounts_[i];
  for (const ScheduleDep& d : deps_) depScratch_[ops_[d.op].depEnd++] = d;
  deps_.swap(depScratch_);
  relays_ = aSendWaitsForAReceive();
  finished_ = true;
}

bool Schedule::aSendWaitsForAReceive() {
  // Marks what received bytes feed: receives, and local or device work that waits for a marked
  // operation (a copy or reduction between a receive and the send). Passes until nothing changes:
  // builders mostly make operations wait for earlier ones, so one pass marks nearly all.
  std::vector<uint32_t>& fed = laneCounts_;  // finish()'s scratch, free again here
  fed.assign(ops_.size(), 0);
  for (bool changed = true; changed;) {
    changed = false;
    for (uint32_t i = 0; i < ops_.size(); ++i) {
      const ScheduleOp& op = ops_[i];
      if (fed[i] != 0) continue;
      bool fedHere = op.kind == OpKind::kRecv || op.kind == OpKind::kRecvReduce;
      for (uint32_t d = op.depBegin; d < op.depEnd && !fedHere; ++d)
        fedHere = fed[deps_[d].on] != 0;
      if (!fedHere) continue;
      if (op.kind == OpKind::kSend) return true;
      fed[i] = 1;
      changed = true;
    }
  }
  return false;
}

namespace {

uint64_t mix(uint64_t h, uint64_t v) {
  // FNV-1a over the value's bytes: stable across runs and ranks.
  for (int i = 0; i < 8; ++i) {
    h ^= (v >> (8 * i)) & 0xff;
    h *= 0x100000001b3ull;
  }
  return h;
}

std::string refText(const Schedule& s, BufferRef r) {
  return std::string(s.buffers()[r.buffer].name) + "+" + std::to_string(r.offset);
}

}  // namespace

uint64_t Schedule::hash() const {
  uint64_t h = 0xcbf29ce484222325ull;
  for (const ScheduleBuffer& b : buffers_) h = mix(h, b.bytes ^ static_cast<uint64_t>(b.staging));
  for (const ScheduleOp& op : ops_) {
    h = mix(h, static_cast<uint64_t>(op.kind) | static_cast<uint64_t>(op.lane) << 8 |
                   static_cast<uint64_t>(static_cast<uint32_t>(op.peer)) << 24 |
                   static_cast<uint64_t>(op.toOutput) << 56);
    h = mix(h, static_cast<uint64_t>(op.copyKind) | static_cast<uint64_t>(op.call) << 8);
    h = mix(h, op.dst.buffer | static_cast<uint64_t>(op.src.buffer) << 16);
    h = mix(h, op.dst.offset);
    h = mix(h, op.src.offset);
    h = mix(h, op.bytes);
    h = mix(h, static_cast<uint64_t>(op.reduction.dtype) |
                   static_cast<uint64_t>(op.reduction.op) << 8 |
                   static_cast<uint64_t>(op.reduction.accum + 1) << 16 |
                   static_cast<uint64_t>(op.reduction.divisor) << 32);
    for (uint32_t s = op.sourceBegin; s < op.sourceEnd; ++s)
      h = mix(h, sources_[s].buffer ^ sources_[s].offset << 16);
  }
  for (const ScheduleDep& d : deps_)
    h = mix(h, (d.op | static_cast<uint64_t>(d.on) << 32) ^ static_cast<uint64_t>(d.streamed));
  return h;
}

std::string Schedule::describe() const {
  std::ostringstream out;
  out << "schedule: " << ops_.size() << " ops, " << lanes_.size() << " lanes, buffers";
  for (const ScheduleBuffer& b : buffers_) out << " " << b.name << "(" << b.bytes << ")";
  out << ", hash " << std::hex << hash() << std::dec << "\n";
  for (const ScheduleLane& lane : lanes_) {
    out << "  lane "
        << (lane.kind == LaneKind::kSendTo     ? "send to "
            : lane.kind == LaneKind::kRecvFrom ? "recv from "
            : lane.kind == LaneKind::kLocal    ? "local "
                                               : "device ")
        << lane.peer << ":\n";
    for (uint32_t i = lane.begin; i < lane.end; ++i) {
      const uint32_t index = laneOps_[i];
      const ScheduleOp& op = ops_[index];
      out << "    #" << index << " " << opKindName(op.kind);
      if (op.kind == OpKind::kCall) out << " " << op.call;
      if (op.kind != OpKind::kCall && op.kind != OpKind::kGate) out << " " << op.bytes << " B";
      if (op.kind != OpKind::kSend && op.kind != OpKind::kCall && op.bytes > 0)
        out << " -> " << refText(*this, op.dst);
      if ((op.kind == OpKind::kSend || op.kind == OpKind::kCopy || op.kind == OpKind::kRecvReduce ||
           op.kind == OpKind::kDeviceCopy) &&
          op.bytes > 0)
        out << " from " << refText(*this, op.src);
      for (uint32_t s = op.sourceBegin; s < op.sourceEnd; ++s)
        out << (s == op.sourceBegin ? " from " : ", ") << refText(*this, sources_[s]);
      if (op.kind == OpKind::kRecvReduce || op.kind == OpKind::kReduce) {
        out << " (" << dtypeName(op.reduction.dtype) << " " << opName(op.reduction.op);
        if (op.reduction.divisor != 1) out << " /" << op.reduction.divisor;
        out << ")";
      }
      for (uint32_t d = op.depBegin; d < op.depEnd; ++d)
        out << (d == op.depBegin ? " after " : ", ") << (deps_[d].streamed ? "~#" : "#")
            << deps_[d].on;
      out << "\n";
    }
  }
  return out.str();
}

}  // namespace loom
