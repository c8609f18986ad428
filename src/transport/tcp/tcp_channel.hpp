// A channel to a rank on another node over one or more TCP connections ("streams"). The byte
// stream is cut into stripes of kStripeBytes; stripe i travels on stream i % streams, so a large
// transfer keeps every connection busy while both ends still agree, from the stream offset alone,
// where each byte is. Sends go from the caller's buffer straight to the kernel (sendmsg, no user
// copy); receives that copy (tryReceive) go from the kernel straight to their destination, and only
// receives that reduce read through a staging buffer (peek/consume).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "bootstrap/socket.hpp"
#include "transport/channel.hpp"

namespace loom {

class TcpChannel final : public Channel {
 public:
  static constexpr size_t kStripeBytes = 512 * 1024;

  // streams: connected, non-blocking sockets to the peer, in the same order on both ends.
  TcpChannel(int peer, std::vector<Socket> streams, size_t stagingBytes);
  int peer() const override { return peer_; }
  size_t trySend(const void* data, size_t bytes) override;
  std::span<const char> peek(size_t maxBytes) override;
  void consume(size_t bytes) override;
  bool receivesDirect() const override { return true; }
  size_t tryReceive(void* dst, size_t bytes) override;
  // The connection that carries the next byte of that direction: the only one progress can wait on.
  int pollFd(bool sending) const override {
    return streamAt(sending ? sendOffset_ : recvOffset_).fd();
  }
  size_t streams() const { return streams_.size(); }
  // Makes the peer see EOF on every connection now (safe while another thread uses them): how a
  // failing rank tells the ranks of other nodes that wait for it.
  void shutdown() {
    for (Socket& s : streams_) s.shutdown();
  }

 private:
  Socket& streamAt(uint64_t offset) { return streams_[(offset / kStripeBytes) % streams_.size()]; }
  const Socket& streamAt(uint64_t offset) const {
    return streams_[(offset / kStripeBytes) % streams_.size()];
  }
  static size_t stripeLeft(uint64_t offset) { return kStripeBytes - offset % kStripeBytes; }
  // Reads what has arrived into the staging buffer, in stream order, until it holds `want` bytes.
  void fill(size_t want);
  // One non-blocking read of at most len bytes from the stream that carries recvOffset_; 0 when
  // nothing is there. EOF is an error: the caller reads only bytes it still expects.
  size_t readSome(char* dst, size_t len);

  int peer_;
  std::vector<Socket> streams_;
  uint64_t sendOffset_ = 0;  // padded stream bytes handed to the kernel
  size_t sentAhead_ = 0;     // bytes of the current transfer sent beyond what trySend reported
  uint64_t recvOffset_ = 0;  // stream bytes taken from the kernel
  size_t recvAhead_ = 0;     // bytes of the current transfer received beyond what was reported
  std::vector<char> staging_;
  size_t readPos_ = 0, writePos_ = 0;  // staged bytes are staging_[readPos_, writePos_)
};

}  // namespace loom
