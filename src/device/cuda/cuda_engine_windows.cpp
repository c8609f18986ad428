// CudaEngine's calls on registered windows: registration, the choice of a zero-copy plan per
// collective, and the copy-engine collectives with their stream-side handshake.
//
// Calls from LOOM_CUDA_WINDOW_MIN_BYTES on (every size by default: on one GPU shared by two
// ranks, a call on windows beat LL at every size; on NVLink not measured yet) run these plans,
// whatever protocol the selector chose. Plans (n ranks, b bytes per rank's block; every buffer
// named "window" must lie in a window at the same offset on every rank, which the kernels check):
//   allgather       recv in a window: push this rank's block into every rank's output.
//   alltoall        recv in a window: push block q of the input into rank q's output.
//   reduce-scatter  send in a window: pull this rank's block of every rank's input and reduce.
//   allreduce       send in a window, up to LOOM_CUDA_ONESHOT_MAX_BYTES and out of place: pull
//                   every rank's input whole and reduce (one-shot); with recv in a window too:
//                   pull and reduce this rank's slice, push it into every rank's output
//                   (two-shot; in place always, as one-shot in place would overwrite an input a
//                   peer still reads).
// Copies whose input overlaps the output anywhere but at this rank's own block, and every other
// collective, run the slot-based kernels.
//
// Copy engines ("ce", allgather and alltoall): per call, each rank's stream writes its arrival
// into every peer's window (cuStreamWriteValue64), waits for every peer's (cuStreamWaitValue64),
// copies with cudaMemcpyAsync straight into the peers' outputs, then departs the same way. No
// kernel runs, so the SMs stay free for compute. The sequence numbers are the host's, so a
// stream being captured into a graph gets the zero-copy kernel instead. A stream wait never
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

}  // namespace

bool CudaEngine::registerWindow(uint64_t id, void* ptr, size_t bytes, std::string& why) {
  device_.makeCurrent();
  if (windows_.viaHost()) {
    // Decided the same way on every rank at init.
    why = "this communicator's GPUs reach each other through host memory";
    return false;
  }
  return userWindows_->add(id, ptr, bytes, why);
}

void CudaEngine::deregisterWindow(uint64_t id) {
  device_.makeCurrent();
  // Kernels and copies in flight may still address the window, here and, through it, at peers.
  LOOM_CUDA_CHECK(cudaDeviceSynchronize());
  userWindows_->remove(id);
}

bool CudaEngine::runOnWindows(Protocol protocol, const CollArgs& call, cudaStream_t stream) {
  const int n = setup_.nranks, me = setup_.rank;
  if (!windowsEnabled_ || userWindows_->empty() || n == 1) return false;
  const size_t b = call.count * dtypeSize(call.dtype);
  if (b == 0 || b < windowMinBytes_) return false;
  const char* send = static_cast<const char*>(call.send);
  char* recv = static_cast<char*>(call.recv);
  cuda::ZeroCopyArgs a{};
  size_t sendOffset = 0, recvOffset = 0;
  bool reduce = false;
  size_t perBlockBytes = b;  // sizes the grid: the same on every rank
  switch (call.func) {
    case loomFuncAllGather:
    case loomFuncAllToAll: {
      const bool gather = call.func == loomFuncAllGather;
      const UserWindow* out = userWindows_->find(recv, b * n, recvOffset);
      if (out == nullptr) return false;
      const size_t inBytes = gather ? b : b * n;
      const bool inPlace = gather && send == recv + me * b;
      if (!inPlace && overlaps(send, inBytes, recv, b * n)) return false;
      for (int q = 0; q < n; ++q) {
        if (q == me && inPlace) continue;
        a.src[a.pieces] = gather ? send : send + q * b;
        a.dst[a.pieces] = out->part[q] + recvOffset + me * b;
        a.bytes[a.pieces] = b;
        a.pieces += 1;
      }
      break;
    }
    case loomFuncReduceScatter: {
      const UserWindow* in = userWindows_->find(send, b * n, sendOffset);
      if (in == nullptr) return false;
      if (recv != send + me * b && overlaps(send, b * n, recv, b)) return false;
      for (int q = 0; q < n; ++q) a.inputs[q] = in->part[q] + sendOffset + me * b;
      a.outputs[0] = recv;
      a.outputCount = 1;
      a.reduceBytes = b;
      a.divisor = averageDivisor(call.op, n);
      reduce = true;
      break;
    }
    case loomFuncAllReduce: {
      const UserWindow* in = userWindows_->find(send, b, sendOffset);
      if (in == nullptr) return false;
      const UserWindow* out = userWindows_->find(recv, b, recvOffset);
      const bool inPlace = send == recv;
      if (!inPlace && overlaps(send, b, recv, b)) return false;
      const bool oneShot = !inPlace && (out == nullptr || b <= oneShotMaxBytes_);
      if (oneShot) {
        for (int q = 0; q < n; ++q) a.inputs[q] = in->part[q] + sendOffset;
        a.outputs[0] = recv;
        a.outputCount = 1;
        a.reduceBytes = b;
        recvOffset = SIZE_MAX;  // one-shot and two-shot calls must not pair up
      } else {
        size_t begin = 0, end = 0;
        splitOf(b, me, n, begin, end);
        for (int q = 0; q < n; ++q) {
          a.inputs[q] = in->part[q] + sendOffset + begin;
          a.outputs[q] = out->part[q] + recvOffset + begin;
        }
        a.outputCount = n;
        a.reduceBytes = end - begin;
        perBlockBytes = b / n;
      }
      a.divisor = averageDivisor(call.op, n);
      reduce = true;
      break;
    }
    default:
      return false;
  }
  a.tag = callTag(call.func, sendOffset, recvOffset, b);
  a.blocks = blocksFor(perBlockBytes, Protocol::kSimple);
  if (reduce) {
    cuda::ReduceKey key{call.dtype, kernelOp(call.op), resolveGpuAccum(call.dtype, call.accum)};
    cuda::launchZeroCopyReduce(dev_, a, key, stream);
    return true;
  }
  if (protocol == Protocol::kCopyEngine && ceUsable_) {
    cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
    LOOM_CUDA_CHECK(cudaStreamIsCapturing(stream, &capture));
    if (capture == cudaStreamCaptureStatusNone) {
      runCopyEngine(a, stream);
      return true;
    }
  }
  cuda::launchZeroCopyCopy(dev_, a, stream);
  return true;
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
  if (cudaEventQuery(ceDone_) != cudaErrorNotReady) {
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
  if (!ceUsable_ || ceReleased_.exchange(true)) return;
  // Every word this rank's stream may wait on, set beyond any sequence number: the waits end
  // and the stream drains (what the copies then leave in the outputs is not a result; the
  // communicator has failed).
  const uint64_t beyond = uint64_t{1} << 62;
  try {
    device_.makeCurrent();
    for (int phase = 0; phase < 2; ++phase)
      for (int q = 0; q < setup_.nranks; ++q)
        driver_.writeValue(rescueStream_, ceFlag(setup_.rank, phase, q), beyond);
  } catch (const Error& e) {
    // Called from the watchdog and from abort: nothing to throw to.
    LOOM_WARN(kSubsysInit, setup_.rank, "could not release the copy engines' waits: ", e.what());
  }
}

}  // namespace loom
