#include "device/cpu/streaming_copy.hpp"

#include <cstdint>
#include <cstring>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace loom {

void streamingCopy(void* dst, const void* src, size_t bytes) {
#if defined(__x86_64__)
  auto* d = static_cast<char*>(dst);
  auto* s = static_cast<const char*>(src);
  // Align the destination to 64 bytes with an ordinary copy; stream whole lines after that.
  size_t head = (64 - (reinterpret_cast<uintptr_t>(d) & 63)) & 63;
  if (bytes < head + 256) {
    std::memcpy(dst, src, bytes);
    return;
  }
  std::memcpy(d, s, head);
  d += head, s += head, bytes -= head;
  size_t lines = bytes / 64;
  for (size_t i = 0; i < lines; ++i, d += 64, s += 64) {
#if defined(__AVX__)
    __m256i a = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(s));
    __m256i b = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(s + 32));
    _mm256_stream_si256(reinterpret_cast<__m256i*>(d), a);
    _mm256_stream_si256(reinterpret_cast<__m256i*>(d + 32), b);
#else
    for (int k = 0; k < 4; ++k)
      _mm_stream_si128(reinterpret_cast<__m128i*>(d + 16 * k),
                       _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + 16 * k)));
#endif
  }
  std::memcpy(d, s, bytes % 64);
  _mm_sfence();  // the streamed lines become visible before any later flag store
#else
  std::memcpy(dst, src, bytes);
#endif
}

}  // namespace loom
