// Running a group (loomGroupStart .. loomGroupEnd, recorded by the C API): its collectives in
// order, each on its communicator, and its sends and receives together, whatever their order.
//
// Host sends and receives are posted to their communicators' point-to-point engines where they
// stand and progress while the group's collectives run (the engines' threads drive them), and the
// group waits for all at its end: no order of operations inside a group deadlocks. A run of sends
// and receives on one communicator with native collectives (CUDA) goes to its engine as one batch
// on the stream of the run's first operation. Devices without native collectives stage their
// sends and receives through host memory: where the group has collectives too, all of a
// communicator's sends and receives are staged and posted where its first one stands and end
// after the collectives.
//
// A GroupRunner's vectors are reused from group to group: a group allocates nothing once warm.
// The C API keeps one per thread for blocking groups; each communicator has one for the groups
// queued on its progress thread (non-blocking communicators).
#pragma once

#include <exception>
#include <memory>
#include <vector>

#include "base/coll_args.hpp"
#include "comm/p2p_engine.hpp"

namespace loom {

class Comm;

// One operation of a group, as the communicator runs it.
struct GroupCall {
  Comm* comm = nullptr;
  bool isCollective = true;
  CollArgs args;        // collectives (alltoallv's arrays owned by the caller until the run ends)
  bool isSend = false;  // point-to-point
  int peer = 0;
  void* buffer = nullptr;
  size_t bytes = 0;
  loomStream_t stream = nullptr;
  int64_t tag = 0;
};

class GroupRunner {
 public:
  void run(const std::vector<GroupCall>& calls);

 private:
  // A device communicator without native collectives: its staged sends and receives.
  struct StagedBatch {
    Comm* comm = nullptr;
    std::vector<DeviceP2POp> ops;
    bool begun = false;
  };
  size_t runDeviceBatch(const std::vector<GroupCall>& calls, size_t first);
  // In a group with collectives, a GPU communicator's sends and receives run after them, one
  // batch per communicator: in stream order a receive enqueued before a collective would wait
  // for a send its peer enqueues after it (a group's operations do not depend on each other).
  void runDeferredDeviceBatches(const std::vector<GroupCall>& calls);
  bool takeStaged(const std::vector<GroupCall>& calls, size_t i);
  void findStaged(const std::vector<GroupCall>& calls);
  void endStaged();
  void postAndRun(const std::vector<GroupCall>& calls, bool collectiveAfterP2P,
                  bool deferDeviceP2P);
  void finishPosted();

  std::vector<std::unique_ptr<P2PTicket>> pool_;  // tickets hold a mutex: a pool, by pointer
  std::vector<P2PTicket*> tickets_;
  size_t posted_ = 0;
  std::vector<P2PEngine*> engines_;
  std::vector<DeviceP2POp> batch_;
  std::vector<StagedBatch> staged_;
  size_t stagedCount_ = 0;
};

}  // namespace loom
