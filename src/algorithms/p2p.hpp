// Point-to-point transfers (loomSend/loomRecv). Every message carries an 8-byte length header so a
// receive of the wrong size is reported instead of desynchronising the stream. Operations to the
// same peer and direction complete in issue order; all operations of a group progress together, so
// matching sends and receives may be issued in any order.
#pragma once

#include <vector>

#include "algorithms/context.hpp"

namespace loom {

struct P2POp {
  bool isSend = true;
  int peer = 0;
  char* buffer = nullptr;
  size_t bytes = 0;
  Channel* channel = nullptr;        // the point-to-point channel to peer
  const AlgoContext* ctx = nullptr;  // the communicator the op belongs to (its rank, its checks)
  // progress state
  bool headerDone = false;
  size_t position = 0;
  bool done = false;
};

// Runs a batch of operations (possibly of several communicators) to completion.
void runPointToPoint(std::vector<P2POp>& ops);

}  // namespace loom
