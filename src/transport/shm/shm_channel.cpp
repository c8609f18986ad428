#include "transport/shm/shm_channel.hpp"

#include <algorithm>
#include <cstring>

namespace loom {

ShmChannel::ShmChannel(const ShmArena& arena, ChannelClass cls, int self, int peer, int peerRank)
    : peer_(peerRank >= 0 ? peerRank : peer),
      capacity_(arena.channelBytes()),
      out_(arena.channelHeader(cls, self, peer)),
      outData_(arena.channelData(cls, self, peer)),
      in_(arena.channelHeader(cls, peer, self)),
      inData_(arena.channelData(cls, peer, self)) {
  // A communicator's channels start empty and only one ShmChannel per direction exists, so the
  // shared counters are the truth at construction.
  head_ = out_->head.value.load(std::memory_order_relaxed);
  peerTail_ = out_->tail.value.load(std::memory_order_acquire);
  tail_ = in_->tail.value.load(std::memory_order_relaxed);
  peerHead_ = in_->head.value.load(std::memory_order_acquire);
}

size_t ShmChannel::trySend(const void* data, size_t bytes) {
  if (bytes == 0) return 0;
  size_t want = roundUp8(bytes);
  if (head_ - peerTail_ + want > capacity_)
    peerTail_ = out_->tail.value.load(std::memory_order_acquire);
  size_t room = capacity_ - static_cast<size_t>(head_ - peerTail_);
  size_t take = std::min(room, want);  // both multiples of 8
  if (take == 0) return 0;
  size_t real = std::min(take, bytes);
  const char* src = static_cast<const char*>(data);
  size_t pos = static_cast<size_t>(head_ % capacity_);
  size_t first = std::min(take, capacity_ - pos);
  std::memcpy(outData_ + pos, src, std::min(first, real));
  if (real > first) std::memcpy(outData_, src + first, real - first);
  if (take > real) {
    // Zero the pad so the stream never exposes stale bytes.
    size_t padPos = static_cast<size_t>((head_ + real) % capacity_);
    std::memset(outData_ + padPos, 0, take - real);  // pad < 8 bytes and 8-aligned end: no wrap
  }
  head_ += take;
  out_->head.value.store(head_, std::memory_order_release);
  return real;
}

std::span<const char> ShmChannel::peek(size_t maxBytes) {
  if (peerHead_ == tail_) peerHead_ = in_->head.value.load(std::memory_order_acquire);
  size_t avail = static_cast<size_t>(peerHead_ - tail_);
  if (avail == 0) return {};
  size_t pos = static_cast<size_t>(tail_ % capacity_);
  size_t len = std::min({avail, capacity_ - pos, roundUp8(maxBytes)});
  return {inData_ + pos, len};
}

void ShmChannel::consume(size_t bytes) {
  tail_ += roundUp8(bytes);
  in_->tail.value.store(tail_, std::memory_order_release);
}

}  // namespace loom
