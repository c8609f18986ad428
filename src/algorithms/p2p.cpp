#include "algorithms/p2p.hpp"

#include <algorithm>
#include <cstring>
#include <utility>

#include "base/error.hpp"

namespace loom {

namespace {

struct Header {
  uint64_t bytes;
  int64_t tag;
};

bool progressSend(P2POp& op) {
  bool moved = false;
  if (!op.headerDone) {
    // A network channel may take part of the header: resume where it stopped.
    Header header{op.bytes, op.tag};
    size_t sent = op.channel->trySend(reinterpret_cast<const char*>(&header) + op.headerSent,
                                      sizeof(header) - op.headerSent);
    op.headerSent += sent;
    if (op.headerSent < sizeof(header)) return sent > 0;
    op.headerDone = moved = true;
  }
  if (op.position < op.bytes) {
    size_t sent = op.channel->trySend(op.buffer + op.position, op.bytes - op.position);
    op.position += sent;
    moved |= sent > 0;
  }
  op.done = op.position == op.bytes;
  return moved;
}

void checkSize(const P2POp& op, uint64_t sent) {
  if (sent != op.bytes)
    LOOM_THROW(loomInvalidUsage, "point-to-point size mismatch: rank ", op.peer, " sent ", sent,
               " bytes with tag ", op.tag, " but rank ", op.ctx->rank, " posted a receive of ",
               op.bytes, " bytes");
}

// Moves whatever has arrived of the message being set aside. True if bytes moved.
bool fillEarly(Channel& channel, P2PInbox& inbox) {
  P2PInbox::Message& m = inbox.early.back();
  bool moved = false;
  while (inbox.filled < m.bytes.size()) {
    std::span<const char> span = channel.peek(m.bytes.size() - inbox.filled);
    size_t n = std::min(span.size(), m.bytes.size() - inbox.filled);
    if (n == 0) break;
    std::memcpy(m.bytes.data() + inbox.filled, span.data(), n);
    channel.consume(n);
    inbox.filled += n;
    moved = true;
  }
  inbox.filling = inbox.filled < m.bytes.size();
  return moved;
}

// A receive that may not read the channel yet (an older one from the same peer is reading it) can
// still complete from a message set aside earlier.
bool takeEarly(P2POp& op) {
  if (op.headerDone || op.inbox == nullptr) return false;
  P2PInbox& inbox = *op.inbox;
  const size_t complete = inbox.early.size() - (inbox.filling ? 1 : 0);
  for (size_t i = 0; i < complete; ++i) {
    if (inbox.early[i].tag != op.tag) continue;
    checkSize(op, inbox.early[i].bytes.size());
    if (op.bytes > 0) std::memcpy(op.buffer, inbox.early[i].bytes.data(), op.bytes);
    inbox.early.erase(inbox.early.begin() + static_cast<std::ptrdiff_t>(i));
    op.done = true;
    return true;
  }
  return false;
}

// Finds this receive's message: one set aside earlier, or the next one on the channel (setting
// aside messages of other tags on the way). True once the payload can be read from the channel;
// `op.done` when it came from the inbox.
bool matchHeader(P2POp& op, bool& moved) {
  P2PInbox& inbox = *op.inbox;
  if (takeEarly(op)) {
    moved = true;
    return false;
  }
  for (;;) {
    if (inbox.filling) {
      moved |= fillEarly(*op.channel, inbox);
      if (inbox.filling) return false;
      // A complete message of another tag: it may still be this receive's turn next.
      if (inbox.early.back().tag == op.tag) return matchHeader(op, moved);
    }
    std::span<const char> span = op.channel->peek(sizeof(Header));
    if (span.size() < sizeof(Header)) return false;
    Header header;
    std::memcpy(&header, span.data(), sizeof(header));
    op.channel->consume(sizeof(header));
    moved = true;
    if (header.tag == op.tag) {
      checkSize(op, header.bytes);
      return true;
    }
    inbox.early.push_back({header.tag, std::vector<char>(header.bytes)});
    inbox.filling = true;
    inbox.filled = 0;
  }
}

bool progressRecv(P2POp& op) {
  bool moved = false;
  if (!op.headerDone) {
    if (!matchHeader(op, moved)) return moved;
    op.headerDone = true;
  }
  if (op.position < op.bytes) {
    size_t n = op.channel->tryReceive(op.buffer + op.position, op.bytes - op.position);
    op.position += n;
    moved |= n > 0;
  }
  op.done = op.position == op.bytes;
  return moved;
}

// Binds an any-source receive to the first peer with a message of its tag: one set aside earlier
// (lowest peer first), else the next header on a channel no older receive is reading. Headers of
// other tags met on the way are set aside for their own receives. True if bytes moved.
bool matchAnySource(P2POp& op, const std::vector<std::pair<Channel*, bool>>& busy,
                    bool olderAnyPending) {
  const P2PPeers& peers = *op.peers;
  auto bind = [&](int peer) {
    op.peer = peer;
    op.channel = peers.channels[peer];
    op.inbox = &(*peers.inboxes)[peer];
  };
  for (size_t peer = 0; peer < peers.channels.size(); ++peer) {
    if (peers.channels[peer] == nullptr) continue;
    bind(static_cast<int>(peer));
    if (takeEarly(op)) return true;
  }
  bool moved = false;
  if (!olderAnyPending) {
    for (size_t peer = 0; peer < peers.channels.size(); ++peer) {
      Channel* channel = peers.channels[peer];
      if (channel == nullptr) continue;
      if (std::find(busy.begin(), busy.end(), std::make_pair(channel, false)) != busy.end())
        continue;
      bind(static_cast<int>(peer));
      if (matchHeader(op, moved)) {
        op.headerDone = true;
        return true;
      }
      if (op.done) return true;  // completed from a message just set aside
    }
  }
  op.peer = kAnySource;
  op.channel = nullptr;
  op.inbox = nullptr;
  return moved;
}

}  // namespace

bool progressPointToPoint(const std::vector<P2POp*>& ops, P2PPassState& state) {
  std::vector<std::pair<Channel*, bool>>& busy = state.busy;
  busy.clear();
  bool moved = false;
  bool anyPending = false;  // an older any-source receive is still looking: it reads first
  for (P2POp* p : ops) {
    P2POp& op = *p;
    if (op.done) continue;
    if (!op.isSend && op.peer == kAnySource) {
      moved |= matchAnySource(op, busy, anyPending);
      if (op.peer == kAnySource) {
        anyPending = true;
        continue;
      }
    }
    std::pair<Channel*, bool> key{op.channel, op.isSend};
    if ((!op.isSend && anyPending) || std::find(busy.begin(), busy.end(), key) != busy.end()) {
      if (!op.isSend) moved |= takeEarly(op);
      continue;
    }
    moved |= op.isSend ? progressSend(op) : progressRecv(op);
    if (!op.done) busy.push_back(key);
  }
  return moved;
}

void gatherPointToPoint(const std::vector<P2POp*>& ops, PollSet& set) {
  for (const P2POp* op : ops) {
    if (op->done) continue;
    if (op->peer == kAnySource) {
      for (Channel* c : op->peers->channels)
        if (c != nullptr) c->addPollFds(set, false);
      continue;
    }
    op->channel->addPollFds(set, op->isSend);
  }
}

}  // namespace loom
