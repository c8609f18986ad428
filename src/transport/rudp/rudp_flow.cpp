// The flow's construction, its user side (its rings as the channel sees them) and its counters.
// The protocol's other parts are files of their own: packets in (rudp_flow_receive.cpp), ACKs in
// (rudp_flow_ack.cpp), loss detection and timers (rudp_flow_loss.cpp), RTT and the congestion
// window (rudp_flow_congestion.cpp), packets out (rudp_flow_send.cpp).
#include "transport/rudp/rudp_flow.hpp"

#include <algorithm>
#include <cstring>

namespace loom::rudp {

FlowConfig Flow::sanitized(FlowConfig c) {
  c.mss = std::clamp<size_t>(c.mss & ~size_t{7}, 8, kMaxPayload & ~size_t{7});
  c.minCwnd = std::max<uint32_t>(c.minCwnd, 1);
  c.paths = std::clamp<uint32_t>(c.paths, 1, kMaxPaths);
  c.flowletPackets = std::max<uint32_t>(c.flowletPackets, 1);
  return c;
}

Flow::Flow(const FlowConfig& config)
    : cfg_(sanitized(config)),
      maxPkts_(std::max<uint64_t>(1024, 2 * cfg_.windowBytes / cfg_.mss)),
      sndRing_(cfg_.windowBytes, cfg_.mss, kHeaderBytes),
      sent_(maxPkts_),
      peerLimit_(config.windowBytes),
      cwnd_(config.initialCwnd),
      rto_(config.rtoInitNs),
      rcvRing_(config.windowBytes),
      advertised_(config.windowBytes),
      slots_(maxPkts_) {}

// ---------------------------------------------------------------- user side

size_t Flow::write(const void* src, size_t n) {
  n = std::min(n, writable());
  copyIn(sndQueuedOff_, src, n);
  commitWrite(n);
  return n;
}

void Flow::copyIn(uint64_t at, const void* src, size_t n) {
  size_t done = 0;
  while (done < n) {
    const uint64_t o = at + done;
    const size_t len = std::min(n - done, sndRing_.toSlotEnd(o));
    if (src != nullptr)
      std::memcpy(sndRing_.at(o), static_cast<const char*>(src) + done, len);
    else
      std::memset(sndRing_.at(o), 0, len);
    done += len;
  }
}

std::span<const char> Flow::readable(size_t maxBytes) const {
  const size_t w = cfg_.windowBytes;
  size_t pos = rcvReadOff_ % w;
  uint64_t upTo = rcvInOrderOff_;
  if (posted() && rcvReadOff_ < post_.end) upTo = std::min(upTo, post_.begin);
  if (upTo <= rcvReadOff_) return {};
  size_t len = std::min<uint64_t>({upTo - rcvReadOff_, w - pos, maxBytes});
  return {rcvRing_.data() + pos, len};
}

void Flow::post(char* dst, size_t bytes) {
  // Below this a copy costs less than the bookkeeping.
  constexpr size_t kMinPost = 64 << 10;
  if (posted() || placing_ || failed()) return;
  const uint64_t begin = std::max(rcvReadOff_, rcvFrontier_), end = rcvReadOff_ + bytes;
  if (end < begin + kMinPost) return;
  post_ = {dst + (begin - rcvReadOff_), begin, end};
}

void Flow::abandonPost() {
  if (!posted()) return;
  rcvInOrderOff_ = std::max(rcvReadOff_, std::min(rcvInOrderOff_, post_.begin));
  unpost();
}

size_t Flow::readableDirect() const {
  if (!posted() || rcvReadOff_ < post_.begin || rcvReadOff_ >= post_.end) return 0;
  return std::min(rcvInOrderOff_, post_.end) - rcvReadOff_;
}

bool Flow::consume(size_t n) {
  rcvReadOff_ += std::min<uint64_t>(n, rcvInOrderOff_ - rcvReadOff_);
  if (posted() && rcvReadOff_ >= post_.end) unpost();  // all of it arrived: no more writes
  // Tell the peer once a quarter of the ring has opened up since the last advertisement.
  if (rcvReadOff_ + cfg_.windowBytes - advertised_ >= cfg_.windowBytes / 4 && !ackPending_) {
    ackPending_ = true;
    return true;
  }
  return false;
}

FlowStats Flow::stats() const {
  FlowStats s = stats_;
  s.srttNs = srtt_;
  s.rttvarNs = rttvar_;
  s.rtoNs = effectiveRto();
  s.cwnd = cwnd_;
  return s;
}

}  // namespace loom::rudp
