// One reliable, ordered byte stream in each direction between two ranks over datagrams: the
// protocol logic of the rudp transport, without sockets, threads or clocks (the caller passes the
// time), so that tests can drive it over a simulated link.
//
// Sender: bytes written go into a bounded ring (a full ring makes write() take nothing: the
// caller waits, nothing is dropped), laid out as datagrams (rudp_send_ring.hpp). They leave as
// packets of at most mss bytes, none across a slot of that ring, numbered from 1,
// each remembered with its stream offset, its last transmission time and its transmission count.
// An ACK carries the next expected packet number (cumulative) and a bitmap of the packets beyond
// it that arrived (bit i = packet ack + 1 + i); it echoes the sender's own timestamp, so an RTT
// sample never mixes two hosts' clocks (RFC 6298: SRTT, RTTVAR, RTO = SRTT + 4 RTTVAR, clamped,
// doubled on each timeout). Loss is found by time (RACK, RFC 8985): a packet is lost when one sent
// later has been delivered and more than an RTT (the delivered packet's, or its own path's if that
// lags more) plus a reordering window has passed since it was sent; the window (min RTT / 4,
// 100 us at least, capped by SRTT) grows when the receiver reports duplicates, i.e. when a loss
// was a reordering. The flow spreads its packets over the engine's paths in flowlets and
// remembers each packet's path. One path delivers in order (measured between two namespace nodes:
// none of 155 000 packets overtaken within a path, 21 000 across paths), so a delivered later
// packet of the same path means loss after a small window (RFC 8985's min RTT / 4) instead of the
// large one that reordering across paths needs; until a path is seen reordering (a first
// transmission delivered after a later one of its path, or duplicates that no probe explains),
// and again after 16 loss episodes without it. A retransmission timeout (no ACK of new data for
// an RTO) sends the lowest unacknowledged packet again and backs off, without presuming the rest
// lost. The congestion window (packets in flight) shrinks x0.7 once per loss episode (never below
// a floor), regrows at slow-start speed to its size before the loss, then additively. A packet
// sent more than maxRetries + 1 times, or a silent peer that ignores as many probes, fails the
// flow: every later call reports the peer unreachable.
//
// Receiver: packets land in a ring at their stream offset, whatever order they come in; packets
// already received are duplicates and only counted; the in-order prefix is readable. The ACK's
// receive limit (offset) is flow control: the sender never sends beyond it.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <set>
#include <span>
#include <string>
#include <vector>

#include "transport/rudp/rudp_packet.hpp"
#include "transport/rudp/rudp_send_ring.hpp"

namespace loom::rudp {

struct FlowConfig {
  size_t windowBytes = 4 << 20;  // each of the send and receive rings
  size_t mss = 1400;             // payload bytes of a data packet
  uint32_t maxRetries = 15;      // retransmissions of one packet (and unanswered probes)
  uint64_t rtoInitNs = 10'000'000;
  // Well above the scheduling jitter of a loaded host: RACK and the tail loss probe find losses
  // within an RTT or two; the timeout is the last resort and the liveness bound.
  uint64_t rtoMinNs = 10'000'000;
  uint64_t rtoMaxNs = 1'000'000'000;
  uint32_t initialCwnd = 64;  // packets
  uint32_t minCwnd = 16;
  // The sockets a flow's packets are spread over, a flowlet of this many packets on each in turn.
  uint32_t paths = 1;
  uint32_t flowletPackets = 704;
  // The smallest reordering window between packets of one path (RFC 8985's is min RTT / 4).
  uint64_t pathReorderFloorNs = 50'000;
};

struct FlowStats {
  uint64_t packetsSent = 0, bytesSent = 0, retransmits = 0, timeouts = 0, probes = 0;
  uint64_t packetsReceived = 0, duplicates = 0, outOfOrder = 0, refused = 0;
  uint64_t inPlace = 0;       // data packets the kernel wrote straight into the receive ring
  uint64_t pathLosses = 0;    // losses found by a later packet of their path (the small window)
  uint64_t pathReorders = 0;  // times a path was seen reordering (back to the large window)
  uint64_t srttNs = 0, rttvarNs = 0, rtoNs = 0;
  double cwnd = 0;
};

// A datagram the flow wants sent, on path h.path; the engine adds the identity fields and the MAC.
struct Outgoing {
  Header h;
  std::span<const char> payload;  // in the flow's rings: valid until the flow is next touched
  // kHeaderBytes of free room right before payload (a data packet that starts a send-ring slot),
  // where the engine may write the header so that header and payload are one buffer; else null.
  char* headroom = nullptr;
};

class Flow {
 public:
  explicit Flow(const FlowConfig& config);

