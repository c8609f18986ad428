// CudaEngine's calls on registered windows and buffers: registration, the choice of a
// zero-copy plan per collective, and the copy-engine collectives with their stream-side
// handshake.
//
// Calls from LOOM_CUDA_WINDOW_MIN_BYTES on (every size by default: on one GPU shared by two
// ranks, a call on windows beat LL at every size; on NVLink not measured yet) run these plans,
// whatever protocol the selector chose. Plans (n ranks, b bytes per rank's block; every buffer
// named "window" must lie in a window at the same offset on every rank, or in a buffer every
// rank registered alone (loomCommRegister) at any offset; the kernels check that the ranks
// agree):
//   allgather       recv in a window: push this rank's block into every rank's output.
//   alltoall        recv in a window: push block q of the input into rank q's output.
//   reduce-scatter  send in a window: pull this rank's block of every rank's input and reduce.
//   allreduce       send in a window, up to LOOM_CUDA_ONESHOT_MAX_BYTES and out of place: pull
//                   every rank's input whole and reduce (one-shot); with recv in a window too:
//                   pull and reduce this rank's slice, push it into every rank's output
//                   (two-shot; in place always, as one-shot in place would overwrite an input a
//                   peer still reads).
// Copies whose input overlaps the output anywhere but at this rank's own block, and every other
// collective, run the slot-based kernels. A peer's window part is known here since registration;
// a peer's registered buffer only from its arrival in the kernel (zero_copy.hpp), so the
// arguments name it by rank and offset.
//
// Copy engines ("ce", allgather and alltoall): per call, each rank's stream writes its arrival
// into every peer's window (cuStreamWriteValue64), waits for every peer's (cuStreamWaitValue64),
// copies with cudaMemcpyAsync straight into the peers' outputs, then departs the same way. No
// kernel runs, so the SMs stay free for compute. The sequence numbers are the host's, so a
// stream being captured into a graph gets the zero-copy kernel instead; so does a call on
// buffers registered alone, whose peer addresses the host does not know. A stream wait never
// gives up by itself: the watchdog releases it when a peer died, the call outlived the timeout
// or the communicator aborted, so that the stream drains and the error reaches the caller.
#include <algorithm>

#include "base/dtype.hpp"
#include "base/log.hpp"
#include "base/wait.hpp"
#include "device/cuda/cuda_check.hpp"
#include "device/cuda/cuda_engine.hpp"
#include "device/cuda/cuda_env.hpp"

namespace loom {

namespace {

// What every rank's call must agree on, folded into the tag the kernels compare.
uint64_t callTag(loomFunc_t func, size_t sendOffset, size_t recvOffset, size_t bytes) {
  uint64_t h = 0x9e3779b97f4a7c15ull;
  for (uint64_t v :
       {static_cast<uint64_t>(func), uint64_t{sendOffset}, uint64_t{recvOffset}, uint64_t{bytes}}) {
    h ^= v + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2);
    h *= 0xbf58476d1ce4e5b9ull;
  }
  return h;
}

// The 16-byte-unit split the kernels use (primitives.cuh splitRange), on the host.
void splitOf(size_t bytes, int part, int parts, size_t& begin, size_t& end) {
  const size_t units = (bytes + 15) / 16;
  begin = std::min(units * part / parts * 16, bytes);
  end = std::min(units * (part + 1) / parts * 16, bytes);
}

bool overlaps(const char* a, size_t aBytes, const char* b, size_t bBytes) {
  return a < b + bBytes && b < a + aBytes;
}

// In a call's tag for a buffer registered alone: its offsets differ between ranks, but a peer
// whose buffer is in a window (or in neither) must not pair up with it.
constexpr size_t kRegisteredMark = SIZE_MAX - 1;

}  // namespace

// Where one of a call's buffers lies: in a window (every rank's part known here), in a buffer
// registered alone (peers' addresses come with their arrival), or in neither.
struct CudaEngine::Placement {
  const UserWindow* window = nullptr;
  size_t windowOffset = 0;
  cuda::BufferRef ref{cuda::kNoSlot, 0, 0};
  bool found() const { return window != nullptr || ref.slot != cuda::kNoSlot; }
  size_t tagOffset() const { return window != nullptr ? windowOffset : kRegisteredMark; }
};

