// Loss detection: RACK (RFC 8985) by time, with a small reordering window within a path and a
// large one across paths, and the timers: retransmission timeout and tail loss probe.
#include <algorithm>

#include "transport/rudp/rudp_flow.hpp"

namespace loom::rudp {

namespace {
// The smallest reordering window across paths. It was 1 ms: every loss not found by a later
// packet of its own path (or any loss, once a path had reordered) then waited a millisecond, and
// a 1 MiB allreduce at 1 % loss between two namespace nodes took 806-885 us a call instead of
// 535-625 (400 calls, A/B interleaved; TCP 479-531), while needless retransmissions stayed rare
// at 100 us (16-21 duplicates in 600 000 packets at 1 % loss, 10 at none). A path that lags is
// expected late by its own RTT.
constexpr uint64_t kMinReorderNs = 100'000;
// The window for a packet on a path no RTT was measured on yet (its lag is unknown).
constexpr uint64_t kUnknownPathNs = 1'000'000;
}  // namespace

void Flow::notePathReordering() {
  if (!pathReordering_) stats_.pathReorders += 1;
  pathReordering_ = true;
  quietEpisodes_ = 0;
}

uint64_t Flow::pathReorderWindow() const {
  // RFC 8985's min RTT / 4 (with a floor), capped by SRTT: in-order delivery is the rule here,
  // the window only covers the scheduling of the sender's and receiver's threads.
  if (pathReordering_) return reorderWindow();
  uint64_t w = minRtt_ == UINT64_MAX ? cfg_.pathReorderFloorNs
                                     : std::max(minRtt_ / 4, cfg_.pathReorderFloorNs);
  return haveRtt_ ? std::min(w, std::max(srtt_, cfg_.pathReorderFloorNs)) : w;
}

uint64_t Flow::reorderWindow() const {
  // RFC 8985's window, min RTT / 4, grown by the multiplier each time the receiver reports
  // duplicates (a "loss" was a reordering), capped by SRTT. With a floor (kMinReorderNs): the
  // receiver drains its path sockets a batch at a time and shares cores with the ranks; and the
  // base is at least a quarter of that floor so that the multiplier can lift the window above it
  // when the host stalls longer.
  uint64_t base = minRtt_ == UINT64_MAX ? cfg_.rtoMinNs : std::max(minRtt_ / 4, kMinReorderNs / 4);
  uint64_t cap = haveRtt_ ? srtt_ : cfg_.rtoInitNs;
  return std::max<uint64_t>(kMinReorderNs, std::min<uint64_t>(base * reoMult_, cap));
}

void Flow::detectLosses(uint64_t now) {
  reorderTimer_ = 0;
  const uint64_t reo = reorderWindow(), pathReo = pathReorderWindow();
  // Oldest transmission first; only those sent before a delivered packet can be lost (the rest
  // of the list is what was sent since), i.e. the holes.
  for (int32_t i = head_; i >= 0;) {
    const Sent& p = sent_[i];
    i = p.next;
    if (!sentBefore(p, rackXmit_, rackSeq_)) break;  // nothing sent after it was delivered yet
    // Expected back after its own path's RTT, not the delivered packet's: a path that lags
    // (longer, or more loaded) is late, not lossy.
    const uint64_t expected = std::max(rackRtt_, pathRtt_[p.path]);
    const uint64_t reoHere = pathRtt_[p.path] == 0 ? std::max(reo, kUnknownPathNs) : reo;
    uint64_t deadline = p.lastSent + expected + reoHere;
    if (sentBefore(p, pathXmit_[p.path], pathSeq_[p.path])) {
      // A later packet of its own path arrived: a much smaller window.
      deadline = std::min(deadline, p.lastSent + pathRtt_[p.path] + pathReo);
    }
    if (deadline > now) {
      if (reorderTimer_ == 0 || deadline < reorderTimer_) reorderTimer_ = deadline;
      continue;
    }
    if (p.lastSent + expected + reoHere > now) stats_.pathLosses += 1;
    markLost(p.seq);
  }
}

void Flow::markLost(uint64_t seq) {
  Sent& p = sent(seq);
  if (p.inList) listRemove(seq);
  if (!p.lost) {
    p.lost = true;
    lost_.insert(seq);
  }
  enterRecovery();
}

uint64_t Flow::effectiveRto() const {
  uint64_t r = rto_;
  for (uint32_t i = 0; i < backoff_ && r < cfg_.rtoMaxNs; ++i) r *= 2;
  return std::min(r, cfg_.rtoMaxNs);
}

uint64_t Flow::rtoDeadline() const {
  // RFC 6298 5.3: the timer restarts whenever an ACK delivers new data (and when it fires), so
  // a long flight that is being acknowledged never times out.
  if (head_ < 0) return UINT64_MAX;
  return std::max(sent_[head_].lastSent, rtoArmed_) + effectiveRto();
}

void Flow::onTimers(uint64_t now) {
  if (rtoDeadline() <= now) {
    // No progress for a whole RTO: send the oldest packet again and back off; do not presume the
    // whole flight lost. A late ACK (scheduling stalls on a loaded host look just like this)
    // then costs one packet; a real loss is found by RACK once the retransmission is delivered.
    // The lowest unacknowledged packet, as TCP does: it holds back the cumulative ACK, and every
    // timeout retries the same one, so its transmission count is the unreachable bound.
    stats_.timeouts += 1;
    uint64_t seq = sndUna_;
    while (seq < sndNxt_ && sent(seq).sacked) ++seq;
    const uint64_t resend = seq < sndNxt_ ? seq : sent_[head_].seq;
    markLost(resend);
    probeRetx_ += 1;
    probeHigh_ = std::max(probeHigh_, resend);
    forceOne_ = true;  // the rest of the flight still counts against the window
    backoff_ += 1;
    rtoArmed_ = now;
  }
  if (reorderTimer_ != 0 && reorderTimer_ <= now) detectLosses(now);
  if (tail_ >= 0 && !tlpSent_ && lost_.empty() && now >= probeTimeout()) {
    // Tail loss probe: the last packet of a message has nothing behind it whose delivery could
    // expose its loss; send it again after two RTTs instead of waiting for the RTO. A probe is
    // not a loss signal, so the congestion window stays.
    Sent& p = sent_[tail_];
    listRemove(p.seq);
    p.lost = true;
    lost_.insert(p.seq);
    tlpSent_ = true;
    probeRetx_ += 1;
    probeHigh_ = std::max(probeHigh_, p.seq);
    forceOne_ = true;
  }
}

uint64_t Flow::probeTimeout() const {
  // Not after a timeout (backoff_ > 0) until an ACK delivers new data: the backed-off timer
  // alone paces the retries to a silent peer.
  if (tail_ < 0 || tlpSent_ || backoff_ > 0) return UINT64_MAX;
  uint64_t pto = haveRtt_ ? std::max<uint64_t>(2 * srtt_, 200'000) : cfg_.rtoInitNs;
  return sent_[tail_].lastSent + std::min(pto, effectiveRto());
}

}  // namespace loom::rudp