  // ---- user side ----
  // Copies up to n bytes (zeros if src is null) into the send ring; returns how many fit.
  size_t write(const void* src, size_t n);
  // write() in three steps, so that the copy needs no lock (the flow's one writer): with the
  // lock, writable() bytes from queuedEnd() on are granted; without it, copyIn() fills them (no
  // other thread touches ring bytes beyond queuedEnd()); with it again, commitWrite() queues them.
  uint64_t queuedEnd() const { return sndQueuedOff_; }
  void copyIn(uint64_t at, const void* src, size_t n);
  void commitWrite(size_t n) { sndQueuedOff_ += n; }
  // The contiguous in-order bytes ready to read, at most maxBytes.
  std::span<const char> readable(size_t maxBytes) const;
  // In-order bytes received and not yet consumed.
  uint64_t readableBytes() const { return rcvInOrderOff_ - rcvReadOff_; }
  // Releases n read bytes; true when the peer should hear about the larger window now.
  bool consume(size_t n);
  // Receiving straight into the caller's buffer: the next `bytes` stream bytes from the read
  // offset on belong at dst onwards; those beyond every byte received so far are written there
  // when they arrive (by a copy or by the kernel, see receiveSpace) instead of into the ring.
  // Does nothing while one is posted, a train is being placed, the flow failed, or too few bytes
  // are left to be worth it. Released when the read offset passes its end, or by unpost().
  void post(char* dst, size_t bytes);
  void unpost() { post_ = {}; }
  // The caller gives the posted buffer up (its call fails): no more writes into it, and none of
  // the bytes that went there can be read from the ring either. With fail().
  void abandonPost();
  bool posted() const { return post_.dst != nullptr; }
  // In-order bytes from the read offset on that already lie in the posted buffer (readable()
  // does not show them: consume() them).
  size_t readableDirect() const;
  // The engine is letting the kernel write a train into this flow's space: post() must wait.
  void setPlacing(bool placing) { placing_ = placing; }
  bool placing() const { return placing_; }
  // A reader found nothing: from now on a silent peer is probed (and eventually declared dead).
  void setReceiveWaiting(bool waiting) { recvWaiting_ = waiting; }

  bool failed() const { return !failure_.empty(); }
  const std::string& failure() const { return failure_; }
  void fail(const std::string& why) {
    if (failure_.empty()) failure_ = why;
  }

  // ---- network side ----
  // An authenticated packet of this flow arrived. Returns true when new bytes became readable.
  bool onPacket(const Header& h, std::span<const char> payload, uint64_t now);
  // Space no packet has filled yet, from stream offset `offset` on, where those bytes belong (the
  // ring, or the posted buffer): contiguous, up to the ring's end, the posted buffer's start or
  // end, or the receive limit; empty when offset lies below what arrived or beyond the limit.
  // The engine lets the kernel write a datagram train's payloads there (other bytes than the
  // expected ones only ever land in space nobody reads).
  std::span<char> receiveSpace(uint64_t offset);
  // Where the stream bytes [offset, offset + n) belong, when that is one contiguous piece of
  // memory; null when not.
  const char* placeOf(uint64_t offset, size_t n) const;
  // An authenticated data packet whose payload already lies where it belongs (placeOf). Returns
  // true when new bytes became readable.
  bool onDataInPlace(const Header& h, uint64_t now);
  // Appends at most `room` datagrams to send now (ACK, retransmissions, new data, probes).
  size_t collect(uint64_t now, std::vector<Outgoing>& out, size_t room);
  // When collect() should run again at the latest; UINT64_MAX when nothing is pending.
  uint64_t nextTimer() const;
  // Whether collect() has something to send right now (new data, lost packets, an ACK).
  bool wantsToSend() const;
  // Everything written has been acknowledged.
  bool drained() const { return sndUna_ == sndNxt_ && sndNewOff_ == sndQueuedOff_; }
  // Free space in the send ring: beyond what is unacknowledged, or being sent (sendDone()).
  size_t writable() const {
    return sndRing_.capacity() - (sndQueuedOff_ - std::min(sndAckedOff_, sendingFrom_));
  }
  // The engine has sent what collect() handed out: its ring bytes may be reused once acknowledged.
  // Until then (or the next collect()) they stay put even if an ACK arrives meanwhile (the engine
  // reads them unlocked: a retransmission collected just before the ACK of the original must not
  // go out overwritten).
  void sendDone() { sendingFrom_ = UINT64_MAX; }
  FlowStats stats() const;

