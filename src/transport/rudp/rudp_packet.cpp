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
// NH key words: two per 8 bytes of header fields and payload, and the second sum's key starts 4
// words further.
constexpr size_t kHeaderNhWords = kOffMac / 4;
constexpr size_t kNhWords = kHeaderNhWords + (kMaxPayload + 7) / 8 * 2 + 4;
static_assert(kOffMac % 8 == 0);

}  // namespace

namespace {

// NH's running sums over one or more pieces (each a whole number of 8-byte words but the last),
// in vector lanes and scalars, added up once at the end: the pieces of a packet (header fields,
// payload) cost one reduction, not one each.
#if defined(__AVX512F__) && defined(__AVX512BW__)
#define LOOM_NH_AVX512 1
// GCC 12 warns inside its own AVX-512 intrinsics (_mm512_undefined_epi32; GCC bug 105593).
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

struct NhSums {
#if defined(LOOM_NH_AVX512)
  __m512i a = _mm512_setzero_si512(), b = _mm512_setzero_si512();
#elif defined(__AVX2__)
  __m256i a = _mm256_setzero_si256(), b = _mm256_setzero_si256();
#endif
  uint64_t sa = 0, sb = 0;
};

void nhAdd(NhSums& s, const uint32_t* k, const char* p, size_t bytes) {
  // Two sums with keys 4 words apart (Toeplitz): two inputs collide under both with a chance of
  // about 2^-64. mul_epu32 multiplies the even words: the odd ones are shifted onto them.
  size_t i = 0;
#if defined(LOOM_NH_AVX512)
  for (; i + 64 <= bytes; i += 64) {
    __m512i m = _mm512_loadu_si512(p + i);
    __m512i ta = _mm512_add_epi32(m, _mm512_loadu_si512(k + i / 4));
    __m512i tb = _mm512_add_epi32(m, _mm512_loadu_si512(k + i / 4 + 4));
    s.a = _mm512_add_epi64(s.a, _mm512_mul_epu32(ta, _mm512_srli_epi64(ta, 32)));
    s.b = _mm512_add_epi64(s.b, _mm512_mul_epu32(tb, _mm512_srli_epi64(tb, 32)));
  }
  if (i < bytes) {
    // The tail, zero-padded to whole words by a masked load; lanes beyond them stay out of the
    // sums (a zero word still adds key times key), and masked loads read no key word past them.
    const size_t rest = bytes - i, words = (rest + 7) / 8;
    const __mmask64 byteMask = (uint64_t{1} << rest) - 1;
    const __mmask16 keyMask = static_cast<__mmask16>((1u << (2 * words)) - 1);
    const __mmask8 laneMask = static_cast<__mmask8>((1u << words) - 1);
    __m512i m = _mm512_maskz_loadu_epi8(byteMask, p + i);
    __m512i ta = _mm512_add_epi32(m, _mm512_maskz_loadu_epi32(keyMask, k + i / 4));
    __m512i tb = _mm512_add_epi32(m, _mm512_maskz_loadu_epi32(keyMask, k + i / 4 + 4));
    s.a =
        _mm512_mask_add_epi64(s.a, laneMask, s.a, _mm512_mul_epu32(ta, _mm512_srli_epi64(ta, 32)));
    s.b =
        _mm512_mask_add_epi64(s.b, laneMask, s.b, _mm512_mul_epu32(tb, _mm512_srli_epi64(tb, 32)));
  }
  return;
#elif defined(__AVX2__)
  for (; i + 32 <= bytes; i += 32) {
    __m256i m = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + i));
    const uint32_t* kk = k + i / 4;
    __m256i ta = _mm256_add_epi32(m, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(kk)));
    __m256i tb = _mm256_add_epi32(m, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(kk + 4)));
    s.a = _mm256_add_epi64(s.a, _mm256_mul_epu32(ta, _mm256_srli_epi64(ta, 32)));
    s.b = _mm256_add_epi64(s.b, _mm256_mul_epu32(tb, _mm256_srli_epi64(tb, 32)));
  }
