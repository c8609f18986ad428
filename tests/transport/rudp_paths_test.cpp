// The rudp flow's paths: packets go out in flowlets, one path after the other; a loss is found
// within about an RTT when later packets of its own path arrived (one path delivers in order),
// those of its own burst too (one send time: the packet number breaks the tie), while a path that
// lags the others is reordering, not loss; reordering within a path, or duplicates that no probe
// explains, bring the large window back. Virtual time over a simulated two-path link; deterministic
// and bounded.
#include <gtest/gtest.h>

#include <functional>
#include <map>
#include <random>
#include <vector>

#include "transport/rudp/rudp_flow.hpp"

namespace loom::rudp {
namespace {

constexpr uint64_t kUs = 1'000;
constexpr uint64_t kNsPerMs = 1'000'000;

// One direction: a base delay, extra delay on path 1, optional jitter, and a drop rule.
struct Wire {
  uint64_t delayNs = 100 * kUs;
  uint64_t path1ExtraNs = 0;
  uint64_t jitterNs = 0;
  std::function<bool(const Header&, uint64_t now)> drop;
  std::vector<std::pair<uint64_t, Header>> sent;  // every datagram offered, with its time
  std::multimap<uint64_t, std::pair<Header, std::vector<char>>> queue;
  std::mt19937_64 rng{7};

