// A collective channel that carries the mismatch check (base/call_signature.hpp) for every
// transport at once: the first bytes a call moves in each direction of a channel are the call's
// 24-byte signature; the receiving end compares it with its own call's before any data. Small
// first transfers go out in one piece with the signature (one send, one receive on a socket); the
// rest of a call's bytes pass through untouched. Both ends must agree on whether the check is on
// (the communicator checks that at init). Two groups of ranks may run their calls over the same
// channels, each with its own wrapper: both ends of a channel run the same calls in the same
// order, so each wrapper's headers meet the peer's wrapper of the same group.
#pragma once

#include <array>
#include <functional>
#include <memory>

#include "base/call_signature.hpp"
#include "transport/channel.hpp"

namespace loom {

class CheckedChannel final : public Channel {
 public:
  // Throws the mismatch error: the signature `peer` sent for this rank's current call.
  using OnMismatch = std::function<void(int peer, const CallSignature& theirs)>;

  // Over `inner`, which outlives it (the communicator's transports own the channels; each group
  // of ranks that runs collectives over them wraps them with its own call check).
  CheckedChannel(Channel& inner, const CallCheck& check, OnMismatch onMismatch)
      : inner_(&inner), check_(check), onMismatch_(std::move(onMismatch)) {}
  Channel& inner() { return *inner_; }
  // The number of the last call whose signature came in from the peer (0: none yet): how far
  // this rank knows the peer got (timeout messages).
  uint64_t receivedSeq() const { return receivedSeq_; }

  int peer() const override { return inner_->peer(); }
  size_t trySend(const void* data, size_t bytes) override;
  std::span<const char> peek(size_t maxBytes) override;
  void consume(size_t bytes) override { inner_->consume(bytes); }
  int pollFd(bool sending) const override { return inner_->pollFd(sending); }
  void addPollFds(PollSet& set, bool sending) const override { inner_->addPollFds(set, sending); }
  bool receivesDirect() const override { return inner_->receivesDirect(); }
  size_t tryReceive(void* dst, size_t bytes) override;

 private:
  static constexpr size_t kHeaderBytes = sizeof(CallSignature);
  static constexpr size_t kCombineBytes = 2048;  // first transfers up to this go with the header
  bool sendPending() const { return check_.enabled && sentSeq_ != check_.mine.seq; }
  bool receivePending() const { return check_.enabled && receivedSeq_ != check_.mine.seq; }
  // Reads what has arrived of the peer's header; true once it is complete and matched. `alone`:
  // with tryReceive, exactly the header's bytes (a direct-receiving channel).
  bool receiveHeader(bool alone);

  Channel* inner_;
  const CallCheck& check_;
  OnMismatch onMismatch_;
  uint64_t sentSeq_ = 0, receivedSeq_ = 0;      // calls whose header went out / came in whole
  size_t sentHeader_ = 0, receivedHeader_ = 0;  // bytes of the current header moved
  CallSignature incoming_;
  std::array<char, kHeaderBytes + kCombineBytes> combined_;
};

}  // namespace loom
