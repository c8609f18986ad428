#include "transport/rudp/rudp_packet.hpp"

#include <algorithm>
#include <cstring>

#if defined(__AVX2__)
#include <immintrin.h>
#endif

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
                 kOffOffset = 40, kOffTsval = 48, kOffTsecr = 56, kOffDup = 64, kOffMac = 72;
static_assert(kOffMac + 8 == kHeaderBytes);
// NH key words: two per 8 payload bytes, and the second sum's key starts 4 words further.
constexpr size_t kNhWords = (kMaxPayload + 7) / 8 * 2 + 4;

}  // namespace

std::array<uint64_t, 2> nhHash(const uint32_t* k, const void* data, size_t bytes) {
  // Two sums with keys 4 words apart (Toeplitz): two payloads collide under both with a chance
  // of about 2^-64.
  const char* p = static_cast<const char*>(data);
  uint64_t a = 0, b = 0;
  size_t i = 0;
#if defined(__AVX2__)
  __m256i va = _mm256_setzero_si256(), vb = _mm256_setzero_si256();
  for (; i + 32 <= bytes; i += 32) {
    __m256i m = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + i));
    const uint32_t* kk = k + i / 4;
    __m256i ta = _mm256_add_epi32(m, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(kk)));
    __m256i tb = _mm256_add_epi32(m, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(kk + 4)));
    // The odd words shifted onto the even ones: mul_epu32 multiplies the even words.
    va = _mm256_add_epi64(va, _mm256_mul_epu32(ta, _mm256_srli_epi64(ta, 32)));
    vb = _mm256_add_epi64(vb, _mm256_mul_epu32(tb, _mm256_srli_epi64(tb, 32)));
  }
  alignas(32) uint64_t la[4], lb[4];
  _mm256_store_si256(reinterpret_cast<__m256i*>(la), va);
  _mm256_store_si256(reinterpret_cast<__m256i*>(lb), vb);
  a = la[0] + la[1] + la[2] + la[3];
  b = lb[0] + lb[1] + lb[2] + lb[3];
#endif
  auto pair = [&](uint32_t m0, uint32_t m1, const uint32_t* kk) {
    a += static_cast<uint64_t>(m0 + kk[0]) * static_cast<uint32_t>(m1 + kk[1]);
    b += static_cast<uint64_t>(m0 + kk[4]) * static_cast<uint32_t>(m1 + kk[5]);
  };
  for (; i + 8 <= bytes; i += 8) pair(load32(p + i), load32(p + i + 4), k + i / 4);
  if (i < bytes) {
    char last[8] = {};
    std::memcpy(last, p + i, bytes - i);
    pair(load32(last), load32(last + 4), k + i / 4);
  }
  return {a, b};
}

namespace {

// The MAC: SipHash over the header's fields and the payload's NH sums.
uint64_t mac(const PacketKeys& keys, const char* header, std::span<const char> payload) {
  char in[kOffMac + 16];
  std::memcpy(in, header, kOffMac);
  std::array<uint64_t, 2> sums = keys.payloadHash(payload.data(), payload.size());
  store64(in + kOffMac, sums[0]);
  store64(in + kOffMac + 8, sums[1]);
  return sipHash24(keys.mac(), in, sizeof(in));
}

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

PacketKeys::PacketKeys(const MacKey& secret) : mac_(secret), nh_(kNhWords + 1) {
  // NH's key: SipHash of a counter under the same secret, in 12-byte inputs (the MAC's are 88
  // bytes long: SipHash's length byte keeps the two uses apart).
  char in[12] = {'r', 'u', 'd', 'p', '-', 'n', 'h', '\0'};
  for (size_t i = 0; i < nh_.size(); i += 2) {
    store32(in + 8, static_cast<uint32_t>(i));
    uint64_t v = sipHash24(mac_, in, sizeof(in));
    nh_[i] = static_cast<uint32_t>(v);
    if (i + 1 < nh_.size()) nh_[i + 1] = static_cast<uint32_t>(v >> 32);
  }
}

std::array<uint64_t, 2> PacketKeys::payloadHash(const void* data, size_t bytes) const {
  return nhHash(nh_.data(), data, std::min(bytes, kMaxPayload));
}

void encodeHeader(const Header& h, const PacketKeys& keys, std::span<const char> payload,
                  char* out) {
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
  store64(out + kOffMac, mac(keys, out, payload));
}

ParseResult parseDatagram(const char* data, size_t bytes, const PacketKeys& keys, uint64_t commId,
                          uint32_t rank, Header& h, std::span<const char>& payload) {
  if (bytes < kHeaderBytes) return ParseResult::kShort;
  std::span<const char> p{data + kHeaderBytes, bytes - kHeaderBytes};
  ParseResult r = parsePacket(data, p, keys, commId, rank, h);
  if (r == ParseResult::kOk) payload = p;
  return r;
}

ParseResult parsePacket(const char* data, std::span<const char> payload, const PacketKeys& keys,
                        uint64_t commId, uint32_t rank, Header& h) {
  if (load32(data) != kMagic) return ParseResult::kBadMagic;
  if (static_cast<uint8_t>(data[4]) != kVersion) return ParseResult::kBadVersion;
  uint8_t type = static_cast<uint8_t>(data[5]);
  if (type < 1 || type > 4) return ParseResult::kBadType;
  uint32_t len = load32(data + kOffLen);
  if (len != payload.size() || len > kMaxPayload) return ParseResult::kBadLength;
  // Authenticate before trusting anything else in the header.
  if (mac(keys, data, payload) != load64(data + kOffMac)) return ParseResult::kBadMac;
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
  return ParseResult::kOk;
}

}  // namespace loom::rudp