 private:
  struct Sent {
    uint64_t seq = 0;
    uint64_t offset = 0;
    uint64_t lastSent = 0;
    uint32_t len = 0;
    uint32_t tx = 0;
    bool sacked = false;
    bool lost = false;
    uint8_t path = 0;
    int32_t prev = -1, next = -1;  // the in-flight list, oldest transmission first
    bool inList = false;
  };
  struct Slot {
    uint64_t seq = 0;  // which packet this slot holds (0: none yet)
    uint64_t offset = 0;
    uint64_t end = 0;  // its end offset in the stream
  };

  static FlowConfig sanitized(FlowConfig c);
  Sent& sent(uint64_t seq) { return sent_[seq % maxPkts_]; }
  void listRemove(uint64_t seq);
  void listAppend(uint64_t seq);
  void onAck(const Header& h, std::span<const char> sack, uint64_t now);
  // payload is null when the bytes already lie where they belong.
  void onData(const Header& h, const char* payload, size_t bytes, uint64_t now);
  // Copies stream bytes [offset, offset + n) where they belong: ring (wrapping) or posted buffer.
  void store(uint64_t offset, const char* src, size_t n);
  void delivered(uint64_t seq, uint64_t tsecr, uint64_t now);
  void detectLosses(uint64_t now);
  // Whether p left before the packet sent at xmit with number seq. One collect() stamps all its
  // packets with one time and sends them in packet-number order (retransmissions, lowest first,
  // then new data), so the number breaks ties (RFC 8985 does the same with end sequence numbers):
  // without it, a packet lost among others of its burst was found only by a probe or a timeout.
  static bool sentBefore(const Sent& p, uint64_t xmit, uint64_t seq) {
    return p.lastSent < xmit || (p.lastSent == xmit && p.seq < seq);
  }
  void markLost(uint64_t seq);
  // An RTT sample r of our own clock (sent and echoed): SRTT, RTTVAR and RTO (RFC 6298).
  void sampleRtt(uint64_t r);
  // An ACK delivered `newly` packets: the congestion window grows.
  void growWindow(uint64_t newly);
  void enterRecovery();
  void onTimers(uint64_t now);
  uint64_t effectiveRto() const;
  uint64_t rtoDeadline() const;   // UINT64_MAX when nothing is in flight
  uint64_t probeTimeout() const;  // when the tail loss probe is due (UINT64_MAX: not armed)
  uint64_t reorderWindow() const;
  uint64_t pathReorderWindow() const;
  // A path delivered out of order, or a retransmission was needless: losses within a path wait
  // the large window too, for 16 loss episodes.
  void notePathReordering();
  uint8_t currentPath() const {
    return static_cast<uint8_t>(pathSent_ / cfg_.flowletPackets % cfg_.paths);
  }
  bool probing() const;
  void transmit(uint64_t seq, uint64_t now, std::vector<Outgoing>& out);
  // collect()'s parts, in its order; those given `room` take from it what they append.
  // collectLost() is false when a packet ran out of transmissions (the flow failed: nothing more
  // is sent).
  void collectAck(uint64_t now, std::vector<Outgoing>& out);
  bool collectLost(uint64_t now, std::vector<Outgoing>& out, size_t& room);
  void collectNew(uint64_t now, std::vector<Outgoing>& out, size_t& room);
  void collectProbe(uint64_t now, std::vector<Outgoing>& out);

