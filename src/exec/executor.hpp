// The executor: the one progress loop of Loom's host side. It runs a schedule (exec/schedule.hpp)
// over a communicator's channels until every operation is done: each pass moves every lane's
// first unfinished operation as far as its channel, its dependencies and its bytes allow (a lane
// goes on to its next operation as soon as one finishes); when a pass moves nothing it waits, with
// the usual spin, poll on the channels' sockets, yield and sleep (base/wait.hpp), running the
// health check for the peers still owed bytes (the deadline, the abort flag, a dead peer).
//
// Roles: the caller's thread drives (the inline driver). What it needs of the communicator comes
// in an ExecEnv: the channels by rank, the device that copies and reduces host memory, the health
// check, the poll set and the core-sharing picture of the waits. Nothing is allocated per run once
// the executor has seen a schedule of the same size.
#pragma once

#include <functional>
#include <span>
#include <vector>

#include "base/wait.hpp"
#include "device/device.hpp"
#include "exec/schedule.hpp"
#include "transport/channel.hpp"

namespace loom {

// Work that the progress loop drives: a schedule being run, the point-to-point tickets of a
// communicator (comm/p2p_engine.hpp). pass() moves what can move without waiting and says
// whether anything did; check() throws when the work must give up (deadline, abort, a dead peer
// it still needs); gather() names the descriptors whose readiness would let it move.
class Progress {
 public:
  virtual bool pass() = 0;
  virtual void check() = 0;
  virtual void gather(PollSet& set) = 0;

 protected:
  ~Progress() = default;
};

// The progress loop, the only one: passes until done(), waiting between passes that moved
// nothing (spin, poll on the gathered descriptors, yield or sleep, with the health check).
template <typename Done>
void driveUntil(Progress& work, Done&& done, PollSet& set, const CoreSharing& peers) {
  while (!done()) {
    if (work.pass()) continue;
    waitUntil([&] { return work.pass() || done(); }, [&] { work.check(); },
              [&](PollSet& s) { work.gather(s); }, set, peers);
  }
}

struct ExecEnv {
  Device* device = nullptr;            // copies and reductions of host-addressable memory
  std::span<Channel* const> channels;  // by rank: the channel each send or receive uses
  // Throws when the call must give up: the deadline passed, the communicator was aborted, or
  // `peer` (a rank; -1: none in particular) is gone.
  const std::function<void(int peer)>* check = nullptr;
  PollSet* pollSet = nullptr;
  CoreSharing corePeers;         // whom a wait may yield its core to
  size_t streamingMinBytes = 0;  // outputs at least this large are written past the cache
};

class Executor final : private Progress {
 public:
  // Runs `schedule` to its end. buffers[b] is the address of the schedule's buffer b (input,
  // output, then its scratch buffers); the input is only read. Throws what the health check or a
  // channel throws; the schedule's bytes are then partly moved and the call has failed.
  void run(const Schedule& schedule, std::span<char* const> buffers, const ExecEnv& env);

 private:
  struct Limit {
    bool ready;      // every dependency allows the operation to start
    uint64_t bytes;  // how far it may go
  };
  bool pass() override;
  void check() override { checkPending(); }
  void gather(PollSet& set) override { gatherPending(set); }
  Limit limitOf(const ScheduleOp& op) const;
  bool step(uint32_t index, uint64_t limit, uint32_t lane);
  bool stepSend(const ScheduleOp& op, uint64_t& position, uint64_t limit, uint32_t lane);
  bool stepRecv(const ScheduleOp& op, uint64_t& position);
  bool stepRecvReduce(const ScheduleOp& op, uint64_t& position, uint64_t limit);
  bool stepLocal(const ScheduleOp& op, uint64_t& position, uint64_t limit);
  void checkPending() const;
  void gatherPending(PollSet& set) const;
  char* at(BufferRef ref) const { return buffers_[ref.buffer] + ref.offset; }
  Channel& channel(int peer) const { return *env_->channels[peer]; }
  bool toOutputStreams(const ScheduleOp& op) const;

  // The run in progress.
  const Schedule* schedule_ = nullptr;
  std::span<char* const> buffers_;
  const ExecEnv* env_ = nullptr;
  bool networked_ = false;  // some lane's channel is a network channel
  size_t remaining_ = 0;    // operations not yet done
  // Per operation and lane, reused from run to run.
  std::vector<uint64_t> position_;  // bytes done
  std::vector<uint8_t> done_;
  std::vector<uint32_t> head_;     // per lane: its first unfinished operation (index into it)
  std::vector<uint8_t> blocked_;   // per lane: its last send found the channel full
  std::vector<const void*> srcs_;  // a reduction's sources
};

}  // namespace loom
