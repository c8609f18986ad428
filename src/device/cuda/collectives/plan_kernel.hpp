// The kernel that runs execution plans (docs/plans.md) on a CUDA communicator: a rank's program
// (device/native_plan.hpp) in device memory, one thread block per lane and slice.
//
// Lanes: one sends to a peer, one receives from a peer (its operations in program order, which is
// the order both ends of a pair agree on), one per local lane of copies and reductions. Every
// operation's bytes are cut into `slices` near-equal slices (16-byte units, the same on every
// rank), slice s of every lane run by its own block over channel s: a pair's sender and receiver
// cut alike, so slice s of a send meets slice s of the matching receive. Pipeline parts may run
// side by side in part groups, each group on slices and channels of its own. Within a slice an
// operation moves chunks of `payload` bytes through the peers' window slots, as the exchange
// kernels do (simple: bulk chunks and a ready flag; LL: packets that carry their flag).
//
// Dependencies between lanes are progress words in device memory, one per operation and slice:
// (call number << 32) | (part << 20) | chunks done. A lane that waits for a whole operation
// waits until every slice's word says the part is done; one that streams behind it (a send of
// what a receive writes) waits chunk by chunk for its own slice. The call number makes words of
// earlier calls stale without resetting them, so a captured graph replays.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "device/cuda/collectives/dev_comm.hpp"
#include "device/cuda/collectives/exchange.hpp"

namespace loom::cuda {

struct DevChunks {
  uint32_t buffer;  // 0 input, 1 output, 2 scratch
  uint32_t index;
  uint32_t count;
};

enum DevPlanOpKind : uint8_t { kPlanSend, kPlanRecv, kPlanRecvReduce, kPlanCopy, kPlanReduce };

struct DevPlanOp {
  uint8_t kind;           // DevPlanOpKind
  uint8_t final;          // average divides here
  uint8_t streamedAfter;  // a later operation streams behind it: publish every chunk
  uint8_t streamsBehind;  // it streams behind an earlier one: wait chunk by chunk
  int32_t peer;
  DevChunks dst;
  uint32_t srcBegin, srcEnd;
  uint32_t depBegin, depEnd;
};

struct DevPlanDep {
  uint32_t on;
  uint32_t streamed;
};

enum DevLaneKind : uint32_t { kSendLane, kRecvLane, kLocalLane };

struct DevPlanLane {
  uint32_t opBegin, opEnd;  // into laneOps
  int32_t peer;             // sending and receiving lanes
  uint32_t kind;            // DevLaneKind
};

// Pointers into one device allocation (CudaPlan).
struct DevPlanProgram {
  const DevPlanOp* ops;
  const DevChunks* srcs;
  const DevPlanDep* deps;
  const DevPlanLane* lanes;
  const uint32_t* laneOps;
};

// The progress words: [0] calls run, [1] blocks of the current call finished, then one word per
// (operation, slice).
constexpr int kPlanStateHeader = 2;
constexpr uint32_t kPlanChunkBits = 20;  // chunks of one slice of one operation in one part
constexpr uint32_t kPlanMaxParts = (1u << (32 - kPlanChunkBits)) - 1;
constexpr int kPlanMaxReduceSources = 16;  // operands of one reduction the kernel takes
__host__ __device__ constexpr size_t planProgressWord(uint32_t op, int slice) {
  return kPlanStateHeader + static_cast<size_t>(op) * kMaxBlocks + slice;
}

struct PlanKernelArgs {
  DevPlanProgram program;
  const char* input;
  char* output;
  char* scratch;
  uint64_t count;  // elements of a block
  uint32_t elementSize;
  uint32_t chunksPerBlock;
  uint32_t parts;
  int slices;
  int groups;        // part groups: blocks of group g run parts g, g + groups, ...
  uint32_t payload;  // bytes of a chunk: a simple slot, or half an LL slot
  int ll;
  int divisor;
  uint64_t* state;
};

// Blocks of the kernel (kThreads each, its most demanding reduction) one multiprocessor holds at
// once: every block of a launch must be resident together, for blocks wait for each other.
int planBlocksPerMultiprocessor();

// Launches `blocks` (lanes x groups x slices) blocks of `threads`; key: the call's reduction (any
// valid one for plans without reductions).
void launchPlan(const DevComm& comm, const PlanKernelArgs& args, ReduceKey key, int blocks,
                int threads, cudaStream_t stream);

}  // namespace loom::cuda
