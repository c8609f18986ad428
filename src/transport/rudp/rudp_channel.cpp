#include "transport/rudp/rudp_channel.hpp"

#include <unistd.h>

#include <cstring>
#include <mutex>

#include "base/error.hpp"

namespace loom {

namespace {

// Bytes copied into the send ring before they are sent, and out of the receive ring per call.
constexpr size_t kCopySlice = 1 << 20;

}  // namespace

void RudpChannel::throwFailed() const {
  LOOM_THROW(loomRemoteError, "rudp transport: ", engine_.name(st_.peer), ": ", st_.flow.failure());
}

void RudpChannel::noteEmpty() {
  // A wake-up still pending is stale (its bytes were read): drain it, so that the next wait
  // blocks until new bytes arrive. Only here, and only when one was signalled: reading the
  // eventfd on every call cost a system call per piece while the bytes were flowing.
  st_.takeWakeup();
  st_.flow.setReceiveWaiting(true);
  if (st_.flow.failed()) throwFailed();
}

size_t RudpChannel::trySend(const void* data, size_t bytes) {
  if (bytes == 0) return 0;
  const char* src = static_cast<const char*>(data);
  return withSocketsRead(nullptr, [&](bool& moved) { return sendOnce(src, bytes, moved); });
}

size_t RudpChannel::sendOnce(const char* src, size_t bytes, bool& movedAny) {
  const size_t padded = roundUp8(bytes);
  size_t done = sentAhead_;
  size_t moved = 0;
  while (done < padded) {
    uint64_t at;
    size_t room;
    {
      std::lock_guard<std::mutex> lock(st_.mu);
      if (st_.flow.failed()) throwFailed();
      room = st_.flow.writable();
      at = st_.flow.queuedEnd();
      if (room == 0 && !st_.sendBlocked) {
        // Full: make the write end of the pipe stop polling POLLOUT until the thread frees room.
        char one = 1;
        ssize_t r = write(st_.roomPipe[1].get(), &one, 1);
        (void)r;
        st_.sendBlocked = true;
      }
    }
    if (room == 0) break;
    // The copy runs unlocked (Flow::copyIn): the thread's receive path, which needs this lock
    // for every datagram, does not wait for a slice of copying.
    const size_t n =
        done < bytes ? std::min({room, bytes - done, kCopySlice}) : std::min(room, padded - done);
    st_.flow.copyIn(at, done < bytes ? src + done : nullptr, n);
    {
      std::lock_guard<std::mutex> lock(st_.mu);
      st_.flow.commitWrite(n);
    }
    done += n;
    moved += n;
    if (done < bytes && moved >= kCopySlice) break;  // sent now; the caller comes back
  }
  movedAny = moved > 0;
  if (moved > 0) engine_.sendNow(st_);
  return wholeGroups(done, bytes, padded, sentAhead_);
}

std::span<const char> RudpChannel::peek(size_t maxBytes) {
  return withSocketsRead(&st_, [&](bool& moved) { return peekOnce(maxBytes, moved); });
}

std::span<const char> RudpChannel::peekOnce(size_t maxBytes, bool& moved) {
  std::lock_guard<std::mutex> lock(st_.mu);
  std::span<const char> span = st_.flow.readable(roundUp8(maxBytes));
  // Whole 8-byte groups only: a reduction must never see part of an element.
  span = span.first(span.size() & ~size_t{7});
  moved = !span.empty();
  if (span.empty()) {
    noteEmpty();
  } else {
    st_.flow.setReceiveWaiting(false);
  }
  return span;
}

void RudpChannel::consume(size_t bytes) {
  engine_.noteCaller();
  bool tell;
  {
    std::lock_guard<std::mutex> lock(st_.mu);
    tell = st_.flow.consume(roundUp8(bytes));
  }
  if (tell) engine_.sendNow(st_);
}

size_t RudpChannel::tryReceive(void* dst, size_t bytes) {
  if (bytes == 0) return 0;
  char* out = static_cast<char*>(dst);
  return withSocketsRead(&st_, [&](bool& moved) { return receiveOnce(out, bytes, moved); });
}

size_t RudpChannel::receiveOnce(char* out, size_t bytes, bool& movedAny) {
  const size_t padded = roundUp8(bytes);
  size_t done = recvAhead_;
  bool tell = false;
  std::unique_lock<std::mutex> lock(st_.mu);
  // The rest of this transfer's real bytes go straight to their destination as they arrive;
  // those already in the ring are copied below.
  if (done < bytes) st_.flow.post(out + done, bytes - done);
  size_t moved = 0;
  while (done < padded && moved < 4 * kCopySlice) {
    if (size_t direct = st_.flow.readableDirect(); direct > 0) {
      tell |= st_.flow.consume(direct);  // already in place
      done += direct;
      continue;
    }
    std::span<const char> span = st_.flow.readable(std::min(padded - done, kCopySlice));
    if (span.empty()) break;
    const size_t n = span.size();
    const size_t real = done < bytes ? std::min(n, bytes - done) : 0;
    if (real > 0) {
      // Unlocked: the span stays put until consumed (arriving bytes land beyond it), and the
      // thread's receive path need not wait for the copy.
      lock.unlock();
      std::memcpy(out + done, span.data(), real);  // the rest is padding
      lock.lock();
    }
    tell |= st_.flow.consume(n);
    done += n;
    moved += n;
  }
  movedAny = done != recvAhead_;
  if (!movedAny) {
    noteEmpty();
  } else {
    st_.flow.setReceiveWaiting(false);
  }
  lock.unlock();
  if (tell) engine_.sendNow(st_);
  return wholeGroups(done, bytes, padded, recvAhead_);
}

}  // namespace loom
