// Point-to-point transfers (loomSend/loomRecv and their tagged forms). Every message carries a
// 16-byte header (length, tag) so a receive of the wrong size is reported instead of
// desynchronising the stream. A receive takes the oldest message from its peer with its tag;
// messages of other tags that arrive first are moved aside (the peer's inbox) until their own
// receive comes. Operations to the same peer and direction start in issue order; all operations of
// a group progress together, so matching sends and receives may be issued in any order.
#pragma once

#include <deque>
#include <vector>

#include "algorithms/context.hpp"

namespace loom {

// Messages from one peer that arrived before a receive with their tag (allocated only then).
struct P2PInbox {
  struct Message {
    int64_t tag = 0;
    std::vector<char> bytes;
  };
  std::deque<Message> early;
  bool filling = false;  // early.back() is still arriving
  size_t filled = 0;
};

struct P2POp {
  bool isSend = true;
  int peer = 0;
  int64_t tag = 0;
  char* buffer = nullptr;
  size_t bytes = 0;
  Channel* channel = nullptr;        // the point-to-point channel to peer
  P2PInbox* inbox = nullptr;         // receives: the peer's inbox
  const AlgoContext* ctx = nullptr;  // the communicator the op belongs to (its rank, its checks)
  // progress state
  bool headerDone = false;
  size_t headerSent = 0;
  size_t position = 0;
  bool done = false;
};

// Runs a batch of operations (possibly of several communicators) to completion.
void runPointToPoint(std::vector<P2POp>& ops);

}  // namespace loom
