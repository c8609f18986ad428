#include "api/group.hpp"

#include <memory>

#include "api/thread_state.hpp"

namespace loom {

namespace {

// Every communicator of a group stays pinned until the group ran (HandleUse, kept in a list).
class GroupPins {
 public:
  explicit GroupPins(std::vector<loomComm*>& pinned) : pinned_(pinned) { pinned_.clear(); }
  ~GroupPins() {
    for (loomComm* h : pinned_) h->inflight.fetch_sub(1);
    pinned_.clear();
  }
  GroupPins(const GroupPins&) = delete;
  GroupPins& operator=(const GroupPins&) = delete;
  void pin(loomComm* handle) {
    HandleUse use(handle);             // checks the handle is alive and counts this call in
    if (handle->blocking) use.comm();  // reports a failed initialization
    pinned_.push_back(use.release());
  }

 private:
  std::vector<loomComm*>& pinned_;
};

void toCalls(const std::vector<GroupOp>& ops, std::vector<GroupCall>& calls) {
  calls.clear();
  for (const GroupOp& op : ops) {
    GroupCall c;
    c.comm = op.handle->comm.get();
    c.isCollective = op.isCollective;
    c.args = op.args;
    c.isSend = op.isSend;
    c.peer = op.peer;
    c.buffer = op.buffer;
    c.bytes = op.bytes;
    c.stream = op.stream;
    c.tag = op.tag;
    calls.push_back(c);
  }
}

}  // namespace

std::shared_ptr<const OwnedCounts> OwnedCounts::copy(CollArgs& args, int nranks) {
  auto owned = std::make_shared<OwnedCounts>();
  const size_t n = static_cast<size_t>(nranks);
  const size_t* sources[4] = {args.sendCounts, args.sendDispls, args.recvCounts, args.recvDispls};
  for (const size_t* source : sources)
    owned->values.insert(owned->values.end(), source, source + n);
  const size_t* base = owned->values.data();
  args.sendCounts = base;
  args.sendDispls = base + n;
  args.recvCounts = base + 2 * n;
  args.recvDispls = base + 3 * n;
  return owned;
}

int groupDepth() { return apiThreadState().groupDepth; }

void recordGroupOp(const GroupOp& op) { apiThreadState().groupOps.push_back(op); }

loomResult_t runGroupOps(const std::vector<GroupOp>& ops) {
  if (ops.empty()) return loomSuccess;
  ApiThreadState& state = apiThreadState();
  GroupPins pins(state.pinned);
  bool anyNonBlocking = false, allSameHandle = true;
  for (const GroupOp& op : ops) {
    pins.pin(op.handle);
    anyNonBlocking |= !op.handle->blocking;
    allSameHandle &= op.handle == ops.front().handle;
  }
  if (!anyNonBlocking) {
    toCalls(ops, state.calls);
    state.runner.run(state.calls);
    return loomSuccess;
  }
  LOOM_CHECK_ARG(allSameHandle,
                 "a group on a non-blocking communicator must not mix "
                 "communicators");
  // Queued on the communicator's progress thread: it owns copies of what the group reads (the
  // operations; alltoallv's arrays through GroupOp::counts) and runs with the communicator's
  // own runner.
  loomComm* handle = ops.front().handle;
  return runOrQueue(handle, [handle, copy = ops] {
    std::vector<GroupCall> calls;
    toCalls(copy, calls);
    handle->comm->groupRunner().run(calls);
  });
}

}  // namespace loom

using namespace loom;

extern "C" {

loomResult_t loomGroupStart(void) {
  return guarded("loomGroupStart", [] {
    ++apiThreadState().groupDepth;
    return loomSuccess;
  });
}

loomResult_t loomGroupEnd(void) {
  return guarded("loomGroupEnd", [] {
    ApiThreadState& state = apiThreadState();
    LOOM_CHECK_ARG(state.groupDepth > 0, "loomGroupEnd without loomGroupStart");
    if (--state.groupDepth > 0) return loomSuccess;
    // Cleared however the group ends; clear() keeps the capacity for the next group.
    struct Clear {
      std::vector<GroupOp>& ops;
      ~Clear() { ops.clear(); }
    } clear{state.groupOps};
    return runGroupOps(state.groupOps);
  });
}

}  // extern "C"