  FlowConfig cfg_;
  uint64_t maxPkts_;
  std::string failure_;
  FlowStats stats_;

  // Sender.
  SendRing sndRing_;
  uint64_t sndAckedOff_ = 0, sndQueuedOff_ = 0, sndNewOff_ = 0;
  uint64_t sendingFrom_ = UINT64_MAX;  // lowest offset handed out by collect(), until sendDone()
  uint64_t sndUna_ = 1, sndNxt_ = 1;
  std::vector<Sent> sent_;
  int32_t head_ = -1, tail_ = -1;  // slots of the in-flight list
  uint64_t inFlight_ = 0;
  std::set<uint64_t> lost_;  // packet numbers to send again
  uint64_t peerLimit_;       // the peer's receive limit (stream offset)
  double cwnd_, ssthresh_ = 1e18;
  bool recovery_ = false;
  uint64_t recoveryEnd_ = 0;
  bool haveRtt_ = false;
  uint64_t srtt_ = 0, rttvar_ = 0, rto_, minRtt_ = UINT64_MAX;
  uint32_t backoff_ = 0;
  uint64_t rtoArmed_ = 0;
  bool forceOne_ = false;  // a timeout or tail probe sends one packet whatever the window says  //
                           // the last ACK of new data or timeout
  bool tlpSent_ = false;   // one tail loss probe per flight, re-armed by an ACK of new data
  // RACK: the send time and packet number of the latest-sent delivered packet, and its RTT.
  uint64_t rackXmit_ = 0, rackSeq_ = 0, rackRtt_ = 0, reorderTimer_ = 0;
  uint64_t peerDups_ = 0;
  uint32_t reoMult_ = 1;
  static constexpr uint32_t kMaxPaths = 16;
  // Per path: RACK's send time, packet number and RTT of the latest-sent delivered packet, and
  // the highest packet number delivered (a first transmission below it came out of order).
  uint64_t pathXmit_[kMaxPaths] = {}, pathSeq_[kMaxPaths] = {}, pathRtt_[kMaxPaths] = {};
  uint64_t pathFack_[kMaxPaths] = {};
  uint64_t pathSent_ = 0;        // data packets sent: the flowlet, so the path, of the next one
  bool pathReordering_ = false;  // seen lately: losses within a path wait the large window too
  uint32_t quietEpisodes_ = 0;   // loss episodes since pathReordering_ was last set
  // Tail probe and timeout retransmissions not yet matched by duplicates, up to packet probeHigh_.
  uint64_t probeRetx_ = 0, probeHigh_ = 0;

  // Receiver.
  std::vector<char> rcvRing_;
  uint64_t rcvReadOff_ = 0, rcvInOrderOff_ = 0, rcvNxt_ = 1, rcvHighest_ = 0;
  uint64_t rcvFrontier_ = 0;  // the end of the furthest packet received: beyond it, free space
  struct Posted {
    char* dst = nullptr;  // holds stream bytes [begin, end)
    uint64_t begin = 0, end = 0;
  } post_;
  bool placing_ = false;
  uint64_t advertised_ = 0;
  std::vector<Slot> slots_;
  bool ackPending_ = false;
  uint64_t echo_ = 0;
  std::vector<uint64_t> sack_;

  // Liveness.
  bool recvWaiting_ = false;
  uint64_t lastHeard_ = 0, nextProbe_ = 0;
  uint32_t probeCount_ = 0;
};

// The in-flight list, inline: every ACK (rudp_flow_ack.cpp), loss (rudp_flow_loss.cpp) and
// transmission (rudp_flow_send.cpp) changes it.
inline void Flow::listRemove(uint64_t seq) {
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

inline void Flow::listAppend(uint64_t seq) {
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

}  // namespace loom::rudp
