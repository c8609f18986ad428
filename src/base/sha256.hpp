// SHA-256 (FIPS 180-4) and HMAC-SHA256 (RFC 2104), enough for authenticating bootstrap
// connections without pulling in a crypto library, plus a kernel-backed random source.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>

namespace loom {

using Sha256Digest = std::array<uint8_t, 32>;

class Sha256 {
 public:
  static constexpr size_t kBlockBytes = 64;
  static constexpr size_t kDigestBytes = 32;

  Sha256();
  void update(const void* data, size_t size);
  void update(const std::string& data) { update(data.data(), data.size()); }
  // Pads and returns the digest; the object must not be updated afterwards.
  Sha256Digest finish();

 private:
  void compress(const uint8_t* block);

  std::array<uint32_t, 8> state_;
  std::array<uint8_t, kBlockBytes> buffer_{};
  size_t buffered_ = 0;
  uint64_t totalBytes_ = 0;
};

Sha256Digest sha256(const void* data, size_t size);
inline Sha256Digest sha256(const std::string& data) { return sha256(data.data(), data.size()); }

// Incremental HMAC so that callers can feed a message in pieces without concatenating them.
class HmacSha256 {
 public:
  HmacSha256(const void* key, size_t keySize);
  void update(const void* data, size_t size) { inner_.update(data, size); }
  void update(const std::string& data) { inner_.update(data); }
  Sha256Digest finish();

 private:
  Sha256 inner_;
  std::array<uint8_t, Sha256::kBlockBytes> outerPad_{};
};

Sha256Digest hmacSha256(const void* key, size_t keySize, const void* data, size_t size);

// Compares without an early exit, so that the time taken does not reveal how many leading
// bytes of a forged MAC were right.
bool constantTimeEqual(const void* a, const void* b, size_t size);

// Cryptographically strong bytes from getrandom(2); throws loomSystemError if unavailable.
void randomBytes(void* out, size_t size);

std::string toHex(const void* data, size_t size);

}  // namespace loom
