// The rudp protocol logic over a simulated link with a virtual clock: loss in both directions,
// loss on the ACK path only, reordering (random delay), duplication, a peer that goes silent,
// back-pressure of a small window, the SACK bitmap's meaning and RTT from echoed timestamps.
// Every run is deterministic (fixed seeds) and bounded (virtual time and iteration limits).
#include "transport/rudp/rudp_flow.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <functional>
#include <map>
#include <random>
#include <vector>

#include "transport/rudp/rudp_packet.hpp"

namespace loom::rudp {
namespace {

constexpr uint64_t kMs = 1'000'000;
const PacketKeys kKeys(MacKey{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16});
constexpr uint64_t kComm = 0xc0ffee;

struct LinkConfig {
  double loss = 0;  // probability a datagram is dropped
  double dup = 0;   // probability it is delivered twice
  uint64_t delayNs = 100'000;
  uint64_t jitterNs = 0;  // extra uniform random delay: reordering
  bool dead = false;      // drops everything
};

// One direction of the simulated network: datagrams are encoded and parsed for real.
class Link {
 public:
  Link(LinkConfig c, uint64_t seed) : cfg(c), rng_(seed) {}
  void send(const Outgoing& o, uint32_t src, uint32_t dst, uint64_t now) {
    if (cfg.dead || uniform() < cfg.loss) return;
    Header h = o.h;
    h.commId = kComm;
    h.src = src;
    h.dst = dst;
    std::vector<char> d(kHeaderBytes + o.payload.size());
    if (o.headroom != nullptr) {
      // As the engine does: the header goes into the send ring right before the payload, so
      // every test over this link also checks that doing so never overwrites bytes still owed.
      encodeHeader(h, kKeys, o.payload, o.headroom);
      std::memcpy(d.data(), o.headroom, d.size());
    } else {
      encodeHeader(h, kKeys, o.payload, d.data());
      // ACKs and probes carry no payload (and a null data pointer memcpy must not see).
      if (!o.payload.empty())
        std::memcpy(d.data() + kHeaderBytes, o.payload.data(), o.payload.size());
    }
    int copies = uniform() < cfg.dup ? 2 : 1;
    for (int i = 0; i < copies; ++i) {
      uint64_t jitter = cfg.jitterNs == 0 ? 0 : rng_() % cfg.jitterNs;
      queue_.emplace(now + cfg.delayNs + jitter, d);
    }
  }
  uint64_t nextArrival() const { return queue_.empty() ? UINT64_MAX : queue_.begin()->first; }
  // Delivers every datagram due by `now` to the flow; counts refused ones.
  void deliver(uint64_t now, uint32_t dst, Flow& flow) {
    while (!queue_.empty() && queue_.begin()->first <= now) {
      std::vector<char> d = std::move(queue_.begin()->second);
      queue_.erase(queue_.begin());
      Header h;
      std::span<const char> payload;
      ParseResult r = parseDatagram(d.data(), d.size(), kKeys, kComm, dst, h, payload);
      ASSERT_EQ(r, ParseResult::kOk);
      flow.onPacket(h, payload, now);
    }
  }
  LinkConfig cfg;

