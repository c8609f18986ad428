// The rudp wire format: round trips, refusals of strangers, other communicators, stale jobs and
// forgeries, SipHash against its reference vector, and a bounded random fuzz of the parser (random
// bytes and single-bit/byte mutations of valid datagrams) whose accepted packets are fed to a flow.
#include "transport/rudp/rudp_packet.hpp"

#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <vector>

#include "transport/rudp/rudp_flow.hpp"

namespace loom::rudp {
namespace {

const MacKey kKey = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15};
const PacketKeys kTestKeys(kKey);

std::vector<char> datagram(const Header& h, const std::vector<char>& payload,
                           const PacketKeys& keys = kTestKeys) {
  std::vector<char> d(kHeaderBytes + payload.size());
  encodeHeader(h, keys, payload, d.data());
  if (!payload.empty()) std::memcpy(d.data() + kHeaderBytes, payload.data(), payload.size());
  return d;
}

Header dataHeader() {
  Header h;
  h.type = PacketType::kData;
  h.cls = 1;
  h.path = 2;
  h.commId = 77;
  h.src = 3;
  h.dst = 5;
  h.seq = (uint64_t{1} << 40) + 9;  // 64-bit fields survive
  h.offset = (uint64_t{1} << 35) + 8;
  h.tsval = 123456789012345ull;
  return h;
}

TEST(RudpPacket, SipHashReferenceVector) {
  // The SipHash-2-4 paper's test vector: key 00..0f, message 00..0e.
  std::vector<char> msg(15);
  for (int i = 0; i < 15; ++i) msg[i] = static_cast<char>(i);
  EXPECT_EQ(sipHash24(kKey, msg.data(), msg.size()), 0xa129ca6149be45e5ull);
}

TEST(RudpPacket, NhMatchesItsDefinition) {
  // The vector code against the formula, for every length up to 300 (whole 64- and 32-byte
  // blocks, 8-byte words and a partial word alike).
  std::mt19937_64 rng(7);
  std::vector<uint32_t> key(2 * 300 / 8 + 8);
  for (uint32_t& k : key) k = static_cast<uint32_t>(rng());
  std::vector<char> data(300);  // every mix of 64-, 32- and 8-byte steps and a tail
  for (char& c : data) c = static_cast<char>(rng());
  for (size_t n = 0; n <= data.size(); ++n) {
    std::vector<char> padded(data.begin(), data.begin() + static_cast<long>(n));
    padded.resize((n + 7) / 8 * 8, 0);
    uint64_t a = 0, b = 0;
    for (size_t i = 0; i < padded.size() / 4; i += 2) {
      uint32_t m0, m1;
      std::memcpy(&m0, padded.data() + 4 * i, 4);
      std::memcpy(&m1, padded.data() + 4 * i + 4, 4);
      a += uint64_t{static_cast<uint32_t>(m0 + key[i])} * static_cast<uint32_t>(m1 + key[i + 1]);
      b +=
          uint64_t{static_cast<uint32_t>(m0 + key[i + 4])} * static_cast<uint32_t>(m1 + key[i + 5]);
    }
    std::array<uint64_t, 2> got = nhHash(key.data(), data.data(), n);
    EXPECT_EQ(got[0], a) << n;
    EXPECT_EQ(got[1], b) << n;
  }
}

TEST(RudpPacket, EveryPayloadByteIsAuthenticated) {
  std::vector<char> payload(333);
  for (size_t i = 0; i < payload.size(); ++i) payload[i] = static_cast<char>(i * 13);
  std::vector<char> d = datagram(dataHeader(), payload);
  Header out;
  std::span<const char> got;
  for (size_t i = kHeaderBytes; i < d.size(); ++i) {
    std::vector<char> forged = d;
    forged[i] ^= static_cast<char>(1 << (i % 8));
    EXPECT_EQ(parseDatagram(forged.data(), forged.size(), kTestKeys, 77, 5, out, got),
              ParseResult::kBadMac)
        << i;
  }
}

TEST(RudpPacket, EveryHeaderByteIsAuthenticated) {
  std::vector<char> payload(100, 'p');
  std::vector<char> d = datagram(dataHeader(), payload);
  Header out;
  std::span<const char> got;
  for (size_t i = 0; i < kHeaderBytes; ++i) {
    std::vector<char> forged = d;
    forged[i] ^= 0x10;
    EXPECT_NE(parseDatagram(forged.data(), forged.size(), kTestKeys, 77, 5, out, got),
              ParseResult::kOk)
        << i;
  }
}

TEST(RudpPacket, AZeroByteAppendedIsRefused) {
  // NH pads to whole words with zeros: the MAC must still tell "abcde" from "abcde\0".
  std::vector<char> payload = {'a', 'b', 'c', 'd', 'e'};
  std::vector<char> d = datagram(dataHeader(), payload);
  d.push_back(0);
  const uint32_t longer = static_cast<uint32_t>(payload.size() + 1);
  std::memcpy(d.data() + 24, &longer, sizeof(longer));  // the length field
  Header out;
  std::span<const char> got;
  EXPECT_EQ(parseDatagram(d.data(), d.size(), kTestKeys, 77, 5, out, got), ParseResult::kBadMac);
}

TEST(RudpPacket, RoundTrip) {
  std::vector<char> payload(1001);
  for (size_t i = 0; i < payload.size(); ++i) payload[i] = static_cast<char>(i * 7);
  Header in = dataHeader();
  std::vector<char> d = datagram(in, payload);
  Header out;
  std::span<const char> got;
  ASSERT_EQ(parseDatagram(d.data(), d.size(), kTestKeys, 77, 5, out, got), ParseResult::kOk);
  EXPECT_EQ(out.seq, in.seq);
  EXPECT_EQ(out.offset, in.offset);
  EXPECT_EQ(out.tsval, in.tsval);
  EXPECT_EQ(out.src, 3u);
  EXPECT_EQ(out.cls, 1);
  EXPECT_EQ(out.payloadBytes, payload.size());
  EXPECT_EQ(std::vector<char>(got.begin(), got.end()), payload);
}

TEST(RudpPacket, RefusesStrangersForgeriesAndOtherCommunicators) {
  std::vector<char> payload(64, 'x');
  Header h = dataHeader();
  Header out;
  std::span<const char> got;
  std::vector<char> d = datagram(h, payload);
  // Another job's key (a stale job, or a stranger guessing).
  MacKey other = kKey;
  other[0] ^= 1;
  EXPECT_EQ(parseDatagram(d.data(), d.size(), PacketKeys(other), 77, 5, out, got),
            ParseResult::kBadMac);
  // A valid packet of another communicator, or meant for another rank.
  EXPECT_EQ(parseDatagram(d.data(), d.size(), kTestKeys, 78, 5, out, got), ParseResult::kForeign);
  EXPECT_EQ(parseDatagram(d.data(), d.size(), kTestKeys, 77, 4, out, got), ParseResult::kForeign);
  // A forged payload under a valid header.
  std::vector<char> forged = d;
  forged[kHeaderBytes + 10] ^= 0x40;
  EXPECT_EQ(parseDatagram(forged.data(), forged.size(), kTestKeys, 77, 5, out, got),
            ParseResult::kBadMac);
  // A forged sequence number.
  forged = d;
  forged[32] ^= 1;
  EXPECT_EQ(parseDatagram(forged.data(), forged.size(), kTestKeys, 77, 5, out, got),
            ParseResult::kBadMac);
  // Truncated, padded, junk.
  EXPECT_EQ(parseDatagram(d.data(), 20, kTestKeys, 77, 5, out, got), ParseResult::kShort);
  EXPECT_EQ(parseDatagram(d.data(), d.size() - 1, kTestKeys, 77, 5, out, got),
            ParseResult::kBadLength);
  std::vector<char> junk(200, 'j');
  EXPECT_EQ(parseDatagram(junk.data(), junk.size(), kTestKeys, 77, 5, out, got),
            ParseResult::kBadMagic);
}

TEST(RudpPacket, FuzzParserAndFlow) {
  // Bounded: a fixed number of inputs, fixed seed. Accepted packets go to a flow, which must not
  // crash or deliver anything but what valid packets carried.
  std::mt19937_64 rng(2024);
  FlowConfig cfg;
  cfg.windowBytes = 64 * 1024;
  Flow flow(cfg);
  std::vector<std::vector<char>> valid;
  for (int i = 0; i < 64; ++i) {
    Header h = dataHeader();
    h.type = static_cast<PacketType>(1 + rng() % 4);
    h.seq = 1 + rng() % 200;
    h.offset = (rng() % 100) * 1000;
    std::vector<char> p(h.type == PacketType::kAck ? 8 * (rng() % 4) : rng() % 1500);
    for (char& c : p) c = static_cast<char>(rng());
    valid.push_back(datagram(h, p));
  }
  int accepted = 0, mutatedAccepted = 0;
  for (int iter = 0; iter < 200000; ++iter) {
    std::vector<char> d;
    bool mutated = false;
    switch (rng() % 3) {
      case 0:
        d.resize(rng() % 300);
        for (char& c : d) c = static_cast<char>(rng());
        mutated = true;
        break;
      case 1: {
        d = valid[rng() % valid.size()];
        size_t at = rng() % d.size();
        char flip = static_cast<char>(1u << (rng() % 8));
        d[at] ^= flip;
        mutated = true;
        break;
      }
      default:
        d = valid[rng() % valid.size()];
        if (rng() % 4 == 0) d.resize(rng() % (d.size() + 1));
        break;
    }
    Header h;
    std::span<const char> payload;
    if (parseDatagram(d.data(), d.size(), kTestKeys, 77, 5, h, payload) == ParseResult::kOk) {
      accepted += 1;
      mutatedAccepted += mutated;
      flow.onPacket(h, payload, static_cast<uint64_t>(iter) + 1);
      std::vector<Outgoing> out;
      flow.collect(static_cast<uint64_t>(iter) + 1, out, 8);
      std::span<const char> r = flow.readable(1 << 20);
      flow.consume(r.size());
    }
  }
  EXPECT_GT(accepted, 0);
  EXPECT_EQ(mutatedAccepted, 0);
}

}  // namespace
}  // namespace loom::rudp
