// The progress thread's receive side of RudpEngine: datagram trains read from a path's socket
// and handed to their flows, their payloads where possible received in place.
//
// In place: a peek at the first header of the next message (a GRO train: up to 64 KiB of one
// sender's datagrams, each header + payload) names the flow and the stream offset it starts at.
// When that offset lies in the flow's free receive space, the message is read with a scatter
// list that sends each header to scratch and each payload to the ring position the train's
// consecutive packets would have (offset + j * mss), so the kernel's copy is the only one. Every
// datagram is still authenticated and checked: one whose offset or flow is not the one
// predicted (a retransmission in the train, another sender, a forgery) only wrote into space
// nobody reads, and is copied to its place from a stash, as every datagram used to be.
#include <netinet/udp.h>
#include <sys/socket.h>

#include <cstring>

#include "transport/rudp/rudp_engine.hpp"

namespace loom {

namespace {

// Trains read per call: one, so that the caller decides which path comes next.
constexpr size_t kRecvRound = 1;

uint32_t load32(const char* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}
uint64_t load64(const char* p) {
  uint64_t v;
  std::memcpy(&v, p, 8);
  return v;
}

// A GRO message is a train of datagrams of this many bytes each, the last possibly shorter (the
// control message says; without one, the message is one datagram).
size_t groSegment(msghdr& msg, size_t bytes) {
  for (cmsghdr* c = CMSG_FIRSTHDR(&msg); c != nullptr; c = CMSG_NXTHDR(&msg, c)) {
    if (c->cmsg_level == SOL_UDP && c->cmsg_type == UDP_GRO) {
      int v;
      std::memcpy(&v, CMSG_DATA(c), sizeof(v));
      if (v > 0) return static_cast<size_t>(v);
    }
  }
  return bytes;
}

// Reads one message (a datagram, or a GRO train of them) into iov: its length and the size of
// its datagrams. False when none was waiting.
bool receiveMessage(int fd, iovec* iov, size_t iovlen, size_t& bytes, size_t& segment) {
  msghdr msg{};
  msg.msg_iov = iov;
  msg.msg_iovlen = iovlen;
  alignas(cmsghdr) char ctrl[CMSG_SPACE(sizeof(int))];
  msg.msg_control = ctrl;
  msg.msg_controllen = sizeof(ctrl);
  ssize_t got = recvmsg(fd, &msg, MSG_DONTWAIT);
  if (got < 0) return false;
  bytes = static_cast<size_t>(got);
  segment = groSegment(msg, bytes);
  return true;
}

}  // namespace

bool RudpEngine::receive(int path, uint64_t now) {
  if (!gro_) return receiveBatch(path, now);
  for (size_t i = 0; i < kRecvRound; ++i)
    if (!receiveOne(path, now)) return false;
  return true;
}

bool RudpEngine::receiveBatch(int path, uint64_t now) {
  mmsghdr msgs[kRecvBatch];
  iovec iov[kRecvBatch];
  constexpr size_t kCtrl = CMSG_SPACE(sizeof(int));
  alignas(cmsghdr) char ctrl[kRecvBatch][kCtrl];
  for (size_t i = 0; i < kRecvBatch; ++i) {
    iov[i] = {recvBufs_.data() + i * 65536, 65536};
    msgs[i] = {};
    msgs[i].msg_hdr.msg_iov = &iov[i];
    msgs[i].msg_hdr.msg_iovlen = 1;
    msgs[i].msg_hdr.msg_control = ctrl[i];
    msgs[i].msg_hdr.msg_controllen = kCtrl;
  }
  int n = recvmmsg(sockets_[path].get(), msgs, kRecvBatch, MSG_DONTWAIT, nullptr);
  if (n <= 0) return false;
  for (int i = 0; i < n; ++i) {
    const size_t seg = groSegment(msgs[i].msg_hdr, msgs[i].msg_len);
    const char* data = static_cast<const char*>(iov[i].iov_base);
    for (size_t off = 0; seg > 0 && off < msgs[i].msg_len; off += seg)
      deliver(data + off, std::min<size_t>(seg, msgs[i].msg_len - off), now);
  }
  return static_cast<size_t>(n) == kRecvBatch;
}

RudpEngine::Placement RudpEngine::place(const char* first, size_t bytes) {
  // Unauthenticated hints only: whatever they say, the payloads go to free ring space.
  Placement pl;
  if (bytes < rudp::kHeaderBytes || load32(first) != rudp::kMagic ||
      static_cast<uint8_t>(first[4]) != rudp::kVersion ||
      static_cast<rudp::PacketType>(first[5]) != rudp::PacketType::kData)
    return pl;
  RudpFlowState* st = flowOf(static_cast<int>(load32(first + 16)), static_cast<uint8_t>(first[6]));
  if (st == nullptr) return pl;
  const uint64_t offset = load64(first + 40);
  pl.named = st;
  pl.offset = offset;
  if (!st->predictable) return pl;
  std::lock_guard<std::mutex> lock(st->mu);
  std::span<char> space = st->flow.receiveSpace(offset);
  pl.slots = std::min(space.size() / mss_, kMessageBytes / (rudp::kHeaderBytes + mss_));
  if (pl.slots == 0) return pl;
  // Until the train is processed the space must stay where it is (no new post) and no one may
  // give a posted buffer up (reset waits).
  st->flow.setPlacing(true);
  pl.st = st;
  pl.ring = space.data();
  return pl;
}

bool RudpEngine::receiveOne(int path, uint64_t now) {
  const int fd = sockets_[path].get();
  char first[rudp::kHeaderBytes];
  // MSG_TRUNC: the whole message's length, not the bytes copied.
  ssize_t peeked = recv(fd, first, sizeof(first), MSG_PEEK | MSG_TRUNC | MSG_DONTWAIT);
  if (peeked < 0) return false;  // nothing waiting (or an error the next poll reports)
  if (static_cast<size_t>(peeked) <= rudp::kHeaderBytes + mss_) {
    // One datagram, not a train (an ACK, a retransmission, a message's short first or last
    // packet): nothing to place. Only this one: a batch would also take the trains queued behind
    // it into scratch, and every message that ends mid-packet is followed by such a datagram.
    // (GRO may still have joined a few equal small ones, ACKs say: they are taken apart.)
    iovec iov{recvBufs_.data(), kMessageBytes};
    size_t n, seg;
    if (!receiveMessage(fd, &iov, 1, n, seg)) return false;
    for (size_t off = 0; seg > 0 && off < n; off += seg)
      deliver(recvBufs_.data() + off, std::min(seg, n - off), now);
    return true;
  }
  const Placement pl = place(first, std::min(sizeof(first), static_cast<size_t>(peeked)));
  // Whatever happens below, the space is released once the train is processed.
  struct Release {
    RudpFlowState* st;
    ~Release() {
      if (st == nullptr) return;
      {
        std::lock_guard<std::mutex> lock(st->mu);
        st->flow.setPlacing(false);
      }
      st->placed.notify_all();
    }
  } release{pl.st};
  char* scratch = recvBufs_.data();
  char* headers = trainHeaders();
  recvIov_.clear();
  for (size_t j = 0; j < pl.slots; ++j) {
    recvIov_.push_back({headers + j * rudp::kHeaderBytes, rudp::kHeaderBytes});
    recvIov_.push_back({pl.ring + j * mss_, mss_});
  }
  recvIov_.push_back({scratch, kMessageBytes});
  size_t n, seg;
  if (!receiveMessage(fd, recvIov_.data(), recvIov_.size(), n, seg)) return false;
  if (seg == 0) return true;
  if (pl.slots == 0) {
    if (pl.named != nullptr && !pl.named->predictable) {
      // Would this train have fitted? Then the next one is placed again.
      pl.named->predictable = wouldHaveFitted(pl, scratch, n, seg);
    }
    for (size_t off = 0; off < n; off += seg) deliver(scratch + off, std::min(seg, n - off), now);
    return true;
  }
  if (seg != rudp::kHeaderBytes + mss_) {
    // Not the layout the scatter list assumed (another sender's segment size, a lone short
    // datagram): gather the bytes in order and take them apart as usual.
    deliverGathered(n, seg, now);
    return true;
  }
  deliverPlaced(pl, n, seg, now);
  return true;
}

bool RudpEngine::wouldHaveFitted(const Placement& pl, const char* scratch, size_t n,
                                 size_t seg) const {
  bool whole = seg == rudp::kHeaderBytes + mss_;
  for (size_t j = 0, off = 0; whole && off < n; ++j, off += seg)
    whole = std::min(seg, n - off) >= rudp::kHeaderBytes &&
            static_cast<rudp::PacketType>(scratch[off + 5]) == rudp::PacketType::kData &&
            flowOf(static_cast<int>(load32(scratch + off + 16)),
                   static_cast<uint8_t>(scratch[off + 6])) == pl.named &&
            load64(scratch + off + 40) == pl.offset + j * mss_;
  return whole;
}

void RudpEngine::deliverGathered(size_t n, size_t seg, uint64_t now) {
  char* stash = trainStash();
  size_t at = 0;
  for (const iovec& v : recvIov_) {
    size_t take = std::min(v.iov_len, n - at);
    std::memcpy(stash + at, v.iov_base, take);
    at += take;
    if (at == n) break;
  }
  for (size_t off = 0; off < n; off += seg) deliver(stash + off, std::min(seg, n - off), now);
}

void RudpEngine::deliverPlaced(const Placement& pl, size_t n, size_t seg, uint64_t now) {
  char* scratch = recvBufs_.data();
  char* headers = trainHeaders();
  char* stash = trainStash();
  // Datagram j of the train: header j in scratch and its payload in ring slot j, or, past the
  // slots, whole in the scratch buffer at the end of the list.
  stashed_.clear();
  size_t stashUsed = 0, misses = 0;
  for (size_t j = 0, off = 0; off < n; ++j, off += seg) {
    const size_t len = std::min(seg, n - off);
    if (j >= pl.slots) {
      deliver(scratch + (j - pl.slots) * seg, len, now);
      continue;
    }
    const char* header = headers + j * rudp::kHeaderBytes;
    if (len < rudp::kHeaderBytes) {
      refused_ += 1;
      continue;
    }
    std::span<const char> payload{pl.ring + j * mss_, len - rudp::kHeaderBytes};
    rudp::Header h;
    rudp::ParseResult r =
        rudp::parsePacket(header, payload, keys_, commId_, static_cast<uint32_t>(rank_), h);
    RudpFlowState* st =
        r == rudp::ParseResult::kOk ? flowOf(static_cast<int>(h.src), h.cls) : nullptr;
    if (st == nullptr) {
      refused_ += 1;  // a stranger, another communicator or job, or garbage
      continue;
    }
    bool inPlace = false;
    if (st == pl.st && h.type == rudp::PacketType::kData && h.offset == pl.offset + j * mss_) {
      std::lock_guard<std::mutex> lock(st->mu);
      // Where the flow keeps these bytes (the ring, or the caller's posted buffer) is where the
      // kernel put them.
      inPlace = st->flow.placeOf(h.offset, payload.size()) == payload.data();
      if (inPlace) st->flow.onDataInPlace(h, now);
    }
    if (!inPlace) {
      misses += st == pl.st;
      // Its place may be another slot of this train, not read yet: move it out of the way
      // first, deliver it after the train.
      std::memcpy(stash + stashUsed, payload.data(), payload.size());
      stashed_.push_back({h, st, stashUsed});
      stashUsed += payload.size();
    }
    noteTouched(*st);
  }
  // A train with holes or strangers in it: the next ones go to scratch (one copy, not two)
  // until one would have fitted.
  pl.st->predictable = misses == 0;
  for (const Stashed& s : stashed_) {
    std::lock_guard<std::mutex> lock(s.st->mu);
    s.st->flow.onPacket(s.h, {stash + s.at, s.h.payloadBytes}, now);
  }
}

void RudpEngine::deliver(const char* data, size_t bytes, uint64_t now) {
  rudp::Header h;
  std::span<const char> payload;
  rudp::ParseResult r =
      rudp::parseDatagram(data, bytes, keys_, commId_, static_cast<uint32_t>(rank_), h, payload);
  RudpFlowState* st =
      r == rudp::ParseResult::kOk ? flowOf(static_cast<int>(h.src), h.cls) : nullptr;
  if (st == nullptr) {
    refused_ += 1;  // a stranger, another communicator or job, or garbage
    return;
  }
  {
    std::lock_guard<std::mutex> lock(st->mu);
    st->flow.onPacket(h, payload, now);
  }
  noteTouched(*st);
}

void RudpEngine::noteTouched(RudpFlowState& st) {
  if (!st.touched) {
    st.touched = true;
    touched_.push_back(&st);
  }
}

void RudpEngine::receiveHere(RudpFlowState* self) {
  if (!callerReceives_) return;
  {
    // Blocking, not try_lock: while another thread reads, the sockets stay readable, so a caller
    // that gave up would return from its poll at once and spin; waiting yields the core to the
    // reader (pinned to this very core where cores are scarce).
    std::lock_guard<std::mutex> receiving(recvMu_);
    if (!receivePass(steadyNowNs(), self)) return;  // nothing arrived: the timers are the thread's
  }
  // The ACKs of what arrived, retransmissions RACK found, data the window now lets go.
  uint64_t timer = UINT64_MAX;
  {
    std::unique_lock<std::mutex> send(sendMu_, std::try_to_lock);
    if (!send.owns_lock()) {
      wake();
      return;
    }
    for (auto& st : flows_)
      if (st) sendFlow(*st);
  }
  for (auto& st : flows_) {
    if (!st) continue;
    std::lock_guard<std::mutex> lock(st->mu);
    timer = std::min(timer, st->flow.nextTimer());
  }
  // What was just sent may need a timer earlier than the one the thread sleeps to.
  wakeIfAsleepPast(timer);
}

bool RudpEngine::receivePass(uint64_t now, RudpFlowState* self) {
  // A path at a time, drained, starting with the one read last: the sender moves to the next
  // path only after a flowlet of trains, so the older trains wait on the path being read, and the
  // newer ones on the next. (Reading the paths in turn, a few trains each, delivered a third of
  // the packets out of order when one path had a backlog.)
  const size_t paths = sockets_.size();
  for (int round = 0; round < 4; ++round) {
    bool any = false;
    for (size_t i = 0; i < paths; ++i) {
      const int p = static_cast<int>((readPath_ + i) % paths);
      for (int n = 0; n < 64 && receive(p, now); ++n) {
        any = true;
        readPath_ = static_cast<size_t>(p);
      }
    }
    if (!any) break;
  }
  const bool got = !touched_.empty();
  wakeReaders(self);
  return got;
}

void RudpEngine::wakeReaders(RudpFlowState* self) {
  // One wake-up per flow and batch, not per packet.
  for (RudpFlowState* st : touched_) {
    st->touched = false;
    std::lock_guard<std::mutex> lock(st->mu);
    if (st != self && (st->flow.readableBytes() > 0 || st->flow.failed())) st->notifyData();
    st->unblockWriter();
  }
  touched_.clear();
}

}  // namespace loom
