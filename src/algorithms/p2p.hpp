// Point-to-point transfers (loomSend/loomRecv and their tagged forms). Every message carries a
// 16-byte header (length, tag) so a receive of the wrong size is reported instead of
// desynchronising the stream. A receive takes the oldest message from its peer with its tag;
// messages of other tags that arrive first are moved aside (the peer's inbox) until their own
// receive comes. Operations to the same peer and direction start in issue order; all operations
// handed to one pass progress together, so matching sends and receives may be issued in any order.
// A receive from any source (peer kAnySource) takes the first message with its tag from whichever
// peer it finds one, then continues as a receive from that peer.
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

constexpr int kAnySource = -1;

// The point-to-point channels and inboxes of a communicator, by peer (any-source receives look at
// all of them).
struct P2PPeers {
  std::vector<Channel*> channels;
  std::vector<P2PInbox>* inboxes = nullptr;
};

struct P2POp {
  bool isSend = true;
  int peer = 0;  // kAnySource: a receive not matched yet
  int64_t tag = 0;
  char* buffer = nullptr;
  size_t bytes = 0;
  Channel* channel = nullptr;        // the point-to-point channel to peer
  P2PInbox* inbox = nullptr;         // receives: the peer's inbox
  const AlgoContext* ctx = nullptr;  // the communicator the op belongs to (its rank)
  const P2PPeers* peers = nullptr;   // any-source receives
  // progress state
  bool headerDone = false;
  size_t headerSent = 0;
  size_t position = 0;
  bool done = false;
};

// Reused across passes so that a pass allocates nothing once warmed up.
struct P2PPassState {
  std::vector<std::pair<Channel*, bool>> busy;
};

// Moves every op of `ops` (in posting order) as far as it can without waiting; sets op.done.
// Only the oldest unfinished op per (channel, direction) reads or writes that channel; younger
// receives may still complete from messages set aside. True if any byte moved.
bool progressPointToPoint(const std::vector<P2POp*>& ops, P2PPassState& state);
// The descriptors a wait for `ops` may block on (PollSet::add).
void gatherPointToPoint(const std::vector<P2POp*>& ops, PollSet& set);

}  // namespace loom
