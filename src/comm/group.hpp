// A group of a communicator's ranks that runs collectives together, as UCC's teams do: the whole
// communicator, or a heterogeneous communicator's cluster (its ranks of one device kind) or
// exchange (the clusters' leaders and the ranks of the clusters that do not collapse). Its ranks
// are numbered 0..size-1 in the order `members` lists them (ranks of the communicator).
//
// A group has no bootstrap, rendezvous or thread of its own: it runs over the communicator's
// channels (wrapped with its own mismatch check: its own call numbers and signatures), checks its
// waits with the communicator's health (one clock, one failure state), and has an arena of its
// own only where all its ranks share one node (the communicator's where the group is all of
// it; attachArena for a smaller group), its algorithm table, the algorithms' workspaces, and its
// device's native collectives where the device has them (set up over the group's channels).
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "algorithms/context.hpp"
#include "comm/call_checker.hpp"
#include "device/native.hpp"
#include "plan/selector.hpp"
#include "transport/channel.hpp"
#include "transport/shm/shm_arena.hpp"

namespace loom {

struct GroupSetup {
  std::vector<int> members;  // ranks of the communicator, in the group's order
  int rank = 0;              // this rank's index in members
  // The communicator's collective channels, by communicator rank (null: this rank); they
  // outlive the group.
  std::vector<Channel*> channels;
  Device* device = nullptr;      // this rank's device
  Device* hostDevice = nullptr;  // the host CPU (staged calls)
  int64_t checkMode = 1;         // LOOM_CHECK
  std::string algo;              // LOOM_ALGO for this group's table (empty: the defaults)
  std::string deviceName;        // for the table's messages ("cpu", "heterogeneous", ...)
  size_t directMaxBytes = 0;
  size_t streamingMinBytes = 0;
  bool nodesShared = false;  // several nodes, some with more than one of the group's ranks
  CoreSharing corePeers;     // the ranks on this host
  BesideWait besideWait = BesideWait::kAuto;  // LOOM_BESIDE_WAIT
  std::function<void(int rank)> check;  // the communicator's health check (by communicator rank)
  // An arena of exactly these ranks (null where they do not share one node); owned elsewhere.
  const ShmArena* arena = nullptr;
  const Hierarchy* hierarchy = nullptr;  // the whole communicator on several nodes
  ExecObserver* observer = nullptr;      // LOOM_TRACE: its runs' operations and waits (or none)
  // The device's native collectives come next (attachNative, null where it has none): LOOM_ALGO
  // may name theirs, so the table is made then, not against the host algorithms now.
  bool awaitsNative = false;
};

class Group {
 public:
  explicit Group(GroupSetup setup);
  Group(const Group&) = delete;
  Group& operator=(const Group&) = delete;

  int rank() const { return rank_; }
  int size() const { return static_cast<int>(members_.size()); }
  const std::vector<int>& members() const { return members_; }
  int member(int index) const { return members_[index]; }
  bool singleNode() const { return ctx_.arena != nullptr; }

  CallChecker& checker() { return checker_; }
  const Selector& selector() const { return *selector_; }
  // Execution plans and the user's selector callback join the table (comm/plans.cpp).
  Selector& selector() { return *selector_; }
  const Algorithm& select(loomFunc_t func, size_t bytes) const {
    return selector_->select(func, bytes);
  }
  NativeCollectives* native() const { return native_.get(); }
  // The algorithms' view: on this rank's device, and on the host CPU (staged calls).
  const AlgoContext& ctx() const { return ctx_; }
  const AlgoContext& hostCtx() const { return hostCtx_; }
  AlgoContext& ctx() { return ctx_; }

  // All-gather of one string per rank over the group's channels (its native collectives' set-up;
  // every member calls it at the same point).
  std::vector<std::string> allGather(const std::string& mine);
  // Its device's own collectives (set up with allGather): its table becomes theirs, and their
  // kernels carry no signature (LOOM_CHECK=2's round trip is their check).
  void attachNative(std::unique_ptr<NativeCollectives> native);
  // An arena of exactly its ranks, in its order (all on one node): the flat arena algorithms
  // join its table.
  void attachArena(ShmArena arena);

 private:
  std::vector<int> members_;
  int rank_;
  CallChecker checker_;
  std::vector<std::unique_ptr<Channel>> checked_;  // by group rank: the wrapped channels
  std::vector<Channel*> channels_;                 // ... as the algorithms see them
  ShmArena ownArena_;                              // where attachArena gave it one
  std::unique_ptr<NativeCollectives> native_;
  std::vector<Algorithm> nativeAlgorithms_;
  std::unique_ptr<Selector> selector_;
  SelectorInputs inputs_;
  std::string algo_;
  AlgoWorkspace workspace_;
  AlgoContext ctx_, hostCtx_;
};

}  // namespace loom
