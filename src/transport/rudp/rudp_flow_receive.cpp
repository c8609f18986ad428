// Packets in: data packets land at their stream offset, in the ring or the posted buffer, in any
// order; the in-order prefix grows as the holes fill.
#include <algorithm>
#include <cstring>

#include "transport/rudp/rudp_flow.hpp"

namespace loom::rudp {

bool Flow::onPacket(const Header& h, std::span<const char> payload, uint64_t now) {
  lastHeard_ = now;
  probeCount_ = 0;
  nextProbe_ = 0;
  stats_.packetsReceived += 1;
  switch (h.type) {
    case PacketType::kData: {
      uint64_t before = rcvInOrderOff_;
      onData(h, payload.data(), payload.size(), now);
      return rcvInOrderOff_ != before;
    }
    case PacketType::kAck:
      onAck(h, payload, now);
      return false;
    case PacketType::kProbe:
      ackPending_ = true;
      return false;
    case PacketType::kReset:
      fail("its communicator failed and reset the connection");
      return false;
  }
  return false;
}

std::span<char> Flow::receiveSpace(uint64_t offset) {
  const size_t w = cfg_.windowBytes;
  if (failed() || offset < rcvFrontier_ || offset < rcvInOrderOff_ || offset >= rcvReadOff_ + w)
    return {};
  const uint64_t limit = rcvReadOff_ + w;
  if (posted() && offset >= post_.begin && offset < post_.end)
    return {post_.dst + (offset - post_.begin), std::min(post_.end, limit) - offset};
  size_t pos = offset % w;
  uint64_t len = std::min<uint64_t>(limit - offset, w - pos);
  if (posted() && offset < post_.begin) len = std::min(len, post_.begin - offset);
  return {rcvRing_.data() + pos, len};
}

const char* Flow::placeOf(uint64_t offset, size_t n) const {
  if (posted() && offset < post_.end && offset + n > post_.begin) {
    if (offset < post_.begin || offset + n > post_.end) return nullptr;  // straddles an edge
    return post_.dst + (offset - post_.begin);
  }
  const size_t w = cfg_.windowBytes;
  size_t pos = offset % w;
  return pos + n <= w ? rcvRing_.data() + pos : nullptr;
}

void Flow::store(uint64_t offset, const char* src, size_t n) {
  const size_t w = cfg_.windowBytes;
  while (n > 0) {
    size_t len;
    if (posted() && offset >= post_.begin && offset < post_.end) {
      len = std::min<uint64_t>(n, post_.end - offset);
      std::memcpy(post_.dst + (offset - post_.begin), src, len);
    } else {
      size_t pos = offset % w;
      len = std::min<uint64_t>(n, w - pos);
      if (posted() && offset < post_.begin) len = std::min<uint64_t>(len, post_.begin - offset);
      std::memcpy(rcvRing_.data() + pos, src, len);
    }
    offset += len;
    src += len;
    n -= len;
  }
}

bool Flow::onDataInPlace(const Header& h, uint64_t now) {
  lastHeard_ = now;
  probeCount_ = 0;
  nextProbe_ = 0;
  stats_.packetsReceived += 1;
  stats_.inPlace += 1;
  uint64_t before = rcvInOrderOff_;
  onData(h, nullptr, h.payloadBytes, now);
  return rcvInOrderOff_ != before;
}

void Flow::onData(const Header& h, const char* payload, size_t bytes, uint64_t /*now*/) {
  const uint64_t s = h.seq;
  const size_t w = cfg_.windowBytes;
  // A failed flow stores nothing more: its reader may have given its buffer up.
  if (failed()) return;
  // Any data packet deserves an ACK, a duplicate most of all: it means our ACK was lost.
  ackPending_ = true;
  echo_ = h.tsval;
  if (s == 0 || s < rcvNxt_ || slots_[s % maxPkts_].seq == s) {
    stats_.duplicates += 1;
    return;
  }
  // Beyond what the sender may have in flight, or outside the ring: not a packet of this stream.
  if (s >= rcvNxt_ + maxPkts_ || h.offset < rcvInOrderOff_ || h.offset + bytes > rcvReadOff_ + w) {
    stats_.refused += 1;
    return;
  }
  if (payload != nullptr) store(h.offset, payload, bytes);
  slots_[s % maxPkts_] = {s, h.offset, h.offset + bytes};
  rcvFrontier_ = std::max(rcvFrontier_, h.offset + bytes);
  if (s != rcvNxt_) stats_.outOfOrder += 1;
  rcvHighest_ = std::max(rcvHighest_, s);
  while (slots_[rcvNxt_ % maxPkts_].seq == rcvNxt_) {
    const Slot& slot = slots_[rcvNxt_ % maxPkts_];
    // Packets tile the stream; only a broken or hostile peer could say otherwise.
    if (slot.offset != rcvInOrderOff_) {
      fail("it sent packet " + std::to_string(rcvNxt_) + " at stream offset " +
           std::to_string(slot.offset) + " where " + std::to_string(rcvInOrderOff_) +
           " was expected");
      return;
    }
    rcvInOrderOff_ = slot.end;
    rcvNxt_ += 1;
  }
}

}  // namespace loom::rudp
