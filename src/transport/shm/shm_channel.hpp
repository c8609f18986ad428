// A pair channel in the shared arena: a single-producer single-consumer ring whose head and tail
// are byte counters in shared memory. Each direction of a pair is its own ring.
#pragma once

#include "transport/channel.hpp"
#include "transport/shm/shm_arena.hpp"

namespace loom {

class ShmChannel final : public Channel {
 public:
  // The end of `self` towards `peer` (indices in the arena): sends go into ring self->peer,
  // receives read ring peer->self. peerRank is the peer's rank in the communicator (peer()), when
  // the arena holds only the ranks of one node.
  ShmChannel(const ShmArena& arena, ChannelClass cls, int self, int peer, int peerRank = -1);
  int peer() const override { return peer_; }
  size_t trySend(const void* data, size_t bytes) override;
  std::span<const char> peek(size_t maxBytes) override;
  void consume(size_t bytes) override;

 private:
  int peer_;
  size_t capacity_;
  ChannelHeader* out_;
  char* outData_;
  ChannelHeader* in_;
  char* inData_;
  uint64_t head_ = 0;      // our copy of out_->head (we are its only writer)
  uint64_t tail_ = 0;      // our copy of in_->tail (we are its only writer)
  uint64_t peerTail_ = 0;  // last seen out_->tail, to avoid reading it when there is room
  uint64_t peerHead_ = 0;  // last seen in_->head
};

}  // namespace loom