 private:
  double uniform() { return std::uniform_real_distribution<double>(0, 1)(rng_); }
  std::mt19937_64 rng_;
  std::multimap<uint64_t, std::vector<char>> queue_;
};

std::vector<char> pattern(size_t n, uint32_t seed) {
  std::vector<char> v(n);
  std::mt19937 rng(seed);
  for (char& c : v) c = static_cast<char>(rng());
  return v;
}

struct Endpoint {
  Flow flow;
  std::vector<char> out;  // what it sends
  size_t written = 0;
  std::vector<char> in;  // what it has received
};

struct Result {
  bool completed = false;
  uint64_t elapsedNs = 0;
};

// Runs both endpoints until each has received what the other sent, a flow fails, or the virtual
// time limit passes. Both directions carry data at once, so ACKs and data share each link.
// `reader`, when given, takes what an endpoint received instead of the plain readable() loop.
Result run(Endpoint& a, Endpoint& b, Link& ab, Link& ba, uint64_t limitNs, uint64_t start = 1,
           const std::function<void(Endpoint&)>& reader = {}) {
  uint64_t now = start;
  std::vector<Outgoing> out;
  auto pump = [&](Endpoint& e) {
    if (e.written < e.out.size())
      e.written += e.flow.write(e.out.data() + e.written, e.out.size() - e.written);
    if (reader) {
      reader(e);
      return;
    }
    for (;;) {
      std::span<const char> r = e.flow.readable(1 << 20);
      if (r.empty()) break;
      e.in.insert(e.in.end(), r.begin(), r.end());
      e.flow.consume(r.size());
    }
  };
  for (int iter = 0; iter < 50'000'000 && now < limitNs; ++iter) {
    ab.deliver(now, 1, b.flow);
    ba.deliver(now, 0, a.flow);
    pump(a);
    pump(b);
    bool aDone = a.in.size() >= b.out.size(), bDone = b.in.size() >= a.out.size();
    a.flow.setReceiveWaiting(!aDone);
    b.flow.setReceiveWaiting(!bDone);
    if (aDone && bDone && a.flow.drained() && b.flow.drained()) return {true, now};
    if (a.flow.failed() || b.flow.failed()) return {false, now};
    out.clear();
    a.flow.collect(now, out, 64);
    for (const Outgoing& o : out) ab.send(o, 0, 1, now);
    out.clear();
    b.flow.collect(now, out, 64);
    for (const Outgoing& o : out) ba.send(o, 1, 0, now);
    // Next event: an arrival, a timer, or (when a flow can send more) a short step.
    uint64_t next =
        std::min({ab.nextArrival(), ba.nextArrival(), a.flow.nextTimer(), b.flow.nextTimer()});
    if (a.flow.wantsToSend() || b.flow.wantsToSend()) next = std::min(next, now + 1000);
    now = std::max(next, now + 1);
  }
  return {false, now};
}

FlowConfig smallConfig() {
  FlowConfig c;
  c.windowBytes = 256 * 1024;
  c.mss = 1400;
  c.maxRetries = 40;  // 30 % loss both ways: a packet and its ACK both survive about half the time
  return c;
}

struct Case {
  double loss, dup;
  uint64_t jitterNs;
  double ackLoss;
};

void expectTransfer(Case c, size_t bytes, uint64_t seed) {
  FlowConfig cfg = smallConfig();
  Endpoint a{Flow(cfg), pattern(bytes, seed), 0, {}};
  Endpoint b{Flow(cfg), pattern(bytes + 13, seed + 1), 0, {}};
  LinkConfig l1{c.loss, c.dup, 100'000, c.jitterNs, false};
  LinkConfig l2{c.ackLoss, c.dup, 100'000, c.jitterNs, false};
  Link ab(l1, seed * 7 + 1), ba(l2, seed * 7 + 2);
  Result r = run(a, b, ab, ba, 600'000 * kMs);
  ASSERT_TRUE(r.completed) << "loss " << c.loss << " dup " << c.dup << ": " << a.flow.failure()
                           << b.flow.failure();
  EXPECT_EQ(b.in, a.out);
  EXPECT_EQ(a.in, b.out);
  FlowStats sa = a.flow.stats(), sb = b.flow.stats();
  if (c.loss > 0) {
    EXPECT_GT(sa.retransmits, 0u);
  }
  if (c.dup > 0) {
    EXPECT_GT(sb.duplicates, 0u);
  }
  EXPECT_GT(sa.srttNs, 0u);
}

TEST(RudpFlow, LossBothDirections) {
  for (double loss : {0.0, 0.01, 0.05, 0.1, 0.2, 0.3})
    expectTransfer({loss, 0, 0, loss}, 1 << 20, static_cast<uint64_t>(loss * 1000) + 3);
}

TEST(RudpFlow, LossOnTheAckPathOnly) { expectTransfer({0, 0, 0, 0.3}, 1 << 20, 11); }

TEST(RudpFlow, Duplication) { expectTransfer({0, 0.2, 0, 0}, 1 << 20, 12); }

TEST(RudpFlow, DuplicationReorderingAndLoss) {
  expectTransfer({0.05, 0.1, 2 * kMs, 0.05}, 1 << 20, 13);
}

TEST(RudpFlow, ReorderingIsNotLoss) {
  // Random delays up to 5x the base one-way delay: packets overtake each other all the time, yet
  // none is lost; the reordering window must keep retransmissions to a small fraction. (6 % here:
  // RACK's window stops at SRTT, less than this link reorders; it was 1 ms at least, which kept
  // them under 5 % but made every real loss wait that long.)
  FlowConfig cfg = smallConfig();
  Endpoint a{Flow(cfg), pattern(2 << 20, 5), 0, {}};
  Endpoint b{Flow(cfg), {}, 0, {}};
  Link ab({0, 0, 100'000, 500'000, false}, 21), ba({0, 0, 100'000, 500'000, false}, 22);
  Result r = run(a, b, ab, ba, 600'000 * kMs);
  ASSERT_TRUE(r.completed) << a.flow.failure();
  EXPECT_EQ(b.in, a.out);
  FlowStats s = a.flow.stats(), rs = b.flow.stats();
  EXPECT_GT(rs.outOfOrder, 100u);  // the link did reorder
  EXPECT_LT(s.retransmits * 10, s.packetsSent)
      << "retransmits " << s.retransmits << " of " << s.packetsSent;
}

TEST(RudpFlow, ReceivesStraightIntoAPostedBuffer) {
  // The receiver reads transfers of 300 KiB the way the channel's tryReceive does: it posts the
  // rest of the transfer, takes what already lies there (readableDirect) and copies what lies in
  // the ring, over a link that loses, duplicates and reorders. Every byte lands right, and a
  // large share of them without passing through the ring (42 %: the sender, whose losses are
  // found within about an RTT, runs ahead into the next transfer, which is not posted yet; on
  // namespace nodes 97-99 % of a 1 MiB allreduce's packets land in place).
  FlowConfig cfg = smallConfig();
  const size_t total = 3 << 20, transfer = 300 << 10;
  Endpoint a{Flow(cfg), pattern(total, 31), 0, {}};
  Endpoint b{Flow(cfg), {}, 0, {}};
  Link ab({0.02, 0.05, 100'000, 300'000, false}, 32), ba({0.02, 0, 100'000, 0, false}, 33);
  std::vector<char> dst(total, 0);
  size_t done = 0, direct = 0;
  auto reader = [&](Endpoint& e) {
    if (&e != &b) return;
    while (done < total) {
      size_t end = std::min(total, (done / transfer + 1) * transfer);  // this transfer's end
      e.flow.post(dst.data() + done, end - done);
      if (size_t n = e.flow.readableDirect(); n > 0) {
        ASSERT_LE(done + n, end);
        e.flow.consume(n);
        done += n;
        direct += n;
        continue;
      }
      std::span<const char> r = e.flow.readable(end - done);
      if (r.empty()) break;
      std::memcpy(dst.data() + done, r.data(), r.size());
      e.flow.consume(r.size());
      done += r.size();
    }
    e.in.resize(done);  // run() waits for as many bytes as were sent
  };
  Result r = run(a, b, ab, ba, 600'000 * kMs, 1, reader);
  ASSERT_TRUE(r.completed) << a.flow.failure() << b.flow.failure();
  EXPECT_EQ(dst, a.out);
  EXPECT_FALSE(b.flow.posted());  // released at the end of the last transfer
  EXPECT_GT(direct, total / 3) << direct;
}

TEST(RudpFlow, AGivenUpBufferGetsNothingMore) {
  // A posted buffer's bytes are never read from the ring, and once the reader gives it up
  // (its call fails) no packet is stored in it and none of its bytes look readable.
  FlowConfig cfg = smallConfig();
  Flow tx(cfg), rx(cfg);
  std::vector<char> data = pattern(200 << 10, 41), dst(data.size(), 0);
  ASSERT_EQ(tx.write(data.data(), data.size()), data.size());
  std::vector<Outgoing> out;
  tx.collect(1, out, 256);
  rx.post(dst.data(), dst.size());
  ASSERT_TRUE(rx.posted());
  // The first two packets arrive; the third is "in flight".
  for (int i = 0; i < 2; ++i) rx.onPacket(out[i].h, out[i].payload, 2);
  size_t two = out[0].payload.size() + out[1].payload.size();
  EXPECT_EQ(rx.readableDirect(), two);
  EXPECT_TRUE(rx.readable(1 << 20).empty());  // the ring has none of it
  EXPECT_EQ(std::memcmp(dst.data(), data.data(), two), 0);
  // Where the next packet belongs is the posted buffer, and that is the free space offered.
  const Outgoing& third = out[2];
  EXPECT_EQ(rx.placeOf(third.h.offset, third.payload.size()), dst.data() + third.h.offset);
  EXPECT_EQ(rx.receiveSpace(third.h.offset).data(), dst.data() + third.h.offset);
  rx.fail("test");
  rx.abandonPost();
  EXPECT_FALSE(rx.posted());
  EXPECT_EQ(rx.readableDirect(), 0u);
  EXPECT_TRUE(rx.readable(1 << 20).empty());
  std::vector<char> before = dst;
  rx.onPacket(third.h, third.payload, 3);
  EXPECT_EQ(dst, before);
  EXPECT_TRUE(rx.receiveSpace(third.h.offset).empty());
}

TEST(RudpFlow, SmallWindowBackPressure) {
  FlowConfig cfg = smallConfig();
  cfg.windowBytes = 16 * 1024;
  Endpoint a{Flow(cfg), pattern(1 << 20, 8), 0, {}};
  Endpoint b{Flow(cfg), {}, 0, {}};
  // The send ring holds the window rounded up to whole packets; the rest waits.
  const size_t room = a.flow.writable();
  EXPECT_GE(room, cfg.windowBytes);
  EXPECT_LT(room, cfg.windowBytes + cfg.mss);
  EXPECT_EQ(a.flow.write(a.out.data(), a.out.size()), room);
  a.written = room;
  EXPECT_EQ(a.flow.write(a.out.data(), 1), 0u);
  Link ab({0.05, 0, 100'000, 0, false}, 31), ba({0.05, 0, 100'000, 0, false}, 32);
  Result r = run(a, b, ab, ba, 600'000 * kMs);
  ASSERT_TRUE(r.completed) << a.flow.failure() << b.flow.failure();
  EXPECT_EQ(b.in, a.out);
}

TEST(RudpFlow, BytesBeingSentStayPutUntilSendDoneEvenOnceAcknowledged) {
  // The engine sends what collect() handed out without the flow's lock; an ACK that another
  // thread processes meanwhile (for the original of a retransmission) must not let the writer
  // overwrite those bytes before the send is done. (TSAN saw exactly that race.)
  FlowConfig cfg = smallConfig();
  Flow a(cfg), b(cfg);
  std::vector<char> data = pattern(4 * cfg.mss, 9);
  const size_t room = a.writable();
  ASSERT_EQ(a.write(data.data(), data.size()), data.size());
  std::vector<Outgoing> out;
  a.collect(1, out, 16);
  ASSERT_EQ(out.size(), 4u);
  for (const Outgoing& o : out) b.onPacket(o.h, o.payload, 2);
  std::vector<Outgoing> acks;
  b.collect(3, acks, 16);
  ASSERT_EQ(acks.size(), 1u);
  ASSERT_EQ(acks[0].h.type, PacketType::kAck);
  a.onPacket(acks[0].h, acks[0].payload, 4);  // everything acknowledged, the send not done
  EXPECT_EQ(a.writable(), room - data.size());
  a.sendDone();
  EXPECT_EQ(a.writable(), room);
}

TEST(RudpFlow, PacketsThatStartASlotLeaveRoomForTheirHeader) {
  FlowConfig cfg = smallConfig();
  Flow f(cfg);
  std::vector<char> data = pattern(10 * cfg.mss, 3);
  // Half a packet first: it goes alone, and the next one ends where its slot ends.
  ASSERT_EQ(f.write(data.data(), cfg.mss / 2), cfg.mss / 2);
  std::vector<Outgoing> out;
  f.collect(1, out, 16);
  ASSERT_EQ(out.size(), 1u);
  ASSERT_NE(out[0].headroom, nullptr);
  EXPECT_EQ(out[0].headroom + kHeaderBytes, out[0].payload.data());
  const size_t rest = 4 * cfg.mss;
  ASSERT_EQ(f.write(data.data() + cfg.mss / 2, rest), rest);
  out.clear();
  f.collect(2, out, 16);
  ASSERT_EQ(out.size(), 5u);
  EXPECT_EQ(out[0].payload.size(), cfg.mss - cfg.mss / 2);
  EXPECT_EQ(out[0].headroom, nullptr);  // its slot's room holds the first packet's header
  for (size_t i = 1; i < out.size(); ++i) {
    ASSERT_NE(out[i].headroom, nullptr) << i;
    EXPECT_EQ(out[i].headroom + kHeaderBytes, out[i].payload.data());
    // Whole packets lie back to back, header and payload: one buffer for the kernel.
    EXPECT_EQ(out[i - 1].payload.data() + out[i - 1].payload.size(), out[i].headroom) << i;
  }
  EXPECT_EQ(out.back().payload.size(), cfg.mss / 2);
  // The bytes are the ones written, in order.
  std::vector<char> sent;
  for (const Outgoing& o : out) sent.insert(sent.end(), o.payload.begin(), o.payload.end());
  EXPECT_TRUE(std::equal(sent.begin(), sent.end(), data.begin() + cfg.mss / 2));
}

// Sum of the backed-off intervals a flow may wait before declaring its peer dead, plus slack.
uint64_t deathBound(const FlowConfig& c) {
  uint64_t total = 0, rto = c.rtoInitNs;
  for (uint32_t i = 0; i <= c.maxRetries + 1; ++i) {
    total += std::min(rto, c.rtoMaxNs);
    rto = std::min(rto * 2, c.rtoMaxNs);
  }
  return total + c.rtoMaxNs;
}

TEST(RudpFlow, SilentPeerFailsTheSenderWithinTheBound) {
  FlowConfig cfg = smallConfig();
  cfg.maxRetries = 6;
  Endpoint a{Flow(cfg), pattern(1 << 20, 9), 0, {}};
  Endpoint b{Flow(cfg), {}, 0, {}};
  Link ab({0, 0, 100'000, 0, false}, 41), ba({0, 0, 100'000, 0, false}, 42);
  // Let some data through, then the peer goes silent (its packets and ours vanish).
  Result first = run(a, b, ab, ba, kMs / 2);
  ASSERT_FALSE(first.completed);
  ASSERT_FALSE(b.in.empty());
  // From now on nothing comes back: the sender alone runs its timers.
  uint64_t now = first.elapsedNs;
  std::vector<Outgoing> out;
  while (!a.flow.failed() && now < first.elapsedNs + 3 * deathBound(cfg)) {
    out.clear();
    a.flow.collect(now, out, 64);
    if (a.flow.failed()) break;
    now = std::max(a.flow.nextTimer(), now + 1);
  }
  ASSERT_TRUE(a.flow.failed());
  EXPECT_NE(a.flow.failure().find("unreachable"), std::string::npos) << a.flow.failure();
  EXPECT_LE(now - first.elapsedNs, deathBound(cfg));
  EXPECT_GT(a.flow.stats().timeouts, 0u);
}

TEST(RudpFlow, SilentPeerFailsAWaitingReceiver) {
  FlowConfig cfg = smallConfig();
  cfg.maxRetries = 5;
  Flow receiver(cfg);
  receiver.setReceiveWaiting(true);
  std::vector<Outgoing> out;
  uint64_t now = 1;
  int probes = 0;
  while (!receiver.failed() && now < 100'000 * kMs) {
    out.clear();
    receiver.collect(now, out, 64);
    for (const Outgoing& o : out) probes += o.h.type == PacketType::kProbe;  // never answered
    if (receiver.failed()) break;
    now = std::max(receiver.nextTimer(), now + 1);
  }
  ASSERT_TRUE(receiver.failed());
  EXPECT_EQ(probes, 5);
  EXPECT_LE(now, deathBound(cfg));
}

TEST(RudpFlow, SackBitmapMeansWhatItSays) {
  FlowConfig cfg = smallConfig();
  cfg.mss = 8;
  Flow sender(cfg), receiver(cfg);
  std::vector<char> data = pattern(40, 3);
  ASSERT_EQ(sender.write(data.data(), 40), 40u);
  std::vector<Outgoing> out;
  sender.collect(1000, out, 64);
  ASSERT_EQ(out.size(), 5u);  // packets 1..5, 8 bytes each
  // Packets 1, 3 and 4 arrive; 2 and 5 do not.
  for (int i : {0, 2, 3}) {
    Header h = out[i].h;
    receiver.onPacket(h, out[i].payload, 2000);
  }
  std::vector<Outgoing> acks;
  receiver.collect(3000, acks, 64);
  ASSERT_EQ(acks.size(), 1u);
  EXPECT_EQ(acks[0].h.type, PacketType::kAck);
  EXPECT_EQ(acks[0].h.seq, 2u);  // next expected
  ASSERT_EQ(acks[0].payload.size(), 8u);
  uint64_t bits;
  std::memcpy(&bits, acks[0].payload.data(), 8);
  EXPECT_EQ(bits, 0b11u);  // bit 0 = packet 3, bit 1 = packet 4
  sender.onPacket(acks[0].h, acks[0].payload, 4000);
  // A timeout later, the lowest missing packet goes again, never 3 or 4.
  auto dataSeqs = [](const std::vector<Outgoing>& v) {
    std::vector<uint64_t> seqs;
    for (const Outgoing& o : v)
      if (o.h.type == PacketType::kData) seqs.push_back(o.h.seq);
    return seqs;
  };
  uint64_t now = 4000 + 2 * cfg.rtoMaxNs;
  std::vector<Outgoing> again;
  sender.collect(now, again, 64);
  ASSERT_EQ(dataSeqs(again), (std::vector<uint64_t>{2}));
  // Its delivery (sent after 5) shows 5 lost (RACK): 5 goes, and still not 3 or 4.
  receiver.onPacket(again[0].h, again[0].payload, now + 1000);
  acks.clear();
  receiver.collect(now + 1000, acks, 64);
  ASSERT_EQ(acks.size(), 1u);
  EXPECT_EQ(acks[0].h.seq, 5u);
  sender.onPacket(acks[0].h, acks[0].payload, now + 2000);
  std::vector<Outgoing> last;
  sender.collect(now + 2000 + 2 * cfg.rtoInitNs, last, 64);
  EXPECT_EQ(dataSeqs(last), (std::vector<uint64_t>{5}));
}

// A timeout with a whole flight unacknowledged (a late ACK looks just like this on a loaded host)
// sends one packet, the lowest, and cuts the window once; it does not resend the flight or
// collapse the window to its floor. Backed off, the next timeout retries the same packet.
TEST(RudpFlow, ATimeoutResendsTheLowestPacketAndKeepsMostOfTheWindow) {
  FlowConfig cfg = smallConfig();
  Flow sender(cfg);
  std::vector<char> data = pattern(200 * 1024, 13);
  sender.write(data.data(), data.size());
  std::vector<Outgoing> out;
  sender.collect(1, out, 1024);
  ASSERT_EQ(out.size(), cfg.initialCwnd);
  const double before = sender.stats().cwnd;
  uint64_t now = sender.nextTimer();
  ASSERT_GE(now, 1 + cfg.rtoMinNs);
  out.clear();
  sender.collect(now, out, 1024);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].h.seq, 1u);
  FlowStats st = sender.stats();
  EXPECT_EQ(st.timeouts, 1u);
  EXPECT_DOUBLE_EQ(st.cwnd, before * 0.7);
  // Backed off: the next timeout is at least twice as far, and retries packet 1 again.
  uint64_t next = sender.nextTimer();
  EXPECT_GE(next - now, 2 * cfg.rtoMinNs);
  out.clear();
  sender.collect(next, out, 1024);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].h.seq, 1u);
  EXPECT_EQ(sender.stats().timeouts, 2u);
}

// Hands the sender's datagrams to the receiver (but the round's first data packet when dropFirst)
// and the receiver's ACK back, 1 ms each way; the receiver's reader consumes everything. With a
// 2 ms RTT, RACK (RTT + 1 ms) finds a lost packet before the tail loss probe (2 SRTT) resends it.
void exchange(Flow& s, Flow& r, uint64_t& now, bool dropFirst) {
  std::vector<Outgoing> out, acks;
  s.collect(now, out, 1 << 16);
  now += kMs;
  bool first = true;
  for (const Outgoing& o : out) {
    if (o.h.type != PacketType::kData) continue;
    if (!(first && dropFirst)) r.onPacket(o.h, o.payload, now);
    first = false;
  }
  for (std::span<const char> sp = r.readable(1 << 30); !sp.empty(); sp = r.readable(1 << 30))
    r.consume(sp.size());
  r.collect(now, acks, 16);
  now += kMs;
  for (const Outgoing& a : acks)
    if (a.h.type == PacketType::kAck) s.onPacket(a.h, a.payload, now);
}

// One random loss costs a dip, not the window: after the x0.7 cut the window is back to its size
// before the loss within two loss-free round trips (Reno would have added two packets).
TEST(RudpFlow, TheWindowRegrowsToItsSizeBeforeALossWithinTwoRtts) {
  FlowConfig cfg = smallConfig();
  cfg.windowBytes = 4 << 20;
  Flow s(cfg), r(cfg);
  std::vector<char> data = pattern(1 << 20, 14);
  uint64_t now = 1;
  // Slow start doubles the window every loss-free round; the round whose ACK shows the loss cuts
  // it.
  std::vector<double> cwnd = {s.stats().cwnd};
  for (int round = 0; round < 200 && s.stats().retransmits == 0; ++round) {
    while (s.write(data.data(), data.size()) > 0) {
    }
    exchange(s, r, now, round == 3);
    cwnd.push_back(s.stats().cwnd);
  }
  ASSERT_EQ(s.stats().retransmits, 1u) << "the dropped packet was never found lost";
  EXPECT_EQ(s.stats().timeouts, 0u);  // found by RACK, not by a timeout
  size_t cutRound = 0;
  for (size_t i = 1; i < cwnd.size(); ++i)
    if (cwnd[i] < 1.9 * cwnd[i - 1]) cutRound = i;
  ASSERT_GT(cutRound, 0u);
  const double cut = cwnd[cutRound], before = cut / 0.7;
  EXPECT_GT(cut, 4.0 * cfg.minCwnd);  // a dip, not a collapse
  // Two round trips after the cut: one repaired the hole (the receive window was stuck behind
  // it), the next sent a full flight.
  for (size_t round = cwnd.size() - 1; round < cutRound + 2; ++round) {
    while (s.write(data.data(), data.size()) > 0) {
    }
    exchange(s, r, now, false);
  }
  EXPECT_GE(s.stats().cwnd, before);
}

TEST(RudpFlow, RttComesFromTheEchoedTimestamp) {
  FlowConfig cfg = smallConfig();
  Endpoint a{Flow(cfg), pattern(256 * 1024, 4), 0, {}};
  Endpoint b{Flow(cfg), {}, 0, {}};
  // 1 ms each way: every sample is between 2 ms and 2 ms plus the sender's batching.
  Link ab({0, 0, kMs, 0, false}, 51), ba({0, 0, kMs, 0, false}, 52);
  Result r = run(a, b, ab, ba, 60'000 * kMs);
  ASSERT_TRUE(r.completed);
  FlowStats s = a.flow.stats();
  EXPECT_GE(s.srttNs, 2 * kMs);
  EXPECT_LE(s.srttNs, 2 * kMs + kMs / 2);
  EXPECT_GE(s.rtoNs, s.srttNs);
}

TEST(RudpFlow, ReplayedDataIsADuplicateNotNewData) {
  FlowConfig cfg = smallConfig();
  Flow sender(cfg), receiver(cfg);
  std::vector<char> data = pattern(3000, 6);
  sender.write(data.data(), data.size());
  std::vector<Outgoing> out;
  sender.collect(1, out, 64);
  ASSERT_GE(out.size(), 2u);
  for (const Outgoing& o : out) receiver.onPacket(o.h, o.payload, 2);
  std::span<const char> r = receiver.readable(1 << 20);
  ASSERT_EQ(r.size(), data.size());
  receiver.consume(r.size());
  for (const Outgoing& o : out) receiver.onPacket(o.h, o.payload, 3);  // the replay
  EXPECT_TRUE(receiver.readable(1 << 20).empty());
  EXPECT_EQ(receiver.stats().duplicates, out.size());
}

TEST(RudpFlow, ResetFailsTheFlow) {
  Flow f(smallConfig());
  Header h;
  h.type = PacketType::kReset;
  f.onPacket(h, {}, 1);
  EXPECT_TRUE(f.failed());
}

}  // namespace
}  // namespace loom::rudp
