// Native collectives: a backend's own algorithms (GPU kernels that drive peer memory, a vendor
// library) for a communicator whose ranks all sit on devices of its kind. The communicator
// creates one through Device::createCollectives, lists its algorithms in the selector's table
// with the backend's own rows, and runs the chosen one with run(); nothing above the device
// layer knows what is inside.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "base/coll_args.hpp"
#include "base/error.hpp"
#include "device/native_plan.hpp"

namespace loom {

// What the communicator lends its native collectives (all callbacks thread-safe).
struct NativeSetup {
  int rank = 0;
  int nranks = 1;
  int64_t timeoutMs = 0;
  // Which process each rank runs in: ranks with equal numbers share one (same host, PID
  // namespace and pid), so each can use the others' memory at its own address. Empty: unknown.
  std::vector<int> process;
  // All-gather of one string per rank over the communicator's bootstrap (init only).
  std::function<std::vector<std::string>(const std::string&)> allGather;
  // The reason this rank must stop (a dead peer, a peer's abort), if any.
  std::function<std::optional<Error>()> peerFailure;
  // Records a failure as the communicator's (aborts it, tells the peers).
  std::function<void(const Error&)> fail;
  const std::atomic<bool>* aborted = nullptr;  // the communicator's abort flag
};

struct NativeAlgorithm {
  loomFunc_t func;
  std::string name;  // what LOOM_ALGO and loom-info call it
};

// "Calls of func up to maxBytes (as the C API counts them) run algorithm" — rows of one func
// in ascending maxBytes; the last row of a func should reach SIZE_MAX.
struct NativeSelectorRow {
  loomFunc_t func;
  size_t maxBytes;
  int algorithm;  // index into algorithms()
};

// Where a backend reports the device-side spans of its work (LOOM_TRACE, comm/trace.hpp): a kernel
// or copy from when the device began it to when it ended, on the host's steady clock (ns). Called
// from any of the backend's threads.
class DeviceTimeline {
 public:
  // name: a static string ("allreduce ll"); call: the communicator's call number, 0 if unknown.
  virtual void deviceSpan(const char* name, uint64_t call, int64_t startNs, int64_t endNs) = 0;

 protected:
  ~DeviceTimeline() = default;
};

class NativeCollectives {
 public:
  virtual ~NativeCollectives() = default;
  virtual const std::vector<NativeAlgorithm>& algorithms() const = 0;
  virtual std::vector<NativeSelectorRow> selectorRows() const = 0;
  // Enqueues a collective (arguments checked) on args.stream with algorithms()[algorithm].
  virtual void run(int algorithm, const CollArgs& args) = 0;
  // Enqueues a group's sends and receives (buffers checked) on `stream`.
  virtual void pointToPoint(const std::vector<DeviceP2POp>& ops, loomStream_t stream) = 0;
  // Makes in-flight work of this communicator give up, and keeps it giving up (abort).
  virtual void stop() = 0;
  // Collective, in the same order on every rank: rank's part [ptr, ptr + bytes) of window `id`
  // (loomCommWindowRegister), which calls whose buffers lie in it at the same offset on every
  // rank may use directly. False, the same on every rank, with `why`, when this engine cannot
  // (then calls on it run as on any buffer).
  virtual bool registerWindow(uint64_t id, void* ptr, size_t bytes, std::string& why) {
    (void)id, (void)ptr, (void)bytes;
    why = "this device's collectives do not use windows";
    return false;
  }
  // Collective: window `id` (registered here) is no longer used; returns once no peer can reach
  // this rank's part any more.
  virtual void deregisterWindow(uint64_t id) { (void)id; }
  // Not collective: this rank's [ptr, ptr + bytes) as registration `id` (loomCommRegister), which
  // calls whose buffers are registered on every rank may use directly. False, with `why`, when
  // this engine does not use registrations (the same on every rank: calls run as on any buffer);
  // throws loomInvalidArgument for memory it cannot share with peers.
  virtual bool registerBuffer(uint64_t id, void* ptr, size_t bytes, std::string& why) {
    (void)id, (void)ptr, (void)bytes;
    why = "this device's collectives do not use registered buffers";
    return false;
  }
  // Not collective: registration `id` (registered here) is no longer used; returns once this
  // rank's device work is finished.
  virtual void deregisterBuffer(uint64_t id) { (void)id; }
  // In words, the plan run(algorithm, args) would follow on this rank, for comparing calls across
  // ranks (LOOM_CHECK=2): it should differ between ranks whose calls would not meet, such as one
  // whose buffers are registered and one whose buffers are not.
  virtual std::string describeCall(int algorithm, const CollArgs& args) const {
    (void)args;
    return algorithms().at(algorithm).name;
  }
  // One line for logs and loom-info: how peers reach each other ("p2p windows of 4 MiB").
  virtual std::string describe() const = 0;
  // From now on, time the device work of every call (events around it) and report each span to
  // `timeline`, which outlives this object; null stops. Backends that cannot time their work
  // ignore it. `call` of the next run(): the communicator sets it before each call.
  virtual void setTimeline(DeviceTimeline* timeline) { (void)timeline; }
  virtual void setCallNumber(uint64_t call) { (void)call; }
  // Execution plans run by the backend itself (a GPU kernel that interprets them). Whether it
  // can at all (the same answer on every rank).
  virtual bool runsPlans() const { return false; }
  // Collective in effect (every rank loads the same plan, in the same order): makes `plan` ready
  // to run and returns its index for runPlan, or -1 with `why` where this backend cannot run it
  // (the same answer on every rank: it depends only on the plan and what every rank agreed).
  virtual int loadPlan(const NativePlan& plan, std::string& why) {
    (void)plan;
    why = "this device's native collectives do not run execution plans";
    return -1;
  }
  // Enqueues a call (arguments checked, of the plan's collective and rank count) with the plan
  // loadPlan() returned `plan` for, on args.stream.
  virtual void runPlan(int plan, const CollArgs& args, const NativePlanCall& call) {
    (void)plan, (void)args, (void)call;
    LOOM_THROW(loomInternalError, "this device's native collectives do not run execution plans");
  }
};

}  // namespace loom
