#include "api/group.hpp"

#include <memory>

namespace loom {

namespace {

struct GroupState {
  int depth = 0;
  std::vector<GroupOp> ops;
};
thread_local GroupState tlsGroup;

void executeOps(const std::vector<GroupOp>& ops) {
  for (size_t i = 0; i < ops.size();) {
    if (ops[i].isCollective) {
      ops[i].handle->comm->collective(ops[i].args);
      ++i;
      continue;
    }
    std::vector<P2POp> batch;
    std::vector<Comm*> comms;
    for (; i < ops.size() && !ops[i].isCollective; ++i) {
      Comm* comm = ops[i].handle->comm.get();
      batch.push_back(comm->pointToPoint(ops[i].isSend, ops[i].peer, ops[i].buffer, ops[i].bytes));
      bool known = false;
      for (Comm* c : comms) known |= c == comm;
      if (!known) comms.push_back(comm);
    }
    Comm::runPointToPointBatch(batch, comms);
  }
}

}  // namespace

std::shared_ptr<const OwnedCounts> OwnedCounts::copy(CollArgs& args, int nranks) {
  auto owned = std::make_shared<OwnedCounts>();
  const size_t n = static_cast<size_t>(nranks);
  const size_t* sources[4] = {args.sendCounts, args.sendDispls, args.recvCounts, args.recvDispls};
  for (const size_t* source : sources) owned->values.insert(owned->values.end(), source, source + n);
  const size_t* base = owned->values.data();
  args.sendCounts = base;
  args.sendDispls = base + n;
  args.recvCounts = base + 2 * n;
  args.recvDispls = base + 3 * n;
  return owned;
}

int groupDepth() { return tlsGroup.depth; }

void recordGroupOp(const GroupOp& op) { tlsGroup.ops.push_back(op); }

loomResult_t runGroupOps(std::vector<GroupOp> ops) {
  if (ops.empty()) return loomSuccess;
  // Pin every communicator of the group for the duration (a destroyed one is reported here).
  std::vector<std::unique_ptr<HandleUse>> pins;
  bool anyNonBlocking = false, allSameHandle = true;
  for (const GroupOp& op : ops) {
    pins.push_back(std::make_unique<HandleUse>(op.handle));
    if (op.handle->blocking) pins.back()->comm();  // reports a failed initialization
    anyNonBlocking |= !op.handle->blocking;
    allSameHandle &= op.handle == ops.front().handle;
  }
  if (!anyNonBlocking) {
    executeOps(ops);
    return loomSuccess;
  }
  LOOM_CHECK_ARG(allSameHandle, "a group on a non-blocking communicator must not mix "
                                "communicators");
  return runOrQueue(ops.front().handle, [ops] { executeOps(ops); });
}

}  // namespace loom

using namespace loom;

extern "C" {

loomResult_t loomGroupStart(void) {
  return guarded("loomGroupStart", [] {
    ++tlsGroup.depth;
    return loomSuccess;
  });
}

loomResult_t loomGroupEnd(void) {
  return guarded("loomGroupEnd", [] {
    LOOM_CHECK_ARG(tlsGroup.depth > 0, "loomGroupEnd without loomGroupStart");
    if (--tlsGroup.depth > 0) return loomSuccess;
    std::vector<GroupOp> ops = std::move(tlsGroup.ops);
    tlsGroup.ops.clear();
    return runGroupOps(std::move(ops));
  });
}

}  // extern "C"
