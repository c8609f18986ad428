#include "transport/rudp/rudp_packet.hpp"

#include <cstring>

namespace loom::rudp {

namespace {

uint64_t load64(const void* p) {
  uint64_t v;
  std::memcpy(&v, p, 8);
  return v;  // the wire is little-endian, as are the hosts Loom builds for
}
uint32_t load32(const void* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}
void store64(char* p, uint64_t v) { std::memcpy(p, &v, 8); }
void store32(char* p, uint32_t v) { std::memcpy(p, &v, 4); }
uint64_t rotl(uint64_t x, int b) { return (x << b) | (x >> (64 - b)); }

// Field offsets inside the header.
constexpr size_t kOffCommId = 8, kOffSrc = 16, kOffDst = 20, kOffLen = 24, kOffSeq = 32,
                 kOffOffset = 40, kOffTsval = 48, kOffTsecr = 56, kOffDup = 64, kOffDigest = 72,
                 kOffMac = 80;
static_assert(kOffMac + 8 == kHeaderBytes);

}  // namespace

uint64_t sipHash24(const MacKey& key, const void* data, size_t bytes) {
  const uint64_t k0 = load64(key.data()), k1 = load64(key.data() + 8);
  uint64_t v0 = 0x736f6d6570736575ull ^ k0, v1 = 0x646f72616e646f6dull ^ k1;
  uint64_t v2 = 0x6c7967656e657261ull ^ k0, v3 = 0x7465646279746573ull ^ k1;
  auto round = [&] {
    v0 += v1;
    v1 = rotl(v1, 13);
    v1 ^= v0;
    v0 = rotl(v0, 32);
    v2 += v3;
    v3 = rotl(v3, 16);
    v3 ^= v2;
    v0 += v3;
    v3 = rotl(v3, 21);
    v3 ^= v0;
    v2 += v1;
    v1 = rotl(v1, 17);
    v1 ^= v2;
    v2 = rotl(v2, 32);
  };
  const char* p = static_cast<const char*>(data);
  const size_t whole = bytes & ~size_t{7};
  for (size_t i = 0; i < whole; i += 8) {
    uint64_t m = load64(p + i);
    v3 ^= m;
    round();
    round();
    v0 ^= m;
  }
  uint64_t last = static_cast<uint64_t>(bytes) << 56;
  for (size_t i = 0; i < (bytes & 7); ++i)
    last |= static_cast<uint64_t>(static_cast<uint8_t>(p[whole + i])) << (8 * i);
  v3 ^= last;
  round();
  round();
  v0 ^= last;
  v2 ^= 0xff;
  for (int i = 0; i < 4; ++i) round();
  return v0 ^ v1 ^ v2 ^ v3;
}

uint64_t payloadDigest(const void* data, size_t bytes) {
  // Four lanes, each folding 16 bytes per step through one 64x64->128-bit multiply (the high and
  // low halves xored) into a rotate-and-add chain: the multiplies stay off the chain, so the loop
  // runs near one multiply per cycle (several times the multiply-rotate chain it replaced, which
  // cost more than the payload copies). The chain makes the result depend on every block's
  // position. This guards against corruption and binds the payload to the MAC'd header; it is not
  // itself a MAC.
  constexpr uint64_t kS[8] = {0xa0761d6478bd642full, 0xe7037ed1a0b428dbull, 0x8ebc6af09c88c6e3ull,
                              0x589965cc75374cc3ull, 0x1d8e4e27c47d124full, 0x243f6a8885a308d3ull,
                              0x13198a2e03707344ull, 0xa4093822299f31d0ull};
  auto fold = [](uint64_t a, uint64_t b) {
    unsigned __int128 r = static_cast<unsigned __int128>(a) * b;
    return static_cast<uint64_t>(r) ^ static_cast<uint64_t>(r >> 64);
  };
  const char* p = static_cast<const char*>(data);
  uint64_t h[4] = {bytes ^ kS[0], kS[1], kS[2], kS[3]};
  size_t i = 0;
  for (; i + 64 <= bytes; i += 64)
    for (int l = 0; l < 4; ++l)
      h[l] = rotl(h[l], 23) +
             fold(load64(p + i + 16 * l) ^ kS[2 * l], load64(p + i + 16 * l + 8) ^ kS[2 * l + 1]);
  for (; i + 8 <= bytes; i += 8) h[0] = rotl(h[0], 23) + fold(load64(p + i) ^ kS[4], kS[5]);
  uint64_t tail = 0;
  for (size_t j = 0; i + j < bytes; ++j)
    tail |= static_cast<uint64_t>(static_cast<uint8_t>(p[i + j])) << (8 * j);
  h[1] = rotl(h[1], 23) + fold(tail ^ kS[6], kS[7]);
  uint64_t out = fold(h[0] ^ kS[1], h[1] ^ kS[2]) ^ fold(h[2] ^ kS[3], h[3] ^ kS[4]);
  out ^= out >> 33;
  out *= 0xff51afd7ed558ccdull;
  out ^= out >> 33;
  return out;
}

void encodeHeader(const Header& h, const MacKey& key, std::span<const char> payload, char* out) {
  std::memset(out, 0, kHeaderBytes);
  store32(out, kMagic);
  out[4] = static_cast<char>(kVersion);
  out[5] = static_cast<char>(h.type);
  out[6] = static_cast<char>(h.cls);
  out[7] = static_cast<char>(h.path);
  store64(out + kOffCommId, h.commId);
  store32(out + kOffSrc, h.src);
  store32(out + kOffDst, h.dst);
  store32(out + kOffLen, static_cast<uint32_t>(payload.size()));
  store64(out + kOffSeq, h.seq);
  store64(out + kOffOffset, h.offset);
  store64(out + kOffTsval, h.tsval);
  store64(out + kOffTsecr, h.tsecr);
  store64(out + kOffDup, h.dupCount);
  uint64_t digest = payloadDigest(payload.data(), payload.size());
  store64(out + kOffDigest, digest);
  store64(out + kOffMac, sipHash24(key, out, kOffMac));
}

ParseResult parseDatagram(const char* data, size_t bytes, const MacKey& key, uint64_t commId,
                          uint32_t rank, Header& h, std::span<const char>& payload) {
  if (bytes < kHeaderBytes) return ParseResult::kShort;
  if (load32(data) != kMagic) return ParseResult::kBadMagic;
  if (static_cast<uint8_t>(data[4]) != kVersion) return ParseResult::kBadVersion;
  uint8_t type = static_cast<uint8_t>(data[5]);
  if (type < 1 || type > 4) return ParseResult::kBadType;
  uint32_t len = load32(data + kOffLen);
  if (len != bytes - kHeaderBytes) return ParseResult::kBadLength;
  // Authenticate before trusting anything else in the header.
  if (sipHash24(key, data, kOffMac) != load64(data + kOffMac)) return ParseResult::kBadMac;
  if (payloadDigest(data + kHeaderBytes, len) != load64(data + kOffDigest))
    return ParseResult::kBadMac;
  h.type = static_cast<PacketType>(type);
  h.cls = static_cast<uint8_t>(data[6]);
  h.path = static_cast<uint8_t>(data[7]);
  h.commId = load64(data + kOffCommId);
  h.src = load32(data + kOffSrc);
  h.dst = load32(data + kOffDst);
  h.payloadBytes = len;
  h.seq = load64(data + kOffSeq);
  h.offset = load64(data + kOffOffset);
  h.tsval = load64(data + kOffTsval);
  h.tsecr = load64(data + kOffTsecr);
  h.dupCount = load64(data + kOffDup);
  if (h.commId != commId || h.dst != rank) return ParseResult::kForeign;
  if (h.type == PacketType::kAck && len % 8 != 0) return ParseResult::kBadLength;
  payload = {data + kHeaderBytes, len};
  return ParseResult::kOk;
}

}  // namespace loom::rudp