CudaEngine::Placement CudaEngine::place(const void* ptr, size_t bytes) const {
  Placement p;
  p.window = userWindows_->find(ptr, bytes, p.windowOffset);
  if (p.window == nullptr) registrations_->find(ptr, bytes, p.ref);
  return p;
}

bool CudaEngine::registerBuffer(uint64_t id, void* ptr, size_t bytes, std::string& why) {
  // Each reason is the same on every rank (decided at init, or the environment's).
  if (windows_.viaHost()) {
    why = "this communicator's GPUs reach each other through host memory";
    return false;
  }
  if (!windowsEnabled_) {
    why = "LOOM_CUDA_WINDOWS=0";
    return false;
  }
  if (!registrations_->usable()) {
    why = registrations_->why();
    return false;
  }
  checkContext();
  DeviceScope scope(device_.ordinal());
  registrations_->add(id, ptr, bytes);
  return true;
}

void CudaEngine::deregisterBuffer(uint64_t id) {
  checkContext();
  DeviceScope scope(device_.ordinal());
  // This rank's kernels in flight may still publish the registration to peers, whose kernels
  // then read it; once they are done, every peer's kernel of those calls is done with it too.
  LOOM_CUDA_CHECK(cudaDeviceSynchronize());
  registrations_->remove(id);
  // No kernel of this rank runs now: closing the peers' withdrawn registrations cannot stall.
  registrations_->unmapWithdrawn();
}

void CudaEngine::watchRegistrations() {
  try {
    registrations_->refresh();
  } catch (const Error& e) {
    LOOM_WARN(kSubsysColl, setup_.rank, "could not map a peer's registered buffer: ", e.what());
  }
}

bool CudaEngine::registerWindow(uint64_t id, void* ptr, size_t bytes, std::string& why) {
  checkContext();
  DeviceScope scope(device_.ordinal());
  if (windows_.viaHost()) {
    // Decided the same way on every rank at init.
    why = "this communicator's GPUs reach each other through host memory";
    return false;
  }
  return userWindows_->add(id, ptr, bytes, why);
}

void CudaEngine::deregisterWindow(uint64_t id) {
  checkContext();
  DeviceScope scope(device_.ordinal());
  // Kernels and copies in flight may still address the window, here and, through it, at peers.
  LOOM_CUDA_CHECK(cudaDeviceSynchronize());
  userWindows_->remove(id);
  registrations_->unmapWithdrawn();
}

// planOnWindows' plan in the making: the call, its shape, and what the planner of its
// collective (planCopyOnWindows, planReduceScatterOnWindows, planAllReduceOnWindows) fills in.
struct CudaEngine::WindowDraft {
  WindowDraft(const CollArgs& c, int nranks, int rank, size_t bytes, std::string* w)
      : call(c),
        n(nranks),
        me(rank),
        b(bytes),
        send(static_cast<const char*>(c.send)),
        recv(static_cast<char*>(c.recv)),
        what(w),
        perBlockBytes(bytes) {}

  const CollArgs& call;
  const int n, me;
  const size_t b;  // bytes per rank's block
  const char* const send;
  char* const recv;
  std::string* const what;
  WindowPlan plan;
  size_t sendTag = 0, recvTag = 0;
  size_t perBlockBytes;  // sizes the grid: the same on every rank

  // Rank q's buffer at `p` plus `delta` as an argument: an address here, or (a peer's buffer
  // registered alone) the offset from that buffer, which `from` then names. `own`: this rank's.
  char* at(const Placement& p, int q, int output, const char* own, size_t delta, uint8_t& from) {
    from = 0;
    if (q == me) return const_cast<char*>(own) + delta;
    if (p.window != nullptr) return p.window->part[q] + p.windowOffset + delta;
    from = cuda::peerCode(q, output);
    plan.args.resolve = 1;
    return reinterpret_cast<char*>(delta);
  }
  // In words, for comparing calls across ranks: where a buffer lies decides what runs.
  void say(const char* shape, const char* name, const Placement& p, const char* more = "") {
    if (what == nullptr) return;
    *what = std::string("zero-copy") + shape + ", " + name +
            (p.window != nullptr ? " in a window at offset " + std::to_string(p.windowOffset)
                                 : std::string(" registered alone")) +
            more;
  }
};

