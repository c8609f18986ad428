#include "api/group.hpp"

#include <algorithm>
#include <memory>

namespace loom {

namespace {

// Per thread, and reused from call to call: a group allocates nothing once warmed up.
struct GroupState {
  int depth = 0;
  std::vector<GroupOp> ops;
  std::vector<loomComm*> pinned;
};
thread_local GroupState tlsGroup;

// Every communicator of a group stays pinned until the group ran (HandleUse, kept in a list).
class GroupPins {
 public:
  GroupPins() { tlsGroup.pinned.clear(); }
  ~GroupPins() {
    for (loomComm* h : tlsGroup.pinned) h->inflight.fetch_sub(1);
    tlsGroup.pinned.clear();
  }
  GroupPins(const GroupPins&) = delete;
  GroupPins& operator=(const GroupPins&) = delete;
  void pin(loomComm* handle) {
    HandleUse use(handle);             // checks the handle is alive and counts this call in
    if (handle->blocking) use.comm();  // reports a failed initialization
    tlsGroup.pinned.push_back(use.release());
  }
};

// A run of sends and receives on one GPU communicator goes to its device engine as one batch,
// which orders it on the stream of the run's first operation.
size_t executeDevicePointToPoint(const std::vector<GroupOp>& ops, size_t first) {
  thread_local std::vector<DeviceP2POp> batch;
  batch.clear();
  size_t i = first;
  for (; i < ops.size() && !ops[i].isCollective && ops[i].handle == ops[first].handle; ++i) {
    LOOM_CHECK_ARG(ops[i].stream == ops[first].stream,
                   "the sends and receives of one group on a GPU communicator must use one stream");
    batch.push_back(
        DeviceP2POp{ops[i].isSend, ops[i].peer, ops[i].buffer, ops[i].bytes, ops[i].tag});
  }
  ops[first].handle->comm->devicePointToPoint(batch, ops[first].stream);
  return i;
}

// Staged device communicators (no native collectives) of a group with collectives: all of a
// communicator's sends and receives in the group are staged and posted together where its first
// one stands, progress on its engine's thread while the collectives run, and end after them (a
// group's operations are concurrent, so moving them together changes nothing a caller may rely
// on; waiting for them before a later collective could deadlock against a peer that runs the
// collective first).
class StagedBatches {
 public:
  void clear() {
    comms_.clear();
    begun_.clear();
  }
  // Whether op i belongs to a batch, beginning the batch at its communicator's first op.
  bool take(const std::vector<GroupOp>& ops, size_t i) {
    Comm& comm = *ops[i].handle->comm;
    auto at = std::find(comms_.begin(), comms_.end(), &comm);
    if (at == comms_.end()) return false;
    Batch& batch = batches_[at - comms_.begin()];
    if (batch.begun) return true;
    batch.ops.clear();
    for (size_t j = i; j < ops.size(); ++j) {
      if (ops[j].isCollective || ops[j].handle->comm.get() != &comm) continue;
      LOOM_CHECK_ARG(ops[j].stream == ops[i].stream,
                     "the sends and receives of one group on a device communicator must use one "
                     "stream");
      batch.ops.push_back(
          DeviceP2POp{ops[j].isSend, ops[j].peer, ops[j].buffer, ops[j].bytes, ops[j].tag});
    }
    comm.beginStagedPointToPoint(batch.ops, ops[i].stream);
    batch.begun = true;
    begun_.push_back(&comm);
    comm.p2pEngine().startThread();  // the group's collectives run meanwhile
    return true;
  }
  void find(const std::vector<GroupOp>& ops) {
    clear();
    bool collective = false;
    for (const GroupOp& op : ops) collective |= op.isCollective;
    if (!collective) return;
    for (const GroupOp& op : ops) {
      Comm* comm = op.handle->comm.get();
      if (op.isCollective || !comm->stagesPointToPoint() ||
          std::find(comms_.begin(), comms_.end(), comm) != comms_.end())
        continue;
      comms_.push_back(comm);
    }
    if (batches_.size() < comms_.size()) batches_.resize(comms_.size());
    for (size_t k = 0; k < comms_.size(); ++k) batches_[k].begun = false;
  }
  // Ends every begun batch; the first error is reported after all ended.
  void end() {
    std::exception_ptr first;
    for (Comm* comm : begun_) {
      try {
        comm->endStagedPointToPoint();
      } catch (...) {
        if (!first) first = std::current_exception();
      }
    }
    begun_.clear();
    if (first) std::rethrow_exception(first);
  }

