// A channel: an ordered, reliable byte stream between two ranks, one direction per end. Streams
// are 8-byte granular: every transfer is padded to a multiple of 8 bytes, so a readable span never
// splits an element of any data type. Calls never block; callers wait with waitUntil().
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstring>
#include <span>

#include "base/wait.hpp"

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

  // A descriptor that becomes ready (POLLOUT sending, POLLIN receiving) when the next trySend or
  // receive can move bytes, so that waits block in poll instead of spinning; -1 where there is
  // none (shared memory), whose waits spin, yield and sleep.
  virtual int pollFd(bool sending) const {
    (void)sending;
    return -1;
  }
  // Adds to a wait's set what the next trySend (sending) or receive waits for: by default
  // pollFd(sending) for POLLOUT or POLLIN; a channel that can also make progress itself when
  // other descriptors are ready (rudp's sockets) adds those too.
  virtual void addPollFds(PollSet& set, bool sending) const {
    set.add(pollFd(sending), sending ? POLLOUT : POLLIN);
  }

  // Whether tryReceive saves a copy over peek + copy + consume (a network channel reads the
  // kernel's buffer straight into the destination).
  virtual bool receivesDirect() const { return false; }
  // Receives the next part of a transfer of `bytes` real bytes into dst and returns how many real
  // bytes landed: a multiple of 8, or all of them (their padding then consumed too). Call it again
  // with dst and bytes advanced by the result; do not mix with peek inside one transfer.
  virtual size_t tryReceive(void* dst, size_t bytes) {
    std::span<const char> span = peek(bytes);
    size_t n = std::min(span.size(), bytes);
    if (n == 0) return 0;
    std::memcpy(dst, span.data(), n);
    consume(n);
    return n;
  }
};

constexpr size_t roundUp8(size_t bytes) { return (bytes + 7) & ~size_t{7}; }

// For transports that move bytes in pieces of any size: how much of a transfer of `bytes`
// (`padded` to 8) to report after moving `done` of it. All of it once done, else whole 8-byte
// groups only; the part of a group moved already is kept in `ahead`.
inline size_t wholeGroups(size_t done, size_t bytes, size_t padded, size_t& ahead) {
  if (done == padded) {
    ahead = 0;
    return bytes;
  }
  size_t reported = done & ~size_t{7};
  ahead = done - reported;
  return reported;
}

}  // namespace loom
