#include "base/sha256.hpp"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace loom {
namespace {

std::string hexOf(const Sha256Digest& d) { return toHex(d.data(), d.size()); }

std::string pattern(size_t n) {
  std::string s(n, '\0');
  for (size_t i = 0; i < n; ++i) s[i] = static_cast<char>(i % 251);
  return s;
}

// FIPS 180-2 appendix B (plus the empty message).
TEST(Sha256, Fips180Vectors) {
  EXPECT_EQ(hexOf(sha256("")), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(hexOf(sha256("abc")),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_EQ(hexOf(sha256("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq")),
            "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  EXPECT_EQ(hexOf(sha256(std::string(1000000, 'a'))),
            "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
}

// Lengths around the padding boundaries (55/56 bytes, one and two blocks).
TEST(Sha256, PaddingBoundaries) {
  struct Case {
    size_t size;
    const char* hex;
  };
  const Case cases[] = {
      {55, "463eb28e72f82e0a96c0a4cc53690c571281131f672aa229e0d45ae59b598b59"},
      {56, "da2ae4d6b36748f2a318f23e7ab1dfdf45acdc9d049bd80e59de82a60895f562"},
      {63, "29af2686fd53374a36b0846694cc342177e428d1647515f078784d69cdb9e488"},
      {64, "fdeab9acf3710362bd2658cdc9a29e8f9c757fcf9811603a8c447cd1d9151108"},
      {65, "4bfd2c8b6f1eec7a2afeb48b934ee4b2694182027e6d0fc075074f2fabb31781"},
      {119, "da18797ed7c3a777f0847f429724a2d8cd5138e6ed2895c3fa1a6d39d18f7ec6"},
      {120, "f52b23db1fbb6ded89ef42a23ce0c8922c45f25c50b568a93bf1c075420bbb7c"},
      {128, "471fb943aa23c511f6f72f8d1652d9c880cfa392ad80503120547703e56a2be5"},
  };
  for (const Case& c : cases) EXPECT_EQ(hexOf(sha256(pattern(c.size))), c.hex) << c.size;
}

TEST(Sha256, IncrementalMatchesOneShot) {
  std::string data = pattern(1000);
  for (size_t piece : {1u, 3u, 63u, 64u, 65u, 200u}) {
    Sha256 hash;
    for (size_t off = 0; off < data.size(); off += piece)
      hash.update(data.data() + off, std::min(piece, data.size() - off));
    EXPECT_EQ(hexOf(hash.finish()), hexOf(sha256(data))) << piece;
  }
}

// RFC 4231 test cases 1-7.
TEST(HmacSha256, Rfc4231Vectors) {
  struct Case {
    std::string key, data, hex;
  };
  const std::vector<Case> cases = {
      {std::string(20, '\x0b'), "Hi There",
       "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7"},
      {"Jefe", "what do ya want for nothing?",
       "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"},
      {std::string(20, '\xaa'), std::string(50, '\xdd'),
       "773ea91e36800e46854db8ebd09181a72959098b3ef8c122d9635514ced565fe"},
      {"\x01\x02\x03\x04\x05\x06\x07\x08\x09\x0a\x0b\x0c\x0d\x0e\x0f\x10\x11\x12\x13\x14\x15"
       "\x16\x17\x18\x19",
       std::string(50, '\xcd'), "82558a389a443c0ea4cc819899f2083a85f0faa3e578f8077a2e3ff46729665b"},
      {std::string(131, '\xaa'), "Test Using Larger Than Block-Size Key - Hash Key First",
       "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54"},
      {std::string(131, '\xaa'),
       "This is a test using a larger than block-size key and a larger than block-size data. The "
       "key needs to be hashed before being used by the HMAC algorithm.",
       "9b09ffa71b942fcb27635fbcd5b0e944bfdc63644f0713938a7f51535c3a35e2"},
  };
  for (const Case& c : cases) {
    Sha256Digest mac = hmacSha256(c.key.data(), c.key.size(), c.data.data(), c.data.size());
    EXPECT_EQ(hexOf(mac), c.hex) << c.data;
  }
  // Case 5 is specified truncated to 128 bits.
  std::string key(20, '\x0c'), data = "Test With Truncation";
  Sha256Digest mac = hmacSha256(key.data(), key.size(), data.data(), data.size());
  EXPECT_EQ(toHex(mac.data(), 16), "a3b6167473100ee06e0c796c2955552b");
}

TEST(HmacSha256, IncrementalMatchesOneShot) {
  std::string key = "Jefe";
  HmacSha256 mac(key.data(), key.size());
  mac.update("what do ya ");
  mac.update("want for nothing?");
  EXPECT_EQ(hexOf(mac.finish()),
            "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843");
}

TEST(ConstantTimeEqual, Compares) {
  EXPECT_TRUE(constantTimeEqual("abcd", "abcd", 4));
  EXPECT_FALSE(constantTimeEqual("abcd", "abce", 4));
  EXPECT_TRUE(constantTimeEqual("x", "y", 0));
}

TEST(RandomBytes, FillsAndDiffers) {
  uint8_t a[32] = {}, b[32] = {};
  randomBytes(a, sizeof(a));
  randomBytes(b, sizeof(b));
  EXPECT_NE(toHex(a, sizeof(a)), toHex(b, sizeof(b)));
  randomBytes(a, 0);  // a zero-length request is a no-op
}

}  // namespace
}  // namespace loom