#endif
  auto pair = [&](uint32_t m0, uint32_t m1, const uint32_t* kk) {
    s.sa += static_cast<uint64_t>(m0 + kk[0]) * static_cast<uint32_t>(m1 + kk[1]);
    s.sb += static_cast<uint64_t>(m0 + kk[4]) * static_cast<uint32_t>(m1 + kk[5]);
  };
  for (; i + 8 <= bytes; i += 8) pair(load32(p + i), load32(p + i + 4), k + i / 4);
  if (i < bytes) {
    char last[8] = {};
    std::memcpy(last, p + i, bytes - i);
    pair(load32(last), load32(last + 4), k + i / 4);
  }
}

std::array<uint64_t, 2> nhFinish(const NhSums& s) {
#if defined(LOOM_NH_AVX512)
  // Summed as uint64 (the hash is modulo 2^64): GCC's _mm512_reduce_add_epi64 adds signed
  // 64-bit lanes, an overflow UBSan reports.
  alignas(64) uint64_t la[8], lb[8];
  _mm512_store_si512(la, s.a);
  _mm512_store_si512(lb, s.b);
  uint64_t a = s.sa, b = s.sb;
  for (int lane = 0; lane < 8; ++lane) {
    a += la[lane];
    b += lb[lane];
  }
  return {a, b};
#elif defined(__AVX2__)
  alignas(32) uint64_t la[4], lb[4];
  _mm256_store_si256(reinterpret_cast<__m256i*>(la), s.a);
  _mm256_store_si256(reinterpret_cast<__m256i*>(lb), s.b);
  return {s.sa + la[0] + la[1] + la[2] + la[3], s.sb + lb[0] + lb[1] + lb[2] + lb[3]};
#else
  return {s.sa, s.sb};
#endif
}

#if defined(LOOM_NH_AVX512)
#pragma GCC diagnostic pop
#endif

}  // namespace

std::array<uint64_t, 2> nhHash(const uint32_t* k, const void* data, size_t bytes) {
  NhSums s;
  nhAdd(s, k, static_cast<const char*>(data), bytes);
  return nhFinish(s);
}

namespace {

// The MAC: SipHash over the NH sums of the header's fields followed by the payload, and the
// payload's length (NH alone does not tell a payload from one with zero bytes appended).
uint64_t mac(const PacketKeys& keys, const char* header, std::span<const char> payload) {
  std::array<uint64_t, 2> sums = keys.packetHash(header, payload.data(), payload.size());
  char in[24];
  store64(in, sums[0]);
  store64(in + 8, sums[1]);
  store64(in + 16, payload.size());
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
  // NH's key: SipHash of a counter under the same secret, in 12-byte inputs (the MAC's are 24
  // bytes long: SipHash's length byte keeps the two uses apart).
  char in[12] = {'r', 'u', 'd', 'p', '-', 'n', 'h', '\0'};
  for (size_t i = 0; i < nh_.size(); i += 2) {
    store32(in + 8, static_cast<uint32_t>(i));
    uint64_t v = sipHash24(mac_, in, sizeof(in));
    nh_[i] = static_cast<uint32_t>(v);
    if (i + 1 < nh_.size()) nh_[i + 1] = static_cast<uint32_t>(v >> 32);
  }
}

std::array<uint64_t, 2> PacketKeys::packetHash(const char* header, const void* payload,
                                               size_t bytes) const {
  // NH over the concatenation: a sum over word pairs, so the header's part (a whole number of
  // pairs) and the payload's part with the key words after the header's add up.
  NhSums s;
  nhAdd(s, nh_.data(), header, kOffMac);
  nhAdd(s, nh_.data() + kHeaderNhWords, static_cast<const char*>(payload),
        std::min(bytes, kMaxPayload));
  return nhFinish(s);
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
