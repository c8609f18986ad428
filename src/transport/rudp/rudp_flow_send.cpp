// Packets out: what collect() hands the engine (the ACK, retransmissions, new data, probes) and
// when the flow wants to be called again.
#include <algorithm>

#include "transport/rudp/rudp_flow.hpp"

namespace loom::rudp {

bool Flow::probing() const {
  // Nothing in flight whose ACK would tell us the peer lives, yet we wait on it: for data
  // (receiving) or for room in its window (sending).
  if (inFlight_ > 0 || !lost_.empty()) return false;
  bool windowBlocked = sndNewOff_ < sndQueuedOff_ && sndNewOff_ >= peerLimit_;
  return recvWaiting_ || windowBlocked;
}

void Flow::transmit(uint64_t seq, uint64_t now, std::vector<Outgoing>& out) {
  Sent& p = sent(seq);
  p.tx += 1;
  p.lastSent = now;
  p.lost = false;
  p.path = currentPath();
  pathSent_ += 1;
  listAppend(seq);
  Outgoing o;
  o.h.type = PacketType::kData;
  o.h.path = p.path;
  o.h.seq = seq;
  o.h.offset = p.offset;
  o.h.tsval = now;
  sendingFrom_ = std::min(sendingFrom_, p.offset);
  o.payload = {sndRing_.at(p.offset), p.len};
  o.headroom = sndRing_.headroomOf(p.offset);
  out.push_back(o);
  stats_.packetsSent += 1;
  stats_.bytesSent += p.len;
}

size_t Flow::collect(uint64_t now, std::vector<Outgoing>& out, size_t room) {
  sendingFrom_ = UINT64_MAX;  // a new round: what the last one handed out has been sent
  if (failed()) return 0;
  const size_t start = out.size();
  onTimers(now);
  if (ackPending_ && room > 0) {
    collectAck(now, out);
    room -= 1;
  }
  if (!collectLost(now, out, room)) return out.size() - start;
  collectNew(now, out, room);
  if (room > 0 && probing()) {
    collectProbe(now, out);
  } else if (!probing()) {
    nextProbe_ = 0;
    probeCount_ = 0;
  }
  return out.size() - start;
}

void Flow::collectAck(uint64_t now, std::vector<Outgoing>& out) {
  // The bitmap covers the packets between the cumulative ACK and the highest one received.
  sack_.clear();
  if (rcvHighest_ > rcvNxt_) {
    uint64_t span = rcvHighest_ - rcvNxt_;  // packets ack+1 .. highest
    sack_.assign((span + 63) / 64, 0);
    for (uint64_t i = 0; i < span; ++i) {
      uint64_t s = rcvNxt_ + 1 + i;
      if (slots_[s % maxPkts_].seq == s) sack_[i / 64] |= uint64_t{1} << (i % 64);
    }
  }
  Outgoing o;
  o.h.type = PacketType::kAck;
  o.h.path = currentPath();
  o.h.seq = rcvNxt_;
  o.h.offset = advertised_ = rcvReadOff_ + cfg_.windowBytes;
  o.h.tsval = now;
  o.h.tsecr = echo_;
  o.h.dupCount = stats_.duplicates;
  o.payload = {reinterpret_cast<const char*>(sack_.data()), sack_.size() * 8};
  out.push_back(o);
  ackPending_ = false;
}

bool Flow::collectLost(uint64_t now, std::vector<Outgoing>& out, size_t& room) {
  while (room > 0 && !lost_.empty() && (static_cast<double>(inFlight_) < cwnd_ || forceOne_)) {
    forceOne_ = false;
    // Lowest first: it holds back the cumulative ACK, and repeated timeouts retry it each time,
    // so its transmission count (the unreachable bound) counts timeouts.
    uint64_t seq = *lost_.begin();
    lost_.erase(lost_.begin());
    Sent& p = sent(seq);
    if (seq < sndUna_ || p.sacked || !p.lost) continue;
    if (p.tx > cfg_.maxRetries) {
      fail("packet " + std::to_string(seq) + " was not acknowledged after " + std::to_string(p.tx) +
           " transmissions: the peer is unreachable");
      return false;
    }
    stats_.retransmits += 1;
    transmit(seq, now, out);
    room -= 1;
  }
  return true;
}

void Flow::collectNew(uint64_t now, std::vector<Outgoing>& out, size_t& room) {
  while (room > 0 && lost_.empty() && static_cast<double>(inFlight_) < cwnd_ &&
         sndNewOff_ < sndQueuedOff_ && sndNewOff_ < peerLimit_ && sndNxt_ - sndUna_ < maxPkts_) {
    // Never across a slot of the send ring (a short packet's successor ends at the slot's end).
    uint64_t len = std::min<uint64_t>(
        {sndRing_.toSlotEnd(sndNewOff_), sndQueuedOff_ - sndNewOff_, peerLimit_ - sndNewOff_});
    uint64_t seq = sndNxt_++;
    Sent& p = sent(seq);
    p = Sent{};
    p.seq = seq;
    p.offset = sndNewOff_;
    p.len = static_cast<uint32_t>(len);
    sndNewOff_ += len;
    transmit(seq, now, out);
    room -= 1;
  }
}

void Flow::collectProbe(uint64_t now, std::vector<Outgoing>& out) {
  if (nextProbe_ == 0) nextProbe_ = std::max(lastHeard_ + effectiveRto(), now);
  if (now >= nextProbe_) {
    if (probeCount_ >= cfg_.maxRetries) {
      fail("it answered none of " + std::to_string(probeCount_) +
           " probes: the peer is unreachable");
      return;
    }
    probeCount_ += 1;
    stats_.probes += 1;
    uint64_t interval = effectiveRto();
    for (uint32_t i = 0; i < probeCount_ && interval < cfg_.rtoMaxNs; ++i) interval *= 2;
    nextProbe_ = now + std::min(interval, cfg_.rtoMaxNs);
    Outgoing o;
    o.h.type = PacketType::kProbe;
    o.h.path = currentPath();
    o.h.tsval = now;
    out.push_back(o);
  }
}

bool Flow::wantsToSend() const {
  if (failed()) return false;
  if (ackPending_) return true;
  if (forceOne_ && !lost_.empty()) return true;
  if (static_cast<double>(inFlight_) >= cwnd_) return false;
  return !lost_.empty() ||
         (sndNewOff_ < sndQueuedOff_ && sndNewOff_ < peerLimit_ && sndNxt_ - sndUna_ < maxPkts_);
}

uint64_t Flow::nextTimer() const {
  if (failed()) return UINT64_MAX;
  uint64_t t = UINT64_MAX;
  t = rtoDeadline();
  if (reorderTimer_ != 0) t = std::min(t, reorderTimer_);
  if (lost_.empty()) t = std::min(t, probeTimeout());
  if (probing()) t = std::min(t, nextProbe_ == 0 ? lastHeard_ + effectiveRto() : nextProbe_);
  return t;
}

}  // namespace loom::rudp
