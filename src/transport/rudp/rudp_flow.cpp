#include "transport/rudp/rudp_flow.hpp"

#include <algorithm>
#include <cstring>

namespace loom::rudp {

namespace {
constexpr double kBeta = 0.7;  // the window after a loss episode (CUBIC's factor)
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

// ---------------------------------------------------------------- packets in

bool Flow::onPacket(const Header& h, std::span<const char> payload, uint64_t now) {
  lastHeard_ = now;
  probeCount_ = 0;
  nextProbe_ = 0;
  stats_.packetsReceived += 1;
  switch (h.type) {
    case PacketType::kData: {
      uint64_t before = rcvInOrderOff_;
      onData(h, payload.data(), payload.size(), now);
      return rcvInOrderOff_ != before;
    }
    case PacketType::kAck:
      onAck(h, payload, now);
      return false;
    case PacketType::kProbe:
      ackPending_ = true;
      return false;
    case PacketType::kReset:
      fail("its communicator failed and reset the connection");
      return false;
  }
  return false;
}

std::span<char> Flow::receiveSpace(uint64_t offset) {
  const size_t w = cfg_.windowBytes;
  if (failed() || offset < rcvFrontier_ || offset < rcvInOrderOff_ || offset >= rcvReadOff_ + w)
    return {};
  const uint64_t limit = rcvReadOff_ + w;
  if (posted() && offset >= post_.begin && offset < post_.end)
    return {post_.dst + (offset - post_.begin), std::min(post_.end, limit) - offset};
  size_t pos = offset % w;
  uint64_t len = std::min<uint64_t>(limit - offset, w - pos);
  if (posted() && offset < post_.begin) len = std::min(len, post_.begin - offset);
  return {rcvRing_.data() + pos, len};
}

const char* Flow::placeOf(uint64_t offset, size_t n) const {
  if (posted() && offset < post_.end && offset + n > post_.begin) {
    if (offset < post_.begin || offset + n > post_.end) return nullptr;  // straddles an edge
    return post_.dst + (offset - post_.begin);
  }
  const size_t w = cfg_.windowBytes;
  size_t pos = offset % w;
  return pos + n <= w ? rcvRing_.data() + pos : nullptr;
}

void Flow::store(uint64_t offset, const char* src, size_t n) {
  const size_t w = cfg_.windowBytes;
  while (n > 0) {
    size_t len;
    if (posted() && offset >= post_.begin && offset < post_.end) {
      len = std::min<uint64_t>(n, post_.end - offset);
      std::memcpy(post_.dst + (offset - post_.begin), src, len);
    } else {
      size_t pos = offset % w;
      len = std::min<uint64_t>(n, w - pos);
      if (posted() && offset < post_.begin) len = std::min<uint64_t>(len, post_.begin - offset);
      std::memcpy(rcvRing_.data() + pos, src, len);
    }
    offset += len;
    src += len;
    n -= len;
  }
}

bool Flow::onDataInPlace(const Header& h, uint64_t now) {
  lastHeard_ = now;
  probeCount_ = 0;
  nextProbe_ = 0;
  stats_.packetsReceived += 1;
  stats_.inPlace += 1;
  uint64_t before = rcvInOrderOff_;
  onData(h, nullptr, h.payloadBytes, now);
  return rcvInOrderOff_ != before;
}

void Flow::onData(const Header& h, const char* payload, size_t bytes, uint64_t /*now*/) {
  const uint64_t s = h.seq;
  const size_t w = cfg_.windowBytes;
  // A failed flow stores nothing more: its reader may have given its buffer up.
  if (failed()) return;
  // Any data packet deserves an ACK, a duplicate most of all: it means our ACK was lost.
  ackPending_ = true;
  echo_ = h.tsval;
  if (s == 0 || s < rcvNxt_ || slots_[s % maxPkts_].seq == s) {
    stats_.duplicates += 1;
    return;
  }
  // Beyond what the sender may have in flight, or outside the ring: not a packet of this stream.
  if (s >= rcvNxt_ + maxPkts_ || h.offset < rcvInOrderOff_ || h.offset + bytes > rcvReadOff_ + w) {
    stats_.refused += 1;
    return;
  }
  if (payload != nullptr) store(h.offset, payload, bytes);
  slots_[s % maxPkts_] = {s, h.offset, h.offset + bytes};
  rcvFrontier_ = std::max(rcvFrontier_, h.offset + bytes);
  if (s != rcvNxt_) stats_.outOfOrder += 1;
  rcvHighest_ = std::max(rcvHighest_, s);
  while (slots_[rcvNxt_ % maxPkts_].seq == rcvNxt_) {
    const Slot& slot = slots_[rcvNxt_ % maxPkts_];
    // Packets tile the stream; only a broken or hostile peer could say otherwise.
    if (slot.offset != rcvInOrderOff_) {
      fail("it sent packet " + std::to_string(rcvNxt_) + " at stream offset " +
           std::to_string(slot.offset) + " where " + std::to_string(rcvInOrderOff_) +
           " was expected");
      return;
    }
    rcvInOrderOff_ = slot.end;
    rcvNxt_ += 1;
  }
}

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
    if (h.tsecr != 0 && h.tsecr <= now) {
      uint64_t r = now - h.tsecr;  // our own clock, sent and echoed
      minRtt_ = std::min(minRtt_, r);
      if (!haveRtt_) {
        srtt_ = r;
        rttvar_ = r / 2;
        haveRtt_ = true;
      } else {
        uint64_t diff = srtt_ > r ? srtt_ - r : r - srtt_;
        rttvar_ = (3 * rttvar_ + diff) / 4;
        srtt_ = (7 * srtt_ + r) / 8;
      }
      rto_ = std::clamp(srtt_ + 4 * rttvar_, cfg_.rtoMinNs, cfg_.rtoMaxNs);
    }
    backoff_ = 0;
    tlpSent_ = false;
    rtoArmed_ = now;
    if (cwnd_ < ssthresh_)
      cwnd_ += static_cast<double>(newly);
    else
      cwnd_ += static_cast<double>(newly) / cwnd_;
    cwnd_ = std::min(cwnd_, static_cast<double>(maxPkts_));
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

void Flow::enterRecovery() {
  if (recovery_) return;  // one reduction per episode: a burst of losses is one signal
  recovery_ = true;
  recoveryEnd_ = sndNxt_;
  // Back off, then regrow at slow-start speed to where the window was (about half an RTT), and
  // probe beyond it additively: on a fabric that drops at random a loss is not a full queue,
  // and a window that takes hundreds of RTTs to regrow (Reno) would make 1 % loss cost most of the
  // throughput; a real bottleneck still sees the window dip at every episode and stop growing.
  ssthresh_ = cwnd_;
  cwnd_ = std::max(cwnd_ * kBeta, static_cast<double>(cfg_.minCwnd));
  // RFC 8985's reo_wnd_persist: reordering not seen again for 16 episodes is over.
  if (pathReordering_ && ++quietEpisodes_ >= 16) pathReordering_ = false;
}

// ---------------------------------------------------------------- the in-flight list

void Flow::listRemove(uint64_t seq) {
  Sent& p = sent(seq);
  if (p.prev >= 0)
    sent_[p.prev].next = p.next;
  else
    head_ = p.next;
  if (p.next >= 0)
    sent_[p.next].prev = p.prev;
  else
    tail_ = p.prev;
  p.prev = p.next = -1;
  p.inList = false;
  inFlight_ -= 1;
}

void Flow::listAppend(uint64_t seq) {
  int32_t idx = static_cast<int32_t>(seq % maxPkts_);
  Sent& p = sent_[idx];
  p.prev = tail_;
  p.next = -1;
  if (tail_ >= 0)
    sent_[tail_].next = idx;
  else
    head_ = idx;
  tail_ = idx;
  p.inList = true;
  inFlight_ += 1;
}

// ---------------------------------------------------------------- packets out

uint64_t Flow::effectiveRto() const {
  uint64_t r = rto_;
  for (uint32_t i = 0; i < backoff_ && r < cfg_.rtoMaxNs; ++i) r *= 2;
  return std::min(r, cfg_.rtoMaxNs);
}

bool Flow::probing() const {
  // Nothing in flight whose ACK would tell us the peer lives, yet we wait on it: for data
  // (receiving) or for room in its window (sending).
  if (inFlight_ > 0 || !lost_.empty()) return false;
  bool windowBlocked = sndNewOff_ < sndQueuedOff_ && sndNewOff_ >= peerLimit_;
  return recvWaiting_ || windowBlocked;
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
    room -= 1;
  }
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
      return out.size() - start;
    }
    stats_.retransmits += 1;
    transmit(seq, now, out);
    room -= 1;
  }
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
  if (room > 0 && probing()) {
    if (nextProbe_ == 0) nextProbe_ = std::max(lastHeard_ + effectiveRto(), now);
    if (now >= nextProbe_) {
      if (probeCount_ >= cfg_.maxRetries) {
        fail("it answered none of " + std::to_string(probeCount_) +
             " probes: the peer is unreachable");
        return out.size() - start;
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
  } else if (!probing()) {
    nextProbe_ = 0;
    probeCount_ = 0;
  }
  return out.size() - start;
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

FlowStats Flow::stats() const {
  FlowStats s = stats_;
  s.srttNs = srtt_;
  s.rttvarNs = rttvar_;
  s.rtoNs = effectiveRto();
  s.cwnd = cwnd_;
  return s;
}

}  // namespace loom::rudp