std::optional<CudaEngine::WindowPlan> CudaEngine::planOnWindows(const CollArgs& call,
                                                                std::string* what) const {
  const int n = setup_.nranks, me = setup_.rank;
  if (!windowsEnabled_ || n == 1 || (userWindows_->empty() && registrations_->empty()))
    return std::nullopt;
  const size_t b = call.count * dtypeSize(call.dtype);
  if (b == 0 || b < windowMinBytes_) return std::nullopt;
  WindowDraft d(call, n, me, b, what);
  cuda::ZeroCopyArgs& a = d.plan.args;
  a.sendRef.slot = a.recvRef.slot = cuda::kNoSlot;
  bool planned = false;
  switch (call.func) {
    case loomFuncAllGather:
    case loomFuncAllToAll:
      planned = planCopyOnWindows(d);
      break;
    case loomFuncReduceScatter:
      planned = planReduceScatterOnWindows(d);
      break;
    case loomFuncAllReduce:
      planned = planAllReduceOnWindows(d);
      break;
    default:
      break;
  }
  if (!planned) return std::nullopt;
  a.tag = callTag(call.func, d.sendTag, d.recvTag, b);
  a.blocks = blocksFor(d.perBlockBytes, Protocol::kSimple);
  // One thread per 16 bytes of a block's part, in whole warps: a small call's block has two
  // warps, not 16, as LL's (llThreads); 0.1-0.45 µs less per call up to 4 KiB on 2 ranks sharing
  // an H100 (docs/benchmarks.md).
  const size_t units = ((d.perBlockBytes + 15) / 16 + a.blocks - 1) / a.blocks;
  a.threads = static_cast<int>(
      std::clamp<size_t>((units + 31) / 32 * 32, cuda::kMinZeroCopyThreads, cuda::kThreads));
  return d.plan;
}

bool CudaEngine::planCopyOnWindows(WindowDraft& d) const {
  const int n = d.n, me = d.me;
  const size_t b = d.b;
  const char* send = d.send;
  char* recv = d.recv;
  cuda::ZeroCopyArgs& a = d.plan.args;
  const bool gather = d.call.func == loomFuncAllGather;
  const Placement out = place(recv, b * n);
  if (!out.found()) return false;
  const size_t inBytes = gather ? b : b * n;
  const bool inPlace = gather && send == recv + me * b;
  if (!inPlace && overlaps(send, inBytes, recv, b * n)) return false;
  for (int q = 0; q < n; ++q) {
    if (q == me && inPlace) continue;
    a.src[a.pieces] = gather ? send : send + q * b;
    a.dst[a.pieces] = d.at(out, q, 1, recv, me * b, a.dstFrom[a.pieces]);
    a.bytes[a.pieces] = b;
    a.pieces += 1;
  }
  d.recvTag = out.tagOffset();
  a.recvRef = out.ref;
  d.say("", "output", out);
  return true;
}

bool CudaEngine::planReduceScatterOnWindows(WindowDraft& d) const {
  const int n = d.n, me = d.me;
  const size_t b = d.b;
  const char* send = d.send;
  char* recv = d.recv;
  cuda::ZeroCopyArgs& a = d.plan.args;
  LOOM_CHECK_INTERNAL(n <= cuda::kMaxRanks, n, " ranks in a window plan");  // its arrays' size
  const Placement in = place(send, b * n);
  if (!in.found()) return false;
  if (recv != send + me * b && overlaps(send, b * n, recv, b)) return false;
  for (int q = 0; q < n; ++q) a.inputs[q] = d.at(in, q, 0, send, me * b, a.inputsFrom[q]);
  a.outputs[0] = recv;
  a.outputCount = 1;
  a.reduceBytes = b;
  a.divisor = averageDivisor(d.call.op, n);
  d.sendTag = in.tagOffset();
  a.sendRef = in.ref;
  d.plan.reduce = true;
  d.say("", "input", in);
  return true;
}

