// Group calls: between loomGroupStart and loomGroupEnd the calling thread records operations, and
// loomGroupEnd issues them together: collectives in order, runs of consecutive sends and receives
// progressed as one batch (so a pair of ranks may send to each other first without deadlock).
#pragma once

#include <memory>
#include <vector>

#include "api/handle.hpp"

namespace loom {

// alltoallv's four count/displacement arrays copied out of the caller's memory, for an
// operation that runs after the call returned (at loomGroupEnd, or on a progress thread).
struct OwnedCounts {
  std::vector<size_t> values;  // sendCounts, sendDispls, recvCounts, recvDispls, nranks each
  static std::shared_ptr<const OwnedCounts> copy(CollArgs& args, int nranks);
};

struct GroupOp {
  loomComm* handle = nullptr;
  bool isCollective = true;
  CollArgs args;                              // collectives
  std::shared_ptr<const OwnedCounts> counts;  // alltoallv: what args' count pointers point to
  bool isSend = false;                        // point-to-point
  int peer = 0;
  void* buffer = nullptr;
  size_t bytes = 0;
  void* stream = nullptr;  // GPU communicators
  int64_t tag = 0;

  static GroupOp collective(loomComm* handle, const CollArgs& args) {
    GroupOp op;
    op.handle = handle;
    op.args = args;
    if (args.func == loomFuncAllToAllv) op.counts = OwnedCounts::copy(op.args, handle->nranks);
    return op;
  }
  static GroupOp pointToPoint(loomComm* handle, bool isSend, int peer, void* buffer, size_t bytes) {
    GroupOp op;
    op.handle = handle;
    op.isCollective = false;
    op.isSend = isSend;
    op.peer = peer;
    op.buffer = buffer;
    op.bytes = bytes;
    return op;
  }
};

int groupDepth();
void recordGroupOp(const GroupOp& op);
// Issues ops now (blocking communicators) or on the communicator's progress thread.
loomResult_t runGroupOps(const std::vector<GroupOp>& ops);

}  // namespace loom
