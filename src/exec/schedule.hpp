// A schedule: one rank's part of a collective as data, for the executor (exec/executor.hpp) to run.
//
// Lanes are ordered lists of operations: one lane per peer and direction (the bytes of a channel
// are a stream, so what goes over one channel direction is ordered), and numbered local lanes for
// copies and reductions. An operation may also wait for operations of other lanes: `after(op,
// dep)` waits until dep is done, `streamAfter(op, dep)` lets op process as many bytes as dep has
// done so far, byte i of one standing for byte i of the other (a ring step that forwards what the
// step before it is still receiving; a node share of a block the network is still bringing).
//
// Operations name memory as (buffer, offset): buffer 0 is the call's input, 1 its output, and the
// builder adds scratch buffers of its own sizes; the caller binds them to addresses at run time.
// So a schedule is the same data on every call of the same shape: it prints, hashes and can be
// checked without ranks (exec/simulate.hpp).
//
// A schedule is built into reused storage: clear() keeps every vector's capacity, so building the
// same shape again allocates nothing.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "device/device.hpp"
#include "loom/loom.h"

namespace loom {

enum class OpKind : uint8_t {
  kSend,        // src -> the channel to `peer`
  kRecv,        // the channel from `peer` -> dst
  kRecvReduce,  // dst = reduce(src, what arrives from `peer`), element by element
  kCopy,        // dst = src
  kReduce,      // dst = reduce(sources...), in the order given
  // On the device lane, in the order of the caller's stream: dst = src by the device's copy
  // (copyKind names the memories; zero bytes: a marker, the point the stream has reached).
  kDeviceCopy,
  // Host work the schedule does not spell out (an arena algorithm on staged memory, a backend's
  // own collective): `call` indexes the HostCalls the run is given; done when it returns.
  kCall,
  // A point where host work outside the schedule hands over (a hierarchical call's node phase of
  // a chunk is done): done when the driver opens it (Executor::open), never by itself.
  kGate,
};

const char* opKindName(OpKind kind);

// Where an operation reads or writes: a buffer of the schedule and a byte offset into it.
struct BufferRef {
  uint16_t buffer = 0;
  uint64_t offset = 0;
  BufferRef at(uint64_t more) const { return {buffer, offset + more}; }
};

// How a reducing operation combines: the kernel op (never loomAvg: pass loomSum and the rank
// count as the divisor on the step that completes the sum), the accumulation type (-1: the data
// type) and the divisor applied to the result.
struct Reduction {
  loomDataType_t dtype = loomFloat32;
  loomRedOp_t op = loomSum;
  int accum = -1;
  int divisor = 1;
};

struct ScheduleOp {
  OpKind kind = OpKind::kCopy;
  bool toOutput = false;  // writes part of the call's output: large outputs bypass the cache
  uint16_t lane = 0;
  int32_t peer = -1;  // send and receive kinds: the peer's rank in the communicator
  BufferRef dst, src;
  uint64_t bytes = 0;
  Reduction reduction;                            // kRecvReduce, kReduce
  CopyKind copyKind = CopyKind::kDeviceToDevice;  // kDeviceCopy
  uint32_t call = 0;                              // kCall
  uint32_t depBegin = 0, depEnd = 0;              // Schedule::deps(), filled by finish()
  uint32_t sourceBegin = 0, sourceEnd = 0;        // kReduce: Schedule::sources()
};

struct ScheduleDep {
  uint32_t op = 0;        // the operation that waits
  uint32_t on = 0;        // the operation it waits for
  bool streamed = false;  // byte by byte (see above) rather than for the whole
};

// kDevice: the device's stream (one lane): its operations are issued in order and finish in the
// stream's order, while the host lanes go on.
enum class LaneKind : uint8_t { kSendTo, kRecvFrom, kLocal, kDevice };

struct ScheduleLane {
  LaneKind kind = LaneKind::kLocal;
  int32_t peer = -1;            // kSendTo, kRecvFrom; kLocal: its number
  uint32_t begin = 0, end = 0;  // Schedule::laneOps()[begin, end): its operations in order
};

struct ScheduleBuffer {
  const char* name = "";
  uint64_t bytes = 0;    // what the operations may touch (setExtents, addScratch)
  bool staging = false;  // pinned host memory of the device (addStaging), else plain host memory
};

class Schedule {
 public:
  static constexpr uint16_t kInput = 0;
  static constexpr uint16_t kOutput = 1;

  // Empties the schedule for a new build (keeps capacity): the communicator's ranks and this
  // rank among them, for lane bookkeeping.
  void clear(int nranks);
  // Counts the clear() calls: a schedule built once is the same schedule while this stays (its
  // builder's caller may keep it for calls like the one it was built for).
  uint64_t generation() const { return generation_; }
  bool finished() const { return finished_; }
  // Some send waits for a receive, directly or through local work (finish() finds it): this rank
  // passes on what a peer sent (a ring, a chain, a plan's forwarding step), so a peer it waits
  // for over shared memory may itself wait for the network.
  bool relays() const { return relays_; }

