// A channel: an ordered, reliable byte stream between two ranks, one direction per end. Streams
// are 8-byte granular: every transfer is padded to a multiple of 8 bytes, so a readable span never
// splits an element of any data type. Calls never block; callers wait with waitUntil().
#pragma once

#include <cstddef>
#include <span>

namespace loom {

class Channel {
 public:
  virtual ~Channel() = default;
  virtual int peer() const = 0;
  // Sends the next part of a transfer of `bytes` real bytes starting at data: writes as much as the
  // channel has room for (padding the final partial 8-byte group with zeros) and returns how many
  // real bytes were taken, possibly 0.
  virtual size_t trySend(const void* data, size_t bytes) = 0;
  // A readable contiguous span of at most maxBytes (rounded up to 8), possibly empty; stays valid
  // until consume().
  virtual std::span<const char> peek(size_t maxBytes) = 0;
  // Releases bytes of the last peek (a multiple of 8, or the padded end of a transfer).
  virtual void consume(size_t bytes) = 0;
};

constexpr size_t roundUp8(size_t bytes) { return (bytes + 7) & ~size_t{7}; }

}  // namespace loom