 private:
  struct Batch {
    std::vector<DeviceP2POp> ops;
    bool begun = false;
  };
  std::vector<Comm*> comms_;
  std::vector<Batch> batches_;
  std::vector<Comm*> begun_;
};

// Posts the group's host sends and receives to their communicators' engines where they stand and
// runs its collectives and device operations in order.
void postAndRun(const std::vector<GroupOp>& ops, std::vector<P2PTicket*>& tickets,
                std::vector<P2PEngine*>& engines, size_t& posted, bool collectiveAfterP2P,
                StagedBatches& staged) {
  for (size_t i = 0; i < ops.size();) {
    if (ops[i].isCollective) {
      // Sends and receives posted so far move on the engines' threads meanwhile.
      for (P2PEngine* engine : engines) engine->startThread();
      ops[i].handle->comm->collective(ops[i].args);
      ++i;
      continue;
    }
    if (staged.take(ops, i)) {
      ++i;
      continue;
    }
    if (ops[i].handle->comm->onDevice()) {
      i = executeDevicePointToPoint(ops, i);
      continue;
    }
    Comm& comm = *ops[i].handle->comm;
    P2PTicket& ticket = *tickets[posted];
    ticket.reset();
    ticket.op =
        comm.pointToPoint(ops[i].isSend, ops[i].peer, ops[i].buffer, ops[i].bytes, ops[i].tag);
    P2PEngine* engine = &comm.p2pEngine();
    if (std::find(engines.begin(), engines.end(), engine) == engines.end()) {
      engines.push_back(engine);
      // A waiter drives one engine; the others (and all, while collectives run) need threads.
      if (engines.size() > 1 || collectiveAfterP2P)
        for (P2PEngine* e : engines) e->startThread();
    }
    engine->postOwned(ticket);
    ++posted;
    ++i;
  }
}

// Host sends and receives progress together, in any order, also while the group's collectives
// run, and are all waited for at the end: no order of operations inside a group can deadlock on
// point-to-point.
void executeOps(const std::vector<GroupOp>& ops) {
  // Reused: a group allocates nothing once warm. Tickets hold a mutex: a pool, by pointer.
  thread_local std::vector<std::unique_ptr<P2PTicket>> pool;
  thread_local std::vector<P2PTicket*> tickets;
  thread_local std::vector<P2PEngine*> engines;
  thread_local StagedBatches staged;
  staged.find(ops);
  size_t hostP2P = 0;
  bool collectiveAfterP2P = false;
  for (const GroupOp& op : ops) {
    if (op.isCollective) {
      collectiveAfterP2P |= hostP2P > 0;
    } else if (!op.handle->comm->onDevice()) {
      ++hostP2P;
    }
  }
  while (pool.size() < hostP2P) pool.push_back(std::make_unique<P2PTicket>());
  tickets.clear();
  for (size_t i = 0; i < hostP2P; ++i) tickets.push_back(pool[i].get());
  engines.clear();
  size_t posted = 0;
  try {
    postAndRun(ops, tickets, engines, posted, collectiveAfterP2P, staged);
  } catch (...) {
    try {
      staged.end();  // their tickets point into the communicators' staging
    } catch (...) {  // the first error is the one to report
    }
    // Posted tickets point into `tickets`: they must finish (they fail at once on an aborted
    // communicator) before the next group reuses it.
    tickets.resize(posted);
    if (!engines.empty()) {
      try {
        engines.front()->finish(tickets);
      } catch (...) {  // the first error is the one to report
      }
    }
    throw;
  }
  if (!engines.empty()) {
    try {
      engines.front()->finish(tickets);
    } catch (...) {
      try {
        staged.end();
      } catch (...) {  // the first error is the one to report
      }
      throw;
    }
  }
  staged.end();
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

int groupDepth() { return tlsGroup.depth; }

void recordGroupOp(const GroupOp& op) { tlsGroup.ops.push_back(op); }

loomResult_t runGroupOps(const std::vector<GroupOp>& ops) {
  if (ops.empty()) return loomSuccess;
  GroupPins pins;
  bool anyNonBlocking = false, allSameHandle = true;
  for (const GroupOp& op : ops) {
    pins.pin(op.handle);
    anyNonBlocking |= !op.handle->blocking;
    allSameHandle &= op.handle == ops.front().handle;
  }
  if (!anyNonBlocking) {
    executeOps(ops);
    return loomSuccess;
  }
  LOOM_CHECK_ARG(allSameHandle,
                 "a group on a non-blocking communicator must not mix "
                 "communicators");
  return runOrQueue(ops.front().handle, [copy = ops] { executeOps(copy); });
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
    // Cleared however the group ends; clear() keeps the capacity for the next group.
    struct Clear {
      ~Clear() { tlsGroup.ops.clear(); }
    } clear;
    return runGroupOps(tlsGroup.ops);
  });
}

}  // extern "C"