bool CudaEngine::planAllReduceOnWindows(WindowDraft& d) const {
  const int n = d.n, me = d.me;
  const size_t b = d.b;
  const char* send = d.send;
  char* recv = d.recv;
  cuda::ZeroCopyArgs& a = d.plan.args;
  LOOM_CHECK_INTERNAL(n <= cuda::kMaxRanks, n, " ranks in a window plan");  // its arrays' size
  const Placement in = place(send, b);
  if (!in.found()) return false;
  const Placement out = place(recv, b);
  const bool inPlace = send == recv;
  if (!inPlace && overlaps(send, b, recv, b)) return false;
  const bool oneShot = !inPlace && (!out.found() || b <= oneShotMaxBytes_);
  d.sendTag = in.tagOffset();
  a.sendRef = in.ref;
  if (oneShot) {
    for (int q = 0; q < n; ++q) a.inputs[q] = d.at(in, q, 0, send, 0, a.inputsFrom[q]);
    a.outputs[0] = recv;
    a.outputCount = 1;
    a.reduceBytes = b;
    d.recvTag = SIZE_MAX;  // one-shot and two-shot calls must not pair up
    d.say(" one-shot", "input", in);
  } else {
    size_t begin = 0, end = 0;
    splitOf(b, me, n, begin, end);
    for (int q = 0; q < n; ++q) {
      a.inputs[q] = d.at(in, q, 0, send, begin, a.inputsFrom[q]);
      a.outputs[q] = d.at(out, q, 1, recv, begin, a.outputsFrom[q]);
    }
    a.outputCount = n;
    a.reduceBytes = end - begin;
    d.perBlockBytes = b / n;
    d.recvTag = out.tagOffset();
    a.recvRef = out.ref;
    std::string output;
    if (d.what != nullptr)
      output = out.window != nullptr
                   ? ", output in a window at offset " + std::to_string(out.windowOffset)
                   : ", output registered alone";
    d.say(" two-shot", "input", in, output.c_str());
  }
  a.divisor = averageDivisor(d.call.op, n);
  d.plan.reduce = true;
  return true;
}

std::string CudaEngine::describeCall(int algorithm, const CollArgs& call) const {
  const std::string& name = algorithms_.at(algorithm).name;
  std::string what;
  if (call.func != loomFuncBarrier) {
    if (std::optional<WindowPlan> plan = planOnWindows(call, &what)) {
      const bool ce =
          onCopyEngines(protocols_.at(algorithm), *plan, static_cast<cudaStream_t>(call.stream));
      return name + ": " + what + (ce ? ", on the copy engines" : "");
    }
  }
  // The copy engines need windows: other buffers run the simple protocol (run()).
  if (protocols_.at(algorithm) == Protocol::kCopyEngine) return name + ": simple";
  return name;
}

bool CudaEngine::runOnWindows(Protocol protocol, const CollArgs& call, cudaStream_t stream) {
  std::optional<WindowPlan> plan = planOnWindows(call, nullptr);
  if (!plan) return false;
  const cuda::ZeroCopyArgs& a = plan->args;
  // Peers' registrations published by now are mapped before the kernel looks for them; a later
  // one the watchdog maps while the kernel waits.
  if (a.resolve) {
    registrations_->refresh();
    LOOM_INFO(kSubsysColl, setup_.rank, "zero-copy on registered buffers: input slot ",
              a.sendRef.slot, " generation ", a.sendRef.gen, ", output slot ", a.recvRef.slot,
              " generation ", a.recvRef.gen);
  }
  if (plan->reduce) {
    cuda::ReduceKey key{call.dtype, kernelOp(call.op), resolveGpuAccum(call.dtype, call.accum)};
    cuda::launchZeroCopyReduce(dev_, a, key, stream);
    return true;
  }
  if (onCopyEngines(protocol, *plan, stream)) {
    runCopyEngine(a, stream);
    return true;
  }
  cuda::launchZeroCopyCopy(dev_, a, stream);
  return true;
}

