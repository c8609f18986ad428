#include "device/cuda/ep/cuda_ep.hpp"

#include <algorithm>
#include <sstream>

#include "base/error.hpp"
#include "device/cuda/cuda_check.hpp"

namespace loom {

namespace {

using cuda::ep::EpRegions;
using cuda::ep::EpStatus;
using loom::ep::CallKind;
using loom::ep::CallShape;

size_t pageRound(size_t bytes) { return (bytes + 4095) & ~size_t{4095}; }

cudaStream_t streamOf(loomStream_t s) { return static_cast<cudaStream_t>(s); }

CallShape shapeOf(CallKind kind, int hidden, int dtype, int topk, int numScales, uint32_t flags) {
  CallShape s;
  s.kind = kind;
  s.hidden = hidden;
  s.dtype = dtype;
  s.topk = topk;
  s.numScales = numScales;
  s.flags = flags;
  return s;
}

// The shapes every rank's kernels compare: the host paths' (ep/ep_tokens.cpp, ep/ep_calls.cpp).
CallShape dispatchShape(CallKind kind, const loomEpDispatchArgs_t& a) {
  return shapeOf(kind, a.hidden, a.dtype, a.topkIdx != nullptr ? a.topk : 0, a.numScales,
                 (a.topkWeights != nullptr ? loom::ep::kHasWeights : 0) |
                     (a.topkIdx == nullptr ? loom::ep::kCached : 0));
}

const char* errorText(int error) {
  switch (error) {
    case cuda::ep::kEpBadArgument:
      return "the arguments of that rank's call were bad (its call returned the reason)";
    case cuda::ep::kEpShapesDiffer:
      return "its call's hidden size, data type, topk, scales or flags differ from this rank's";
    case cuda::ep::kEpCallsDiffer:
      return "it ran another expert-parallel call (dispatch against combine)";
    case cuda::ep::kEpBadExpert:
      return "an expert id outside [0, numExperts) and not -1";
    case cuda::ep::kEpTimeout:
      return "a wait for it passed the communicator's timeout";
    case cuda::ep::kEpOverflow:
      return "more tokens arrived than the receive arrays hold";
  }
  return "unknown error";
}

}  // namespace

CudaEp::CudaEp(CudaDevice& device, const NativeEpSetup& setup) : device_(device), setup_(setup) {
  // Beyond the kernels' limits every rank (the sizes are the same on all) uses the host paths.
  const size_t tables = std::max(cuda::ep::dispatchTableBytes(setup.nranks, setup.localExperts),
                                 cuda::ep::layoutTallyBytes(setup.nranks, setup.numExperts));
  if (setup.nranks > cuda::ep::kMaxRanks || setup.maxTopk > cuda::ep::kMaxTopk ||
      tables > cuda::ep::kMaxSharedTableBytes)
    LOOM_THROW(loomUnhandledCudaError, "the CUDA kernels serve at most ", cuda::ep::kMaxRanks,
               " GPUs, topk ", cuda::ep::kMaxTopk, " and experts whose tables fit ",
               cuda::ep::kMaxSharedTableBytes, " bytes of shared memory (here ", setup.nranks,
               " GPUs, topk ", setup.maxTopk, ", ", setup.numExperts, " experts: ", tables,
               " bytes)");
  DeviceScope scope(device.ordinal());
  EpRegions& d = regions_;
  d.rank = setup.rank;
  d.nranks = setup.nranks;
  d.localExperts = setup.localExperts;
  d.numExperts = setup.numExperts;
  d.maxTokens = setup.maxTokens;
  d.timeoutNs = static_cast<uint64_t>(setup.timeoutMs) * 1000000;
  if (setup.modes & LOOM_EP_NORMAL) d.normalBytes = pageRound(setup.bufferBytes);
  if (setup.modes & LOOM_EP_LOW_LATENCY) {
    size_t dispatch = 0;
    for (bool fp8 : {false, true}) {
      loom::ep::LowLatencyDispatchFormat f{setup.maxTopk, setup.hidden, fp8};
      dispatch = std::max(dispatch, f.chunkBytes(setup.maxTokens));
    }
    d.llInboxOffset = pageRound(dispatch);
    d.llDispatchBytes =
        d.llInboxOffset +
        pageRound(setup.nranks * cuda::ep::inboxBytes(setup.localExperts, setup.maxTokens));
    loom::ep::LowLatencyCombineFormat c{setup.nranks, setup.localExperts, setup.maxTokens,
                                        setup.hidden};
    d.llCombineBytes = pageRound(c.bytes());
  }
  d.normalOffset = cuda::ep::kControlBytes;
  d.llOffset = d.normalOffset + 2 * d.normalBytes;
  const size_t total = d.llOffset + 2 * (d.llDispatchBytes + d.llCombineBytes);
  LOOM_CUDA_CHECK(cudaMalloc(&mine_, total));
  peers_.assign(setup.nranks, nullptr);
  std::string failure;
  try {
    LOOM_CUDA_CHECK(cudaMemset(mine_, 0, cuda::ep::kControlBytes));
    // The inboxes' posts start at step 0 (they live beside the low-latency buffers).
    LOOM_CUDA_CHECK(cudaMemset(mine_ + d.llOffset, 0, total - d.llOffset));
    LOOM_CUDA_CHECK(cudaDeviceSynchronize());
    statusMemory_ = MappedHostMemory(sizeof(EpStatus) + sizeof(int) * setup.localExperts);
    d.status = static_cast<EpStatus*>(statusMemory_.device());
    // Every rank's region mapped here; a failure anywhere is every rank's (all use the host
    // paths then).
    std::vector<std::string> handles = setup.allGather(device.exportMemory(mine_, total));
    for (int r = 0; r < setup.nranks && failure.empty(); ++r) {
      if (r == setup.rank) continue;
      try {
        peers_[r] = static_cast<char*>(device.importMemory(handles[r]));
      } catch (const Error& e) {
        failure = "rank " + std::to_string(setup.rank) + " cannot map rank " + std::to_string(r) +
                  "'s buffers (" + e.what() + ")";
      }
    }
    for (const std::string& theirs : setup.allGather(failure))
      if (!theirs.empty() && failure.empty()) failure = theirs;
  } catch (...) {
    release();
    throw;
  }
  if (!failure.empty()) {
    release();
    LOOM_THROW(loomUnhandledCudaError, "CUDA expert parallelism: ", failure);
  }
  for (int r = 0; r < setup.nranks; ++r) d.region[r] = r == setup.rank ? mine_ : peers_[r];
}

CudaEp::~CudaEp() { release(); }

void CudaEp::release() noexcept {
  if (!device_.contextAlive(false)) return;  // the context went with its memory
  DeviceScope scope(device_.ordinal());
  cudaDeviceSynchronize();  // no kernel of this object reads a region any more
  for (char*& p : peers_) {
    if (p != nullptr) device_.closeImported(p);
    p = nullptr;
  }
  if (mine_ != nullptr) cudaFree(mine_);
  mine_ = nullptr;
}

std::unique_ptr<NativeEp> makeCudaEp(CudaDevice& device, const NativeEpSetup& setup) {
  return std::make_unique<CudaEp>(device, setup);
}

std::string CudaEp::describe() const {
  std::ostringstream out;
  out << "CUDA kernels over " << setup_.nranks << " GPUs' regions (CUDA IPC), normal buffers 2 x "
      << regions_.normalBytes << " B, low latency 2 x "
      << regions_.llDispatchBytes + regions_.llCombineBytes << " B";
  return out.str();
}

std::pair<loomResult_t, std::string> CudaEp::errors() {
  volatile EpStatus* s = status();
  const int error = s->error;
  if (error == cuda::ep::kEpOk) return {loomSuccess, {}};
  const int peer = s->peer;
  s->error = cuda::ep::kEpOk;
  const loomResult_t code = error == cuda::ep::kEpTimeout       ? loomTimeout
                            : error == cuda::ep::kEpCallsDiffer ? loomInvalidUsage
                                                                : loomInvalidArgument;
  return {code, "a kernel of this expert-parallel object found, about rank " +
                    std::to_string(peer) + ": " + errorText(error)};
}

cuda::ep::DispatchArgs CudaEp::dispatchArgs(const loomEpDispatchArgs_t& a) const {
  cuda::ep::DispatchArgs k{};
  k.x = static_cast<const char*>(a.x);
  k.rowBytes = static_cast<size_t>(a.hidden) * dtypeSize(a.dtype);
  k.numTokens = a.numTokens;
  k.scales = a.xScales;
  k.numScales = a.numScales;
  k.topkIdx = a.topkIdx;
  k.weights = a.topkWeights;
  k.topk = a.topk;
  k.perExpertIn = a.numTokensPerExpert;
  k.alignment = a.expertAlignment;
  k.inRank = a.handle->isTokenInRank;
  k.rankPrefix = a.handle->rankPrefixMatrix;
  k.sendHead = a.handle->sendHead;
  k.recvSrcIdx = a.handle->recvSrcIdx;
  k.recvX = static_cast<char*>(a.recvX);
  k.recvScales = a.recvXScales;
  k.recvTopk = a.recvTopkIdx;
  k.recvWeights = a.recvTopkWeights;
  k.capacity = a.recvCapacity;
  k.numRecv = a.handle->numRecvTokens;
  return k;
}

void CudaEp::layout(const int64_t* topkIdx, int numTokens, int topk, int32_t* perRank,
                    int32_t* perExpert, uint8_t* inRank, loomStream_t stream) {
  DeviceScope scope(device_.ordinal());
  cuda::ep::launchLayout(regions_, topkIdx, numTokens, topk, perRank, perExpert, inRank,
                         streamOf(stream));
}

void CudaEp::dispatchCounts(const loomEpDispatchArgs_t& a, int status, loomStream_t stream) {
  DeviceScope scope(device_.ordinal());
  const uint64_t step = ++normalStep_;
  cuda::ep::launchCounts(regions_, step, dispatchShape(CallKind::kDispatchCounts, a), status,
                         dispatchArgs(a), streamOf(stream));
  LOOM_CUDA_CHECK(cudaStreamSynchronize(streamOf(stream)));
  const auto [code, message] = errors();
  if (code != loomSuccess) LOOM_THROW(code, "dispatch counts: ", message);
  if (status != loomSuccess) return;  // the caller reports its own reason
  a.handle->numTokens = a.numTokens;
  a.handle->numRecvTokens = static_cast<volatile EpStatus*>(this->status())->numRecv;
  if (a.recvTokensPerExpert != nullptr)
    for (int l = 0; l < setup_.localExperts; ++l)
      a.recvTokensPerExpert[l] = static_cast<volatile EpStatus*>(this->status())->perExpert[l];
}

void CudaEp::dispatch(const loomEpDispatchArgs_t& a, int status, loomStream_t stream) {
  if (a.handle->numRecvTokens < 0) {  // counts first (the host learns the size it receives)
    loomEpDispatchArgs_t counting = a;
    counting.recvTokensPerExpert = nullptr;
    dispatchCounts(counting, status, stream);
  }
  DeviceScope scope(device_.ordinal());
  const CallShape shape = dispatchShape(CallKind::kDispatch, a);
  loom::ep::DispatchFormat f{setup_.nranks,
                             setup_.numExperts,
                             shape.topk,
                             shape.numScales,
                             (shape.flags & loom::ep::kHasWeights) != 0,
                             static_cast<size_t>(a.hidden) * dtypeSize(a.dtype)};
  // One round per call on the GPU: a call whose tokens do not fit a buffer fails (every rank:
  // its verdict travels in the header as any other).
  const bool fits = f.chunkBytes(a.numTokens) <= regions_.normalBytes;
  const uint64_t step = ++normalStep_;
  cuda::ep::launchDispatch(regions_, step, shape, fits ? status : loomInvalidArgument,
                           dispatchArgs(a), streamOf(stream));
  LOOM_CHECK_ARG(fits, "dispatch: ", a.numTokens, " tokens (", f.chunkBytes(a.numTokens),
                 " bytes with their metadata) do not fit a ", regions_.normalBytes,
                 "-byte buffer (bufferBytes at creation); the GPU path runs one round per call");
}

void CudaEp::combine(const loomEpCombineArgs_t& a, int status, loomStream_t stream) {
  DeviceScope scope(device_.ordinal());
  const CallShape shape =
      shapeOf(CallKind::kCombine, a.hidden, a.dtype, a.topkWeights != nullptr ? a.topk : 0, 0,
              a.topkWeights != nullptr ? loom::ep::kHasWeights : 0);
  cuda::ep::CombineArgs k{};
  k.x = static_cast<const char*>(a.x);
  k.dtype = a.dtype;
  k.hidden = a.hidden;
  k.rowBytes = static_cast<size_t>(a.hidden) * dtypeSize(a.dtype);
  k.numTokens = a.handle->numTokens;
  k.numRecv = a.handle->numRecvTokens;
  k.weights = a.topkWeights;
  k.topk = a.topk;
  k.bias0 = static_cast<const char*>(a.bias0);
  k.bias1 = static_cast<const char*>(a.bias1);
  k.rankPrefix = a.handle->rankPrefixMatrix;
  k.sendHead = a.handle->sendHead;
  k.combined = static_cast<char*>(a.combinedX);
  k.combinedWeights = a.combinedTopkWeights;
  loom::ep::CombineFormat f{setup_.nranks, shape.topk, a.topkWeights != nullptr, k.rowBytes};
  const bool fits = f.chunkBytes(k.numRecv) <= regions_.normalBytes;
  const uint64_t step = ++normalStep_;
  cuda::ep::launchCombine(regions_, step, shape, fits ? status : loomInvalidArgument, k,
                          streamOf(stream));
  LOOM_CHECK_ARG(fits, "combine: ", k.numRecv, " rows (", f.chunkBytes(k.numRecv),
                 " bytes) do not fit a ", regions_.normalBytes,
                 "-byte buffer (bufferBytes at creation); the GPU path runs one round per call");
}

void CudaEp::lowLatencyDispatch(const loomEpLowLatencyDispatchArgs_t& a, int status, int slot,
                                bool send, bool receive, loomStream_t stream) {
  DeviceScope scope(device_.ordinal());
  const CallShape shape =
      shapeOf(CallKind::kLowLatencyDispatch, a.hidden, loomBfloat16, a.topk, 0,
              (a.useFp8 ? loom::ep::kFp8 : 0) | (a.roundScale ? loom::ep::kRoundScale : 0) |
                  (a.useUe8m0 ? loom::ep::kUe8m0 : 0));
  cuda::ep::launchLowLatencyDispatch(regions_, shape, status, slot, send, receive, a,
                                     streamOf(stream));
}

void CudaEp::lowLatencyCombine(const loomEpLowLatencyCombineArgs_t& a, int status, int slot,
                               bool send, bool receive, loomStream_t stream) {
  DeviceScope scope(device_.ordinal());
  const CallShape shape =
      shapeOf(CallKind::kLowLatencyCombine, a.hidden, loomBfloat16, a.topk, 0, 0);
  cuda::ep::launchLowLatencyCombine(regions_, shape, status, slot, send, receive, a,
                                    streamOf(stream));
}

void* CudaEp::lowLatencyCombineBuffer(int slot, int hidden) {
  loom::ep::LowLatencyCombineFormat f{setup_.nranks, setup_.localExperts, setup_.maxTokens, hidden};
  return mine_ + regions_.llOffset +
         static_cast<size_t>(slot) * (regions_.llDispatchBytes + regions_.llCombineBytes) +
         regions_.llDispatchBytes + f.rowsOffset();
}

}  // namespace loom
