// A Channel over one rudp flow: trySend copies into the flow's send ring, the receive calls copy
// out of its receive ring, both without the flow's mutex (only the bookkeeping around a copy
// takes it: the ring bytes being copied are ones no other thread touches then), so the progress
// thread's receive path never waits for a copy. A call that finds nothing to read (or no
// room to send) first reads the sockets itself (RudpEngine::receiveHere), then looks again; the
// engine's progress thread does the timers, and the receiving while no channel is being called.
// A send transmits from the calling thread when no other thread is sending (RudpEngine::sendNow),
// so a message does not wait for the thread to be scheduled. Waits poll the sockets (addPollFds)
// and an eventfd the thread signals when bytes arrive (receiving), or a one-page pipe whose write
// end polls POLLOUT unless a send found the ring full (sending). (Readers that read the sockets
// while the thread polled them too were measured slower on a loaded 2-core host: both woke for
// every datagram; the thread now leaves the sockets alone while callers are active.) With
// LOOM_RUDP_CALLER_RECEIVES=0 the thread alone receives and waits block on the eventfd or the
// pipe. A failed flow (peer unreachable or reset) makes every call throw loomRemoteError naming
// the peer, once the bytes that did arrive have been read.
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
  // With callers receiving, a waiting caller also wakes for the sockets: it reads them itself.
  void addPollFds(PollSet& set, bool sending) const override {
    Channel::addPollFds(set, sending);
    if (engine_.callerReceives()) engine_.addSockets(set);
  }

 private:
  [[noreturn]] void throwFailed() const;
  // With the lock held: nothing to read now; arm the wake-up and the liveness probes.
  void noteEmpty();
  // One attempt of tryReceive / peek / trySend, under the flow's lock; `moved` says whether it
  // moved anything.
  size_t receiveOnce(char* out, size_t bytes, bool& moved);
  std::span<const char> peekOnce(size_t maxBytes, bool& moved);
  size_t sendOnce(const char* src, size_t bytes, bool& moved);
  // A channel call: attempt(moved) once; if it moved nothing and callers receive, the sockets are
  // read here (the bytes a reader waits for, the ACKs that free a full ring) instead of waiting for
  // the thread to read them and wake this caller, and it is attempted once more. `self`: the
  // flow whose reader is calling (not signalled, it looks again), null for a send.
  template <typename Attempt>
  auto withSocketsRead(RudpFlowState* self, Attempt&& attempt) {
    engine_.noteCaller();
    bool moved = false;
    auto result = attempt(moved);
    if (!moved && engine_.callerReceives()) {
      engine_.receiveHere(self);
      result = attempt(moved);
    }
    return result;
  }

  RudpEngine& engine_;
  RudpFlowState& st_;
  size_t sentAhead_ = 0;  // bytes of the current transfer sent beyond what trySend reported
  size_t recvAhead_ = 0;  // bytes of the current transfer received beyond what was reported
};

}  // namespace loom
