#include "algorithms/p2p.hpp"

#include <algorithm>
#include <cstring>
#include <utility>

#include "base/error.hpp"

namespace loom {

namespace {

bool progressSend(P2POp& op) {
  bool moved = false;
  if (!op.headerDone) {
    uint64_t header = op.bytes;
    if (op.channel->trySend(&header, sizeof(header)) == 0) return false;
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

bool progressRecv(P2POp& op) {
  bool moved = false;
  if (!op.headerDone) {
    std::span<const char> span = op.channel->peek(sizeof(uint64_t));
    if (span.size() < sizeof(uint64_t)) return false;
    uint64_t header;
    std::memcpy(&header, span.data(), sizeof(header));
    if (header != op.bytes)
      LOOM_THROW(loomInvalidUsage, "point-to-point size mismatch: rank ", op.peer, " sent ", header,
                 " bytes but rank ", op.ctx->rank, " posted a receive of ", op.bytes, " bytes");
    op.channel->consume(sizeof(header));
    op.headerDone = moved = true;
  }
  if (op.position < op.bytes) {
    std::span<const char> span = op.channel->peek(op.bytes - op.position);
    size_t n = std::min(span.size(), op.bytes - op.position);
    if (n > 0) {
      std::memcpy(op.buffer + op.position, span.data(), n);
      op.channel->consume(n);
      op.position += n;
      moved = true;
    }
  }
  op.done = op.position == op.bytes;
  return moved;
}

}  // namespace

void runPointToPoint(std::vector<P2POp>& ops) {
  // Only the oldest unfinished op per (channel, direction) may move: stream order is issue order.
  thread_local std::vector<std::pair<Channel*, bool>> busy;  // reused: no allocation per call
  busy.reserve(ops.size());  // grows once to the largest batch, not while progressing
  auto pass = [&]() -> bool {
    bool moved = false;
    busy.clear();
    for (P2POp& op : ops) {
      if (op.done) continue;
      std::pair<Channel*, bool> key{op.channel, op.isSend};
      if (std::find(busy.begin(), busy.end(), key) != busy.end()) continue;
      moved |= op.isSend ? progressSend(op) : progressRecv(op);
      if (!op.done) busy.push_back(key);
    }
    return moved;
  };
  auto allDone = [&] {
    return std::all_of(ops.begin(), ops.end(), [](const P2POp& op) { return op.done; });
  };
  auto checkAll = [&] {
    for (const P2POp& op : ops)
      if (!op.done) op.ctx->check(op.peer);
  };
  while (!allDone()) {
    if (!pass()) waitUntil(pass, checkAll);
  }
}

}  // namespace loom
