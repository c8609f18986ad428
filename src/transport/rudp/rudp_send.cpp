// RudpEngine's send path, under sendMu_ (the progress thread, or a channel's caller: sendNow): a
// flow's datagrams, collected in rounds, leave in bursts of consecutive datagrams to one peer on
// one path: one UDP GSO train per sendmsg, or sendmmsg batches where the kernel has no GSO. The
// test-only fault layer (LOOM_RUDP_FAULTS) drops, duplicates and holds back datagrams here.
#include <netinet/udp.h>
#include <poll.h>
#include <sys/socket.h>

#include <cstring>

#include "base/log.hpp"
#include "base/wait.hpp"
#include "transport/rudp/rudp_engine.hpp"

namespace loom {

namespace {

constexpr size_t kBatch = 32;  // datagrams per sendmmsg when GSO is off

}  // namespace

void RudpEngine::sendNow(RudpFlowState& st) {
  // The caller sends what its flow has (no hand-off to the thread, one wake-up less per
  // message); if the thread is sending right now, it is told to come round again instead.
  if (!sendMu_.try_lock()) {
    wake();
    return;
  }
  sendFlow(st);
  sendMu_.unlock();
  uint64_t timer;
  bool more;
  {
    std::lock_guard<std::mutex> lock(st.mu);
    timer = st.flow.nextTimer();
    more = st.flow.wantsToSend();
  }
  // The thread sends what is left and runs the flow's timers (loss probe, timeout).
  if (more) {
    wake();
  } else {
    wakeIfAsleepPast(timer);
  }
}

void RudpEngine::sendFlow(RudpFlowState& st) {
  // A few rounds: a caller's 512 KiB used to send 256 datagrams and leave the rest until its next
  // call found nothing to read, while the peer waited for them. Bounded, so that other flows'
  // ACKs do not wait behind a whole window; sendNow wakes the thread for what is left.
  for (int round = 0; round < 4 && sendRound(st) == kRoom; ++round) {
  }
}

size_t RudpEngine::sendRound(RudpFlowState& st) {
  // Read now, under sendMu_, not when the round began: send times must rise in the order the
  // packets leave (RACK finds losses by them), and the thread, after receiving for a while, would
  // stamp its packets earlier than those a caller sent meanwhile, which left before them.
  const uint64_t now = steadyNowNs();
  out_.clear();
  {
    std::lock_guard<std::mutex> lock(st.mu);
    bool wasFailed = st.flow.failed();
    st.flow.collect(now, out_, kRoom);
    if (!wasFailed && st.flow.failed()) {
      LOOM_WARN(kSubsysNet, rank_, "rudp: ", names_[st.peer], ": ", st.flow.failure());
      st.notifyData();
      st.drainRoom();
    }
  }
  if (out_.empty()) return 0;
  // Payloads stay valid unlocked: data lies in ring space the channel cannot reuse until both its
  // ACK came and sendDone() below (an ACK that another thread processes meanwhile, for the
  // original of a retransmission being sent, frees nothing yet), and the SACK bitmap changes
  // only in collect(), under sendMu_ as this is.
  // The flow chose each datagram's path (FlowConfig::flowletPackets): trains go out on one path
  // in flowlets of kFlowletTrains, then on the next, so a fabric that hashes on ports still
  // spreads a flow over every path, and the packets of one flowlet arrive in order (which the
  // flow's loss detection relies on). Switching at every train made the kernel itself reorder a
  // third of the packets (trains of two sockets in flight at once on two CPUs), which cost
  // receiving in place and made RACK resend some.
  for (size_t i = 0; i < out_.size(); ++i) {
    rudp::Outgoing& o = out_[i];
    o.h.commId = commId_;
    o.h.src = static_cast<uint32_t>(rank_);
    o.h.dst = static_cast<uint32_t>(st.peer);
    o.h.cls = static_cast<uint8_t>(st.cls);
    // In the send ring right before the payload where the flow has room there (whole packets):
    // a train of them is then one buffer for the kernel to copy.
    char* header = o.headroom != nullptr ? o.headroom : headers_.data() + i * rudp::kHeaderBytes;
    rudp::encodeHeader(o.h, keys_, o.payload, header);
    transmit(o.h.path, st.peer, header, o.payload, now);
  }
  flush();
  {
    std::lock_guard<std::mutex> lock(st.mu);
    st.flow.sendDone();
    st.unblockWriter();  // room the send held back may be free now
  }
  return out_.size();
}

void RudpEngine::transmit(int path, int peer, const char* header, std::span<const char> payload,
                          uint64_t now) {
  if (fault_.drop + fault_.dup + fault_.delay > 0) {
    std::uniform_real_distribution<double> u(0, 1);
    if (u(faultRng_) < fault_.drop) return;
    if (u(faultRng_) < fault_.delay) {
      // Held back up to 2 ms: later packets overtake it (reordering), it is never lost.
      Held h{now + faultRng_() % 2'000'000, path, peer, {}};
      h.bytes.assign(header, header + rudp::kHeaderBytes);
      h.bytes.insert(h.bytes.end(), payload.begin(), payload.end());
      const uint64_t due = h.due;
      held_.push_back(std::move(h));
      wakeIfAsleepPast(due);  // a caller's send: the thread releases it
      return;
    }
    if (u(faultRng_) < fault_.dup) append(path, peer, header, payload);
  }
  append(path, peer, header, payload);
}

void RudpEngine::append(int path, int peer, const char* header, std::span<const char> payload) {
  const size_t bytes = rudp::kHeaderBytes + payload.size();
  Burst& b = burst_;
  if (!b.iov.empty() && (b.path != path || b.peer != peer || b.lastShort || bytes > b.segBytes ||
                         b.iov.size() / 2 >= kMaxSegments || b.total + bytes > kMaxBurstBytes))
    flush();
  if (b.iov.empty()) {
    b.path = path;
    b.peer = peer;
    b.segBytes = bytes;
    b.total = 0;
  }
  b.lastShort = bytes < b.segBytes;
  b.total += bytes;
  b.iov.push_back({const_cast<char*>(header), rudp::kHeaderBytes});
  b.iov.push_back({const_cast<char*>(payload.data()), payload.size()});
}

void RudpEngine::flush() {
  const size_t n = burst_.iov.size() / 2;
  if (n == 0) return;
  if (gso_ && n > 1) {
    // Pieces that lie back to back (headers written into the send ring before their payloads,
    // consecutive packets) are one: per piece, the kernel's copy costs as much as for a datagram.
    std::vector<iovec>& merged = burst_.merged;
    merged.clear();
    for (const iovec& v : burst_.iov) {
      if (v.iov_len == 0) continue;
      if (!merged.empty() && static_cast<char*>(merged.back().iov_base) + merged.back().iov_len ==
                                 static_cast<char*>(v.iov_base))
        merged.back().iov_len += v.iov_len;
      else
        merged.push_back(v);
    }
    sendBurst(0, n, true);
  } else {
    for (size_t first = 0; first < n; first += kBatch)
      sendBurst(first, std::min(kBatch, n - first), false);
  }
  burst_.iov.clear();
}

void RudpEngine::sendBurst(size_t first, size_t count, bool gso) {
  Burst& b = burst_;
  sockaddr_storage* to = &addr_[b.peer][b.path];
  const int fd = sockets_[b.path].get();
  for (int attempt = 0; attempt < 2; ++attempt) {
    int r;
    if (gso) {
      msghdr msg{};
      msg.msg_name = to;
      msg.msg_namelen = addrLen_[b.peer];
      msg.msg_iov = b.merged.data();  // the whole burst: first == 0, count == all
      msg.msg_iovlen = b.merged.size();
      alignas(cmsghdr) char ctrl[CMSG_SPACE(sizeof(uint16_t))] = {};
      msg.msg_control = ctrl;
      msg.msg_controllen = sizeof(ctrl);
      cmsghdr* c = CMSG_FIRSTHDR(&msg);
      c->cmsg_level = SOL_UDP;
      c->cmsg_type = UDP_SEGMENT;
      c->cmsg_len = CMSG_LEN(sizeof(uint16_t));
      uint16_t seg = static_cast<uint16_t>(b.segBytes);
      std::memcpy(CMSG_DATA(c), &seg, sizeof(seg));
      r = static_cast<int>(sendmsg(fd, &msg, MSG_DONTWAIT | MSG_NOSIGNAL));
      if (r < 0 && (errno == EIO || errno == EINVAL || errno == EOPNOTSUPP)) {
        // No segmentation offload on this path after all: datagram by datagram from now on.
        gso_ = false;
        LOOM_INFO(kSubsysNet, rank_, "rudp: UDP GSO refused (", std::strerror(errno),
                  "); sending datagram by datagram");
        for (size_t f = first; f < first + count; f += kBatch)
          sendBurst(f, std::min(kBatch, first + count - f), false);
        return;
      }
      if (r >= 0) return;
    } else {
      mmsghdr msgs[kBatch];
      for (size_t i = 0; i < count; ++i) {
        msgs[i] = {};
        msgs[i].msg_hdr.msg_name = to;
        msgs[i].msg_hdr.msg_namelen = addrLen_[b.peer];
        msgs[i].msg_hdr.msg_iov = b.iov.data() + 2 * (first + i);
        msgs[i].msg_hdr.msg_iovlen = b.iov[2 * (first + i) + 1].iov_len == 0 ? 1 : 2;
      }
      r = sendmmsg(fd, msgs, static_cast<unsigned>(count), MSG_DONTWAIT | MSG_NOSIGNAL);
      if (r > 0) {
        first += static_cast<size_t>(r);
        count -= static_cast<size_t>(r);
        if (count == 0) return;
        continue;
      }
    }
    if (errno != EAGAIN && errno != EWOULDBLOCK && errno != ENOBUFS) return;  // lost: recovered
    pollfd pfd{fd, POLLOUT, 0};
    poll(&pfd, 1, 1);
  }
}

void RudpEngine::releaseHeld(uint64_t now, bool all) {
  for (size_t i = 0; i < held_.size();) {
    if (all || held_[i].due <= now) {
      Held h = std::move(held_[i]);
      held_[i] = std::move(held_.back());
      held_.pop_back();
      if (!all) {
        const char* p = h.bytes.data();
        Fault saved = fault_;
        fault_ = {};  // a held packet is not faulted twice
        transmit(h.path, h.peer, p, {p + rudp::kHeaderBytes, h.bytes.size() - rudp::kHeaderBytes},
                 now);
        flush();  // h dies here
        fault_ = saved;
      }
    } else {
      ++i;
    }
  }
}

}  // namespace loom
