#include "transport/checked_channel.hpp"

#include <algorithm>
#include <cstring>

namespace loom {

static_assert(sizeof(CallSignature) == 24, "the header is three words, 8-byte granular");

size_t CheckedChannel::trySend(const void* data, size_t bytes) {
  if (!sendPending() || bytes == 0) return inner_->trySend(data, bytes);
  // The header and the call's first transfer are one stream; splitting them into two transfers
  // is the same bytes (the header is a multiple of 8), so the receiver never knows which it was.
  const char* header = reinterpret_cast<const char*>(&check_.mine) + sentHeader_;
  size_t headerLeft = kHeaderBytes - sentHeader_;
  size_t taken = 0;
  if (bytes <= kCombineBytes) {
    std::memcpy(combined_.data(), header, headerLeft);
    std::memcpy(combined_.data() + headerLeft, data, bytes);
    taken = inner_->trySend(combined_.data(), headerLeft + bytes);
  } else {
    taken = inner_->trySend(header, headerLeft);
  }
  if (taken < headerLeft) {
    sentHeader_ += taken;
    return 0;
  }
  sentHeader_ = 0;
  sentSeq_ = check_.mine.seq;
  if (bytes <= kCombineBytes) return taken - headerLeft;
  return inner_->trySend(data, bytes);
}

bool CheckedChannel::receiveHeader(bool alone) {
  while (receivedHeader_ < kHeaderBytes) {
    char* at = reinterpret_cast<char*>(&incoming_) + receivedHeader_;
    const size_t left = kHeaderBytes - receivedHeader_;
    size_t n = 0;
    if (alone) {
      n = inner_->tryReceive(at, left);
    } else {
      std::span<const char> span = inner_->peek(left);
      n = std::min(span.size(), left);
      if (n > 0) {
        std::memcpy(at, span.data(), n);
        inner_->consume(n);
      }
    }
    if (n == 0) return false;
    receivedHeader_ += n;
  }
  receivedHeader_ = 0;
  if (!(incoming_ == check_.mine)) onMismatch_(inner_->peer(), incoming_);
  receivedSeq_ = check_.mine.seq;
  return true;
}

std::span<const char> CheckedChannel::peek(size_t maxBytes) {
  if (receivePending() && !receiveHeader(false)) return {};
  return inner_->peek(maxBytes);
}

size_t CheckedChannel::tryReceive(void* dst, size_t bytes) {
  // A first transfer too large to travel with the header (kCombineBytes) came after it in a send
  // of its own: reading the header alone (24 bytes, a multiple of 8: a transfer of its own) lets
  // the data land in place. A peek would read ahead up to a socket channel's whole staging
  // buffer and the data would be copied out of it. Smaller ones came in one piece with the
  // header, which one peek takes whole.
  const bool alone = bytes > kCombineBytes && inner_->receivesDirect();
  if (bytes > 0 && receivePending() && !receiveHeader(alone)) return 0;
  return inner_->tryReceive(dst, bytes);
}

}  // namespace loom