  // The bytes of the call's input and output on this rank (for the checker, and for the
  // executor's choice of cache-bypassing stores into a large output).
  void setExtents(uint64_t inputBytes, uint64_t outputBytes) {
    buffers_[kInput].bytes = inputBytes;
    buffers_[kOutput].bytes = outputBytes;
  }
  BufferRef input(uint64_t offset = 0) const { return {kInput, offset}; }
  BufferRef output(uint64_t offset = 0) const { return {kOutput, offset}; }
  // A scratch buffer of `bytes` (bound by the caller to memory of at least that size).
  uint16_t addScratch(const char* name, uint64_t bytes);
  // A buffer of host memory the device copies to and from (pinned), bound by the caller.
  uint16_t addStaging(const char* name, uint64_t bytes);
  BufferRef scratch(uint16_t buffer, uint64_t offset = 0) const { return {buffer, offset}; }

  // Operations; each returns its index. Zero-byte transfers are kept (they order nothing on the
  // channel and complete at once) so that builders need not special-case empty ranges.
  uint32_t send(int peer, BufferRef src, uint64_t bytes);
  uint32_t recv(int peer, BufferRef dst, uint64_t bytes, bool toOutput = false);
  uint32_t recvReduce(int peer, BufferRef dst, BufferRef with, uint64_t bytes,
                      const Reduction& reduction, bool toOutput = false);
  uint32_t copy(BufferRef dst, BufferRef src, uint64_t bytes, bool toOutput = false,
                int localLane = 0);
  // dst = reduce(sources) in the order given; `sources` are copied into the schedule.
  uint32_t reduce(BufferRef dst, const BufferRef* sources, int count, uint64_t bytes,
                  const Reduction& reduction, bool toOutput = false, int localLane = 0);
  uint32_t deviceCopy(BufferRef dst, BufferRef src, uint64_t bytes, CopyKind kind);
  // A point in the device's stream: what the host waits for (an input complete), or where the
  // stream waits for the host (its later work after a host operation).
  uint32_t deviceMarker() { return deviceCopy(output(), output(), 0, CopyKind::kDeviceToDevice); }
  uint32_t call(uint32_t index, int localLane = 0);
  // What operations wait on until the run's driver opens it (see kGate).
  uint32_t gate(int localLane = 0);
  // A zero-byte local operation that is done once everything it is made to wait for is: one
  // dependency for many waiters instead of each waiting for each.
  uint32_t join(int localLane = 0) { return copy(output(), output(), 0, false, localLane); }
  // `op` waits until `on` is done / processes only the bytes `on` has done.
  void after(uint32_t op, uint32_t on) { deps_.push_back({op, on, false}); }
  void streamAfter(uint32_t op, uint32_t on) { deps_.push_back({op, on, true}); }

  // Sorts the dependencies and lanes into their final form; call once after building.
  void finish();

  const std::vector<ScheduleOp>& ops() const { return ops_; }
  const std::vector<ScheduleLane>& lanes() const { return lanes_; }
  const std::vector<uint32_t>& laneOps() const { return laneOps_; }
  const std::vector<ScheduleDep>& deps() const { return deps_; }
  const std::vector<BufferRef>& sources() const { return sources_; }
  const std::vector<ScheduleBuffer>& buffers() const { return buffers_; }
  bool empty() const { return ops_.empty(); }

  // A stable hash of the schedule's content (not of any address): equal schedules hash equal on
  // every rank and every run.
  uint64_t hash() const;
  // One line per lane and operation, for LOOM_DEBUG=TRACE (with COLL).
  std::string describe() const;

 private:
  uint16_t laneFor(LaneKind kind, int peer);
  bool aSendWaitsForAReceive();  // finish(): relays()
  uint32_t add(const ScheduleOp& op);

  std::vector<ScheduleOp> ops_;
  std::vector<ScheduleDep> deps_;
  std::vector<BufferRef> sources_;
  std::vector<ScheduleBuffer> buffers_;
  std::vector<ScheduleLane> lanes_;
  std::vector<uint32_t> laneOps_;
  // Building: which lane each peer's channel directions and each local number have (-1: none).
  std::vector<int32_t> sendLane_, recvLane_, localLane_, deviceLane_;
  std::vector<uint32_t> laneCounts_;  // finish()'s scratch
  std::vector<ScheduleDep> depScratch_;
  bool finished_ = false;
  bool relays_ = false;
  uint64_t generation_ = 0;
};

}  // namespace loom
