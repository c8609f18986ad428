// The CUDA expert-parallel kernels' interface with their host side (cuda_ep.cpp): each rank's
// region in device memory, mapped into every rank's process (CUDA IPC), in the host paths'
// layout (device/ep_format.hpp: a control page, two normal buffers, two low-latency buffers), and
// the launchers of the kernels (ep_normal.cu, ep_low_latency.cu).
//
// The control page holds, 64 bytes apart: posted[lane][buffer] (the round whose chunk the buffer
// holds, written by the owner), consumed[lane][buffer] (the last round of that buffer the owner
// finished reading from every rank), and the owner's own counters: the low-latency send step
// and the step of each slot's pending receive (in device memory, so that a captured graph
// replays), the "last block" tickets of the kernels, and a flag for bad expert ids.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "device/ep_format.hpp"
#include "loom/loom.h"

namespace loom::cuda::ep {

using loom::ep::CallShape;

constexpr int kMaxRanks = 16;
// The low-latency combine keeps a token's top-k rows and weights in shared memory.
constexpr int kMaxTopk = 64;
constexpr size_t kControlBytes = 4096;
constexpr int kThreads = 512;
// Low-latency kernels use at most this many blocks (of an H100's or H200's 132 SMs), whatever the
// sizes: they leave the rest of the GPU to the computation they overlap.
constexpr int kLowLatencyBlocks = 64;

enum EpError : int {
  kEpOk = 0,
  kEpBadArgument = 1,  // a rank's verdict on its arguments (peer: that rank)
  kEpShapesDiffer = 2,
  kEpCallsDiffer = 3,
  kEpBadExpert = 4,  // an expert id outside [0, E) and not -1 (peer: the rank that has it)
  kEpTimeout = 5,
  kEpOverflow = 6,  // more tokens received than the receive arrays hold
};

// Host-mapped pinned memory, written by the kernels: the first error and the rank it concerns,
// and the results of the counting kernel the host reads after its stream.
struct EpStatus {
  int error;
  int peer;
  int numRecv;
  int pad;
  int perExpert[1];  // [localExperts]
};

// Every kernel's view of the object, passed by value (pointers stay valid: graphs replay).
struct EpRegions {
  int rank, nranks, localExperts, numExperts, maxTokens;
  size_t normalOffset, normalBytes, llOffset, llDispatchBytes, llCombineBytes;
  size_t llInboxOffset;     // within a low-latency dispatch part: the inboxes, one per source
  char* region[kMaxRanks];  // every rank's region as mapped here
  EpStatus* status;         // device address of the host-mapped status
  uint64_t timeoutNs;
};

// A low-latency dispatch's inbox on a receiver, one per source, written by the source over
// NVLink so that the receiver reads them from its own memory: the source's post (its step), the
// first 64 bytes of its header, its token counts for the receiver's local experts, then per local
// expert the source's tokens that pick it, in order (int32).
constexpr size_t kInboxTokensStart = 128;
constexpr size_t inboxCountsBytes(int localExperts) {
  return (sizeof(int32_t) * static_cast<size_t>(localExperts) + 63) & ~size_t{63};
}
constexpr size_t inboxBytes(int localExperts, int maxTokens) {
  return (kInboxTokensStart + inboxCountsBytes(localExperts) +
          sizeof(int32_t) * static_cast<size_t>(localExperts) * maxTokens + 63) &
         ~size_t{63};
}
// The low-latency dispatch receive keeps, per local expert, where each source's rows start and
// where the expert's rows start among all received rows, in shared memory.
constexpr size_t dispatchTableBytes(int nranks, int localExperts) {
  return sizeof(int32_t) * (static_cast<size_t>(localExperts) * (nranks + 1) + localExperts + 1);
}
// The layout kernel's tallies in shared memory: tokens per rank, picks per expert.
constexpr size_t layoutTallyBytes(int nranks, int numExperts) {
  return sizeof(int32_t) * (static_cast<size_t>(nranks) + numExperts);
}
constexpr size_t kMaxSharedTableBytes = 40 * 1024;

// Offsets of the control words.
constexpr size_t postedOffset(int lane, int buffer) { return 64 * (lane * 2 + buffer); }
constexpr size_t consumedOffset(int lane, int buffer) { return 256 + 64 * (lane * 2 + buffer); }
constexpr size_t kSendStepOffset = 512;
constexpr size_t pendingOffset(int slot) { return 576 + 64 * slot; }
constexpr size_t kBadIdsOffset = 704;
constexpr size_t ticketOffset(int kernel) { return 768 + 64 * kernel; }

// A normal dispatch or its counting, with the handle's arrays (device memory).
struct DispatchArgs {
  const char* x;
  size_t rowBytes;
  int numTokens;
  const float* scales;
  int numScales;
  const int64_t* topkIdx;
  const float* weights;
  int topk;
  const int32_t* perExpertIn;
  int alignment;
  const uint8_t* inRank;
  int32_t* rankPrefix;
  int32_t* sendHead;
  int32_t* recvSrcIdx;
  char* recvX;
  float* recvScales;
  int64_t* recvTopk;
  float* recvWeights;
  int capacity;
  int numRecv;
};

struct CombineArgs {
  const char* x;
  loomDataType_t dtype;
  int hidden;
  size_t rowBytes;
  int numTokens, numRecv;
  const float* weights;
  int topk;
  const char* bias0;
  const char* bias1;
  const int32_t* rankPrefix;
  const int32_t* sendHead;
  char* combined;
  float* combinedWeights;
};

void launchLayout(const EpRegions& d, const int64_t* topkIdx, int numTokens, int topk,
                  int32_t* perRank, int32_t* perExpert, uint8_t* inRank, cudaStream_t stream);
void launchCounts(const EpRegions& d, uint64_t step, const CallShape& shape, int status,
                  const DispatchArgs& a, cudaStream_t stream);
void launchDispatch(const EpRegions& d, uint64_t step, const CallShape& shape, int status,
                    const DispatchArgs& a, cudaStream_t stream);
void launchCombine(const EpRegions& d, uint64_t step, const CallShape& shape, int status,
                   const CombineArgs& a, cudaStream_t stream);
void launchLowLatencyDispatch(const EpRegions& d, const CallShape& shape, int status, int slot,
                              bool send, bool receive, const loomEpLowLatencyDispatchArgs_t& a,
                              cudaStream_t stream);
void launchLowLatencyCombine(const EpRegions& d, const CallShape& shape, int status, int slot,
                             bool send, bool receive, const loomEpLowLatencyCombineArgs_t& a,
                             cudaStream_t stream);

}  // namespace loom::cuda::ep
