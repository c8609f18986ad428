#include "comm/group_run.hpp"

#include <algorithm>

#include "base/error.hpp"
#include "comm/comm.hpp"

namespace loom {

namespace {

DeviceP2POp deviceOp(const GroupCall& c) {
  return DeviceP2POp{c.isSend, c.peer, c.buffer, c.bytes, c.tag};
}

// The sends and receives of calls[i]'s communicator from call i on into `ops` (consecutive: up to
// the next collective or another communicator's call); returns where that ended. One stream.
size_t gatherSendsAndReceives(const std::vector<GroupCall>& calls, size_t i, bool consecutive,
                              const char* kind, std::vector<DeviceP2POp>& ops) {
  ops.clear();
  size_t j = i;
  for (; j < calls.size(); ++j) {
    const bool theirs = !calls[j].isCollective && calls[j].comm == calls[i].comm;
    if (!theirs && consecutive) break;
    if (!theirs) continue;
    LOOM_CHECK_ARG(calls[j].stream == calls[i].stream, "the sends and receives of one group on a ",
                   kind, " communicator must use one stream");
    ops.push_back(deviceOp(calls[j]));
  }
  return j;
}

}  // namespace

size_t GroupRunner::runDeviceBatch(const std::vector<GroupCall>& calls, size_t first) {
  const size_t end = gatherSendsAndReceives(calls, first, true, "GPU", batch_);
  calls[first].comm->devicePointToPoint(batch_, calls[first].stream);
  return end;
}

void GroupRunner::runDeferredDeviceBatches(const std::vector<GroupCall>& calls) {
  auto native = [](const GroupCall& c) {
    return !c.isCollective && c.comm->onDevice() && !c.comm->stagesPointToPoint();
  };
  for (size_t i = 0; i < calls.size(); ++i) {
    if (!native(calls[i])) continue;
    bool first = true;  // its communicator's first send or receive: the batch starts here
    for (size_t j = 0; j < i && first; ++j)
      first = !(native(calls[j]) && calls[j].comm == calls[i].comm);
    if (!first) continue;
    gatherSendsAndReceives(calls, i, false, "GPU", batch_);
    calls[i].comm->devicePointToPoint(batch_, calls[i].stream);
  }
}

void GroupRunner::findStaged(const std::vector<GroupCall>& calls) {
  stagedCount_ = 0;
  bool collective = false;
  for (const GroupCall& c : calls) collective |= c.isCollective;
  if (!collective) return;
  for (const GroupCall& c : calls) {
    if (c.isCollective || !c.comm->stagesPointToPoint()) continue;
    auto end = staged_.begin() + static_cast<std::ptrdiff_t>(stagedCount_);
    if (std::find_if(staged_.begin(), end,
                     [&](const StagedBatch& b) { return b.comm == c.comm; }) != end)
      continue;
    if (staged_.size() <= stagedCount_) staged_.emplace_back();
    staged_[stagedCount_].comm = c.comm;
    staged_[stagedCount_].begun = false;
    ++stagedCount_;
  }
}

bool GroupRunner::takeStaged(const std::vector<GroupCall>& calls, size_t i) {
  Comm* comm = calls[i].comm;
  auto end = staged_.begin() + static_cast<std::ptrdiff_t>(stagedCount_);
  auto batch =
      std::find_if(staged_.begin(), end, [&](const StagedBatch& b) { return b.comm == comm; });
  if (batch == end) return false;
  if (batch->begun) return true;
  gatherSendsAndReceives(calls, i, false, "device", batch->ops);
  comm->beginStagedPointToPoint(batch->ops, calls[i].stream);
  batch->begun = true;
  comm->p2pEngine().startThread();  // the group's collectives run meanwhile
  return true;
}

void GroupRunner::endStaged() {
  // Every begun batch ends; the first error is reported after all ended.
  std::exception_ptr first;
  for (size_t k = 0; k < stagedCount_; ++k) {
    StagedBatch& batch = staged_[k];
    if (!batch.begun) continue;
    batch.begun = false;
    try {
      batch.comm->endStagedPointToPoint();
    } catch (...) {
      if (!first) first = std::current_exception();
    }
  }
  if (first) std::rethrow_exception(first);
}

void GroupRunner::postAndRun(const std::vector<GroupCall>& calls, bool collectiveAfterP2P,
                             bool deferDeviceP2P) {
  for (size_t i = 0; i < calls.size();) {
    const GroupCall& c = calls[i];
    if (c.isCollective) {
      // Sends and receives posted so far move on the engines' threads meanwhile.
      for (P2PEngine* engine : engines_) engine->startThread();
      c.comm->collective(c.args);
      ++i;
      continue;
    }
    if (takeStaged(calls, i)) {
      ++i;
      continue;
    }
    if (c.comm->onDevice()) {
      i = deferDeviceP2P ? i + 1 : runDeviceBatch(calls, i);
      continue;
    }
    P2PTicket& ticket = *tickets_[posted_];
    ticket.reset();
    ticket.op = c.comm->pointToPoint(c.isSend, c.peer, c.buffer, c.bytes, c.tag);
    P2PEngine* engine = &c.comm->p2pEngine();
    if (std::find(engines_.begin(), engines_.end(), engine) == engines_.end()) {
      engines_.push_back(engine);
      // A waiter drives one engine; the others (and all, while collectives run) need threads.
      if (engines_.size() > 1 || collectiveAfterP2P)
        for (P2PEngine* e : engines_) e->startThread();
    }
    engine->postOwned(ticket);
    ++posted_;
    ++i;
  }
  if (deferDeviceP2P) runDeferredDeviceBatches(calls);
}

void GroupRunner::finishPosted() {
  // Posted tickets point into tickets_: they finish (at once, on an aborted communicator) before
  // the next group reuses it.
  tickets_.resize(posted_);
  if (!engines_.empty()) engines_.front()->finish(tickets_);
}

void GroupRunner::run(const std::vector<GroupCall>& calls) {
  findStaged(calls);
  size_t hostP2P = 0;
  bool collectiveAfterP2P = false, collective = false;
  for (const GroupCall& c : calls) {
    collective |= c.isCollective;
    if (c.isCollective)
      collectiveAfterP2P |= hostP2P > 0;
    else if (!c.comm->onDevice())
      ++hostP2P;
  }
  while (pool_.size() < hostP2P) pool_.push_back(std::make_unique<P2PTicket>());
  tickets_.clear();
  for (size_t i = 0; i < hostP2P; ++i) tickets_.push_back(pool_[i].get());
  engines_.clear();
  posted_ = 0;
  try {
    postAndRun(calls, collectiveAfterP2P, collective);
  } catch (...) {
    try {
      endStaged();   // their tickets point into the communicators' staging
    } catch (...) {  // the first error is the one to report
    }
    try {
      finishPosted();
    } catch (...) {  // the first error is the one to report
    }
    throw;
  }
  try {
    finishPosted();
  } catch (...) {
    try {
      endStaged();
    } catch (...) {  // the first error is the one to report
    }
    throw;
  }
  endStaged();
}

}  // namespace loom