  void send(const Outgoing& o, uint64_t now) {
    sent.emplace_back(now, o.h);
    if (drop && drop(o.h, now)) return;
    uint64_t at = now + delayNs + (o.h.path == 1 ? path1ExtraNs : 0);
    if (jitterNs > 0) at += rng() % jitterNs;
    queue.emplace(at, std::make_pair(o.h, std::vector<char>(o.payload.begin(), o.payload.end())));
  }
  uint64_t next() const { return queue.empty() ? UINT64_MAX : queue.begin()->first; }
  void deliver(uint64_t now, Flow& to) {
    while (!queue.empty() && queue.begin()->first <= now) {
      auto d = std::move(queue.begin()->second);
      queue.erase(queue.begin());
      to.onPacket(d.first, d.second, now);
    }
  }
};

FlowConfig config(uint32_t paths) {
  FlowConfig c;
  c.windowBytes = 256 * 1024;
  c.mss = 1400;
  c.paths = paths;
  c.flowletPackets = 16;
  return c;
}

std::vector<char> pattern(size_t n) {
  std::vector<char> v(n);
  std::mt19937 rng(3);
  for (char& c : v) c = static_cast<char>(rng());
  return v;
}

// Sends `data` from s to r (r's ACKs come back on `back`) until r has it all and s is drained;
// returns what r read. `now` runs on.
std::vector<char> transfer(Flow& s, Flow& r, Wire& fwd, Wire& back, const std::vector<char>& data,
                           uint64_t& now, size_t room = 64) {
  std::vector<char> got;
  std::vector<Outgoing> out;
  size_t written = 0;
  for (int iter = 0; iter < 1'000'000 && now < 10'000 * kNsPerMs; ++iter) {
    fwd.deliver(now, r);
    back.deliver(now, s);
    written += s.write(data.data() + written, data.size() - written);
    for (std::span<const char> sp = r.readable(1 << 20); !sp.empty(); sp = r.readable(1 << 20)) {
      got.insert(got.end(), sp.begin(), sp.end());
      r.consume(sp.size());
    }
    r.setReceiveWaiting(got.size() < data.size());
    if ((got.size() == data.size() && s.drained()) || s.failed() || r.failed()) break;
    out.clear();
    s.collect(now, out, room);
    for (const Outgoing& o : out) fwd.send(o, now);
    out.clear();
    r.collect(now, out, 64);
    for (const Outgoing& o : out) back.send(o, now);
    uint64_t next = std::min({fwd.next(), back.next(), s.nextTimer(), r.nextTimer()});
    if (s.wantsToSend() || r.wantsToSend()) next = std::min(next, now + 1000);
    now = std::max(next, now + 1);
  }
  return got;
}

TEST(RudpPaths, PacketsGoOutInFlowletsOfOnePathEach) {
  Flow s(config(2)), r(config(2));
  Wire fwd, back;
  std::vector<char> data = pattern(100 * 1400);
  uint64_t now = 1;
  ASSERT_EQ(transfer(s, r, fwd, back, data, now), data);
  size_t i = 0;
  for (const auto& [t, h] : fwd.sent) {
    if (h.type != PacketType::kData) continue;
    EXPECT_EQ(h.path, i / 16 % 2) << "data packet " << i;
    ++i;
  }
  EXPECT_EQ(i, 100u);
}

// One path, 200 us RTT, one packet lost in mid-flight: the packets behind it on its path arrive,
// so it is resent after about an RTT, not after the 1 ms that reordering across paths needs.
TEST(RudpPaths, ALossWithinAPathIsFoundWithinAboutAnRtt) {
  Flow s(config(1)), r(config(1));
  Wire fwd, back;
  fwd.drop = [dropped = false](const Header& h, uint64_t) mutable {
    if (dropped || h.type != PacketType::kData || h.seq != 100) return false;
    dropped = true;
    return true;
  };
  std::vector<char> data = pattern(512 * 1024);
  uint64_t now = 1;
  ASSERT_EQ(transfer(s, r, fwd, back, data, now), data);
  std::vector<uint64_t> times;
  for (const auto& [t, h] : fwd.sent)
    if (h.type == PacketType::kData && h.seq == 100) times.push_back(t);
  ASSERT_EQ(times.size(), 2u);
  EXPECT_LT(times[1] - times[0], 500 * kUs);
  FlowStats st = s.stats();
  EXPECT_EQ(st.retransmits, 1u);
  EXPECT_EQ(st.timeouts, 0u);
  EXPECT_EQ(st.pathLosses, 1u);
}

// One burst (one collect(), one send time) of 40 packets, the 10th lost: the 30 behind it in the
// burst arrive, so RACK finds it about an RTT later, although they left at the same time as it.
TEST(RudpPaths, ALossInsideABurstIsFoundByTheRestOfTheBurst) {
  FlowConfig cfg = config(1);
  cfg.initialCwnd = 1024;
  Flow s(cfg), r(cfg);
  Wire fwd, back;
  std::vector<char> warm = pattern(14000);
  uint64_t now = 1;
  ASSERT_EQ(transfer(s, r, fwd, back, warm, now, 1024), warm);  // an RTT sample: probes at 2 SRTT
  const uint64_t lostSeq = 10 + 10;                             // the warm-up took 10 packets
  fwd.drop = [&, dropped = false](const Header& h, uint64_t) mutable {
    if (dropped || h.type != PacketType::kData || h.seq != lostSeq) return false;
    dropped = true;
    return true;
  };
  std::vector<char> data = pattern(40 * 1400);
  ASSERT_EQ(transfer(s, r, fwd, back, data, now, 1024), data);
  std::vector<uint64_t> times;
  for (const auto& [t, h] : fwd.sent)
    if (h.type == PacketType::kData && h.seq == lostSeq) times.push_back(t);
  ASSERT_EQ(times.size(), 2u);
  // RTT 200 us + the path's window (50 us); a tail probe would come at 2 SRTT, 400 us.
  EXPECT_LT(times[1] - times[0], 350 * kUs);
  EXPECT_EQ(s.stats().pathLosses, 1u);
  EXPECT_EQ(s.stats().timeouts, 0u);
}

// Path 1 lags path 0 by 600 us (three RTTs): its packets arrive after later ones of path 0, all
// the time, yet none is lost; only the large window applies across paths, and a path's lag is
// not reordering within it.
TEST(RudpPaths, ALaggingPathIsReorderingNotLoss) {
  Flow s(config(2)), r(config(2));
  Wire fwd, back;
  fwd.path1ExtraNs = 600 * kUs;
  std::vector<char> data = pattern(1 << 20);
  uint64_t now = 1;
  ASSERT_EQ(transfer(s, r, fwd, back, data, now), data);
  EXPECT_GT(r.stats().outOfOrder, 100u);  // the lag did reorder
  FlowStats st = s.stats();
  EXPECT_EQ(st.pathLosses, 0u);
  // At most the tail loss probe (2 SRTT after the last packet, which is slower on path 1).
  EXPECT_LE(st.retransmits, 1u);
  EXPECT_EQ(st.pathReorders, 0u);
}

// Jitter on the one path: it reorders, the flow sees it and waits the large window, so hardly
// any packet is resent for nothing.
TEST(RudpPaths, ReorderingWithinAPathBringsTheLargeWindowBack) {
  Flow s(config(1)), r(config(1));
  Wire fwd, back;
  fwd.jitterNs = back.jitterNs = 300 * kUs;
  std::vector<char> data = pattern(2 << 20);
  uint64_t now = 1;
  ASSERT_EQ(transfer(s, r, fwd, back, data, now), data);
  FlowStats st = s.stats();
  EXPECT_GT(st.pathReorders, 0u);
  // Seen at the first packet delivered out of order, before the small window resends any (the
  // duplicates of needless retransmissions alone would come later: 5 % resent here). The large
  // window starts at 100 us and doubles with each report of duplicates until it covers the
  // jitter (300 us each way): 1.8 % resent here, which is what finding real losses within about
  // an RTT costs on a path that jittery (a 1 ms window, resending 1 %, made every loss wait).
  EXPECT_LT(st.retransmits * 100, 2 * st.packetsSent)
      << "retransmits " << st.retransmits << " of " << st.packetsSent;
}

// Once a path has reordered, a loss on it is still found within about two RTTs, not after the
// millisecond the window used to have at least (a 1 MiB allreduce at 1 % loss lost a third of its
// speed to that).
TEST(RudpPaths, ALossAfterReorderingWaitsAboutAnRttMore) {
  Flow s(config(1)), r(config(1));
  Wire fwd, back;
  fwd.jitterNs = 100 * kUs;
  std::vector<char> first = pattern(256 * 1024);
  uint64_t now = 1;
  ASSERT_EQ(transfer(s, r, fwd, back, first, now), first);
  ASSERT_GT(s.stats().pathReorders, 0u);
  fwd.jitterNs = 0;
  const uint64_t lostSeq = s.stats().packetsSent + 50;
  fwd.drop = [&, dropped = false](const Header& h, uint64_t) mutable {
    if (dropped || h.type != PacketType::kData || h.seq != lostSeq) return false;
    dropped = true;
    return true;
  };
  std::vector<char> second = pattern(256 * 1024);
  ASSERT_EQ(transfer(s, r, fwd, back, second, now), second);
  std::vector<uint64_t> times;
  for (const auto& [t, h] : fwd.sent)
    if (h.type == PacketType::kData && h.seq == lostSeq) times.push_back(t);
  ASSERT_EQ(times.size(), 2u);
  // RTT 200 us plus the window (100 us here, at most SRTT); with the old 1 ms floor the tail
  // probe found it first, 511 us after it left.
  EXPECT_LT(times[1] - times[0], 450 * kUs);
}

// A tail loss probe resends a packet whose ACK was lost: the receiver counts a duplicate, which
// the probe explains; the path keeps its small window.
TEST(RudpPaths, ADuplicateOfAProbeIsNotReordering) {
  Flow s(config(1)), r(config(1));
  Wire fwd, back;
  std::vector<char> first = pattern(64 * 1024);
  uint64_t now = 1;
  ASSERT_EQ(transfer(s, r, fwd, back, first, now), first);  // RTT known
  const uint64_t quietFrom = now, quietTo = now + 2 * kNsPerMs;
  back.drop = [&](const Header& h, uint64_t t) {
    return h.type == PacketType::kAck && t >= quietFrom && t < quietTo;
  };
  std::vector<char> second = pattern(10 * 1400);
  ASSERT_EQ(transfer(s, r, fwd, back, second, now), second);
  EXPECT_GT(s.stats().retransmits, 0u);
  EXPECT_GT(r.stats().duplicates, 0u);
  EXPECT_EQ(s.stats().pathReorders, 0u);
}

}  // namespace
}  // namespace loom::rudp
