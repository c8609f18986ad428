// ACKs in: the cumulative ACK and the SACK bitmap deliver packets, which feeds RACK's state
// (rudp_flow_loss.cpp), the RTT estimate and the congestion window (rudp_flow_congestion.cpp).
#include <algorithm>
#include <cstring>

#include "transport/rudp/rudp_flow.hpp"

namespace loom::rudp {

void Flow::onAck(const Header& h, std::span<const char> sack, uint64_t now) {
  const uint64_t ack = h.seq;
  if (ack < sndUna_ || ack > sndNxt_) return;  // stale (reordered, replayed) or bogus
  peerLimit_ = std::max(peerLimit_, h.offset);
  if (h.dupCount > peerDups_) {
    // The receiver saw duplicates: some "loss" was reordering; be slower to call the next one.
    // Unless probes and timeouts explain them: those resend what may well have arrived.
    const uint64_t dups = h.dupCount - peerDups_;
    peerDups_ = h.dupCount;
    if (dups > probeRetx_) {
      reoMult_ = std::min<uint32_t>(reoMult_ + 1, 16);
      notePathReordering();
    }
    probeRetx_ -= std::min(dups, probeRetx_);
  }
  uint64_t newly = 0;
  for (uint64_t s = sndUna_; s < ack; ++s) {
    Sent& p = sent(s);
    if (!p.sacked) {
      delivered(s, h.tsecr, now);
      newly += 1;
    }
    if (p.inList) listRemove(s);
    sndAckedOff_ = p.offset + p.len;
  }
  sndUna_ = ack;
  const size_t words = sack.size() / 8;
  for (size_t wi = 0; wi < words; ++wi) {
    uint64_t bits;
    std::memcpy(&bits, sack.data() + 8 * wi, 8);
    while (bits != 0) {
      int b = __builtin_ctzll(bits);
      bits &= bits - 1;
      uint64_t s = ack + 1 + 64 * wi + static_cast<uint64_t>(b);  // the bit's meaning, as set
      if (s >= sndNxt_) break;
      Sent& p = sent(s);
      if (p.sacked) continue;
      p.sacked = true;
      if (p.inList) listRemove(s);
      delivered(s, h.tsecr, now);
      newly += 1;
    }
  }
  if (newly > 0) {
    if (h.tsecr != 0 && h.tsecr <= now) sampleRtt(now - h.tsecr);  // our own clock, sent and echoed
    backoff_ = 0;
    tlpSent_ = false;
    rtoArmed_ = now;
    growWindow(newly);
  }
  if (recovery_ && sndUna_ >= recoveryEnd_) recovery_ = false;
  // Acknowledged without a duplicate reported: those probes repaired losses, and explain no
  // later duplicates.
  if (sndUna_ > probeHigh_) probeRetx_ = 0;
  detectLosses(now);
}

void Flow::delivered(uint64_t seq, uint64_t tsecr, uint64_t now) {
  Sent& p = sent(seq);
  // An ACK for an earlier transmission of a retransmitted packet says nothing about the last one.
  if (p.tx > 1 && tsecr < p.lastSent) return;
  if (!sentBefore(p, rackXmit_, rackSeq_)) {
    rackXmit_ = p.lastSent;
    rackSeq_ = seq;
    rackRtt_ = now - p.lastSent;
  }
  // A first transmission below one of its path already delivered: that path reorders.
  if (p.tx == 1 && seq < pathFack_[p.path]) notePathReordering();
  pathFack_[p.path] = std::max(pathFack_[p.path], seq);
  if (!sentBefore(p, pathXmit_[p.path], pathSeq_[p.path])) {
    pathXmit_[p.path] = p.lastSent;
    pathSeq_[p.path] = seq;
    pathRtt_[p.path] = now - p.lastSent;
  }
}

}  // namespace loom::rudp
