#include "transport/tcp/tcp_channel.hpp"

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <sys/uio.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "base/error.hpp"

namespace loom {

namespace {

constexpr char kZeros[8] = {};
// Reads of this many bytes or more acknowledge at once (readSome).
constexpr size_t kQuickAckMinBytes = 16 * 1024;

[[noreturn]] void throwSocketError(const Socket& s, const char* what, int err) {
  if (err == EPIPE || err == ECONNRESET || err == ENOTCONN || err == ETIMEDOUT)
    LOOM_THROW(loomRemoteError, "connection to ", s.peer(), " lost while ", what, " (",
               std::strerror(err), ")");
  LOOM_THROW(loomSystemError, what, " ", s.peer(), ": ", std::strerror(err));
}

}  // namespace

TcpChannel::TcpChannel(int peer, std::vector<Socket> streams, size_t stagingBytes)
    : peer_(peer), streams_(std::move(streams)), staging_(std::max<size_t>(stagingBytes, 4096)) {
  if (streams_.empty())
    LOOM_THROW(loomInternalError, "a TCP channel needs at least one connection");
}

size_t TcpChannel::trySend(const void* data, size_t bytes) {
  if (bytes == 0) return 0;
  const char* src = static_cast<const char*>(data);
  const size_t padded = roundUp8(bytes);
  size_t done = sentAhead_;  // position in this transfer, padding included
  while (done < padded) {
    Socket& s = streamAt(sendOffset_);
    size_t len = std::min(padded - done, stripeLeft(sendOffset_));
    size_t real = done < bytes ? std::min(len, bytes - done) : 0;
    iovec iov[2];
    int count = 0;
    if (real > 0) iov[count++] = {const_cast<char*>(src + done), real};
    if (len > real) iov[count++] = {const_cast<char*>(kZeros), len - real};
    msghdr msg{};
    msg.msg_iov = iov;
    msg.msg_iovlen = count;
    ssize_t sent = sendmsg(s.fd(), &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (sent < 0) {
      if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) break;
      throwSocketError(s, "sending to", errno);
    }
    done += static_cast<size_t>(sent);
    sendOffset_ += static_cast<size_t>(sent);
    if (static_cast<size_t>(sent) < len) break;
  }
  return wholeGroups(done, bytes, padded, sentAhead_);
}

size_t TcpChannel::readSome(char* dst, size_t len) {
  Socket& s = streamAt(recvOffset_);
  len = std::min(len, stripeLeft(recvOffset_));
  ssize_t got = recv(s.fd(), dst, len, MSG_DONTWAIT);
  if (got == 0)
    LOOM_THROW(loomRemoteError, "connection closed by ", s.peer(),
               " while this rank still expected data from it (did it exit or fail?)");
  if (got < 0) {
    if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) return 0;
    throwSocketError(s, "receiving from", errno);
  }
  recvOffset_ += static_cast<size_t>(got);
  // Acknowledge a bulk read at once. A socket that both sends and receives (a ring's two
  // directions, a node pair's exchange) falls into Linux's delayed-ACK ("pingpong") mode, and a
  // receive buffer the reader drains in bursts holds its ACKs back; the sender, out of window,
  // then waits for its loss probe (10-25 ms, answered by a duplicate-SACK: nothing was lost). 2x4
  // namespace nodes, hierarchical allgather of 2 and 4 MiB, 12 runs of 60 calls: 34 spurious
  // probes and 40-55 ms of stalls per run before, none and 4-8 ms after. Linux leaves quick-ACK
  // mode by itself, hence every such read; small reads skip the system call (a sender of small
  // messages is not out of window; on every read, 2x4 alltoall of 1-8 KiB took 4-6 us more).
  if (static_cast<size_t>(got) >= kQuickAckMinBytes) {
    int quick = 1;
    setsockopt(s.fd(), IPPROTO_TCP, TCP_QUICKACK, &quick, sizeof(quick));
  }
  return static_cast<size_t>(got);
}

void TcpChannel::fill(size_t want) {
  if (readPos_ == writePos_) readPos_ = writePos_ = 0;
  if (writePos_ - readPos_ >= want) return;
  if (readPos_ > 0 && staging_.size() - writePos_ < staging_.size() / 2) {
    std::memmove(staging_.data(), staging_.data() + readPos_, writePos_ - readPos_);
    writePos_ -= readPos_;
    readPos_ = 0;
  }
  while (writePos_ - readPos_ < want && writePos_ < staging_.size()) {
    size_t len = staging_.size() - writePos_;
    size_t got = readSome(staging_.data() + writePos_, len);
    writePos_ += got;
    // A short read ends this pass unless it stopped at a stripe boundary (next stream).
    if (got == 0 || (got < len && recvOffset_ % kStripeBytes != 0)) break;
  }
}

std::span<const char> TcpChannel::peek(size_t maxBytes) {
  size_t want = std::min(roundUp8(maxBytes), staging_.size());
  fill(want);
  // Whole 8-byte groups only: a reduction must never see part of an element.
  size_t len = std::min((writePos_ - readPos_) & ~size_t{7}, want);
  return {staging_.data() + readPos_, len};
}

void TcpChannel::consume(size_t bytes) {
  readPos_ += std::min(roundUp8(bytes), writePos_ - readPos_);
}

size_t TcpChannel::tryReceive(void* dst, size_t bytes) {
  if (bytes == 0) return 0;
  char* out = static_cast<char*>(dst);
  const size_t padded = roundUp8(bytes);
  size_t done = recvAhead_;
  char pad[8];
  auto target = [&](size_t pos) { return pos < bytes ? out + pos : pad + (pos - bytes); };
  auto limit = [&](size_t pos) { return pos < bytes ? bytes - pos : padded - pos; };
  // Bytes already staged come first: the stream is ordered.
  while (done < padded && readPos_ < writePos_) {
    size_t n = std::min(limit(done), writePos_ - readPos_);
    std::memcpy(target(done), staging_.data() + readPos_, n);
    readPos_ += n;
    done += n;
  }
  while (done < padded) {
    size_t len = limit(done);
    size_t got = readSome(target(done), len);
    done += got;
    if (got == 0 || (got < len && recvOffset_ % kStripeBytes != 0)) break;
  }
  return wholeGroups(done, bytes, padded, recvAhead_);
}

}  // namespace loom
