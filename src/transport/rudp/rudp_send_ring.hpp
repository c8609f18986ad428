// The sender's ring of a rudp flow, laid out as the datagrams it becomes: slots of a header's room
// followed by mss payload bytes. Stream offset o lies in slot (o / mss) mod slots at o % mss. A
// packet never crosses a slot, so one that starts a slot has the room right before its payload for
// its header, and a train of such packets is one contiguous run of memory: the kernel's copy of a
// GSO train then reads one buffer instead of a header and a payload per datagram, which measured
// between two namespace nodes (64 KiB UDP GSO sends over veth) cost the sender half the CPU time.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <vector>

namespace loom::rudp {

class SendRing {
 public:
  // capacity() is windowBytes rounded up to whole slots.
  SendRing(size_t windowBytes, size_t mss, size_t headroom)
      : mss_(mss),
        stride_(headroom + mss),
        headroom_(headroom),
        slots_(std::max<size_t>(1, (windowBytes + mss - 1) / mss)),
        bytes_(slots_ * stride_) {}

  // Payload bytes the ring holds.
  size_t capacity() const { return slots_ * mss_; }
  // Where stream offset o lies; the bytes up to the end of its slot are contiguous.
  char* at(uint64_t o) { return bytes_.data() + slot(o) * stride_ + headroom_ + o % mss_; }
  const char* at(uint64_t o) const {
    return bytes_.data() + slot(o) * stride_ + headroom_ + o % mss_;
  }
  size_t toSlotEnd(uint64_t o) const { return mss_ - o % mss_; }
  // The room right before a packet that starts at stream offset o, when it starts a slot (only
  // that packet's header is ever written there); null otherwise.
  char* headroomOf(uint64_t o) {
    return o % mss_ == 0 ? bytes_.data() + slot(o) * stride_ : nullptr;
  }

 private:
  size_t slot(uint64_t o) const { return static_cast<size_t>(o / mss_ % slots_); }

  size_t mss_, stride_, headroom_, slots_;
  std::vector<char> bytes_;
};

}  // namespace loom::rudp
