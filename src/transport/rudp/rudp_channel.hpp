// A Channel over one rudp flow: trySend copies into the flow's send ring, the receive calls copy
// out of its receive ring, both under the flow's mutex, and the engine's progress thread does
// the receiving, the timers and whatever the callers leave. A send transmits from the calling
// thread when no other thread is sending (RudpEngine::sendNow), so a message does not wait for
// the thread to be scheduled. Waits block on descriptors the thread makes ready: an eventfd when
// bytes arrive (POLLIN) and a one-page pipe whose write end polls POLLOUT unless a send found
// the ring full. (Readers that also polled the sockets and read them themselves were measured
// slower on a loaded 2-core host: the thread and the reader both woke for every datagram.) A failed
// flow (peer unreachable or reset) makes every call throw loomRemoteError naming the peer, once the
// bytes that did arrive have been read.
#pragma once

#include "transport/channel.hpp"
#include "transport/rudp/rudp_engine.hpp"

namespace loom {

class RudpChannel final : public Channel {
 public:
  RudpChannel(RudpEngine& engine, RudpFlowState& state) : engine_(engine), st_(state) {}
  int peer() const override { return st_.peer; }
  size_t trySend(const void* data, size_t bytes) override;
  std::span<const char> peek(size_t maxBytes) override;
  void consume(size_t bytes) override;
  size_t tryReceive(void* dst, size_t bytes) override;
  // The rest of a transfer is received straight into its destination (Flow::post).
  bool receivesDirect() const override { return true; }
  int pollFd(bool sending) const override {
    return sending ? st_.roomPipe[1].get() : st_.dataReady.get();
  }

 private:
  [[noreturn]] void throwFailed() const;
  // With the lock held: nothing to read now; arm the wake-up and the liveness probes.
  void noteEmpty();

  RudpEngine& engine_;
  RudpFlowState& st_;
  size_t sentAhead_ = 0;  // bytes of the current transfer sent beyond what trySend reported
  size_t recvAhead_ = 0;  // bytes of the current transfer received beyond what was reported
};

}  // namespace loom