bool CudaEngine::onCopyEngines(Protocol protocol, const WindowPlan& plan,
                               cudaStream_t stream) const {
  if (protocol != Protocol::kCopyEngine || !ceUsable_ || plan.reduce || plan.args.resolve)
    return false;
  cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
  LOOM_CUDA_CHECK(cudaStreamIsCapturing(stream, &capture));
  return capture == cudaStreamCaptureStatusNone;
}

uint64_t* CudaEngine::ceFlag(int owner, int phase, int source) const {
  char* base = windows_.window(owner) + layout_.ceSyncOffset();
  return reinterpret_cast<uint64_t*>(base) + phase * setup_.nranks + source;
}

void CudaEngine::runCopyEngine(const cuda::ZeroCopyArgs& a, cudaStream_t stream) {
  const int n = setup_.nranks, me = setup_.rank;
  const uint64_t seq = ++ceSeq_;
  auto handshake = [&](int phase) {
    for (int i = 1; i < n; ++i) driver_.writeValue(stream, ceFlag((me + i) % n, phase, me), seq);
    for (int i = 1; i < n; ++i) driver_.waitAtLeast(stream, ceFlag(me, phase, (me + i) % n), seq);
  };
  handshake(0);
  for (int i = 0; i < a.pieces; ++i) {
    const int k = (i + me) % a.pieces;
    LOOM_CUDA_CHECK(
        cudaMemcpyAsync(a.dst[k], a.src[k], a.bytes[k], cudaMemcpyDeviceToDevice, stream));
  }
  handshake(1);
  LOOM_CUDA_CHECK(cudaEventRecord(ceDone_, stream));
  ceIssuedNs_.store(steadyNowNs());
}

void CudaEngine::watchCopyEngine() {
  const uint64_t issued = ceIssuedNs_.load();
  if (issued == 0 || ceReleased_.load()) return;
  const cudaError_t done = cudaEventQuery(ceDone_);
  if (contextGone(done)) {  // cudaDeviceReset, or the runtime unloading: nothing to watch now
    cudaGetLastError();
    contextLost_.store(true);
    return;
  }
  if (done != cudaErrorNotReady) {
    cudaGetLastError();
    uint64_t expected = issued;  // unless a newer call was enqueued meanwhile
    ceIssuedNs_.compare_exchange_strong(expected, 0);
    return;
  }
  volatile cuda::DevStatus* status = status_;
  if (status->abort != 0) return releaseCopyEngineWaits();
  const uint64_t waited = steadyNowNs() - issued;
  if (waited < 1'000'000) return;
  std::optional<Error> failure = setup_.peerFailure();
  if (!failure &&
      waited > static_cast<uint64_t>(std::max<int64_t>(setup_.timeoutMs, 1)) * 1'000'000)
    failure = Error(loomTimeout, "a copy-engine collective did not finish within " +
                                     std::to_string(setup_.timeoutMs / 1000.0) +
                                     " s (LOOM_TIMEOUT / config timeoutMs)");
  if (!failure) return;
  status->abort = 1;
  setup_.fail(*failure);
  releaseCopyEngineWaits();
}

void CudaEngine::releaseCopyEngineWaits() {
  if (!ceUsable_ || contextLost_.load() || ceReleased_.exchange(true)) return;
  // Every word this rank's stream may wait on, set beyond any sequence number: the waits end
  // and the stream drains (what the copies then leave in the outputs is not a result; the
  // communicator has failed).
  const uint64_t beyond = uint64_t{1} << 62;
  try {
    DeviceScope scope(device_.ordinal());
    for (int phase = 0; phase < 2; ++phase)
      for (int q = 0; q < setup_.nranks; ++q)
        driver_.writeValue(rescueStream_, ceFlag(setup_.rank, phase, q), beyond);
  } catch (const Error& e) {
    // Called from the watchdog and from abort: nothing to throw to.
    LOOM_WARN(kSubsysInit, setup_.rank, "could not release the copy engines' waits: ", e.what());
  }
}

}  // namespace loom
