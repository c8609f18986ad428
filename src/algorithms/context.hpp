// What an algorithm gets: the call's arguments and the communicator's resources (device, shared
// arena, channels, step counter, health check). Algorithms never know which transport carries a
// channel nor which communicator they serve.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "base/wait.hpp"
#include "device/device.hpp"
#include "loom/loom.h"
#include "transport/channel.hpp"
#include "transport/shm/shm_arena.hpp"

namespace loom {

struct RingStep;   // ring_engine.hpp
struct Hierarchy;  // below

struct CollArgs {
  loomFunc_t func = loomFuncAllReduce;
  const void* send = nullptr;
  void* recv = nullptr;
  size_t count = 0;  // per the C API: total (allreduce, bcast, reduce), per rank (others)
  loomDataType_t dtype = loomFloat32;
  loomRedOp_t op = loomSum;
  int root = 0;
  int accum = -1;
  // loomAllToAllv only (elements, one per peer).
  const size_t* sendCounts = nullptr;
  const size_t* sendDispls = nullptr;
  const size_t* recvCounts = nullptr;
  const size_t* recvDispls = nullptr;
  void* stream = nullptr;  // CUDA communicators: the cudaStream_t to order the call on
};

// One send or receive of a group on an accelerator communicator (run by its device engine).
struct DeviceP2POp {
  bool isSend = false;
  int peer = 0;
  void* buffer = nullptr;
  size_t bytes = 0;
};

// Average runs as a sum followed by one division by the rank count on the final step: the op the
// reduction kernels run, and that divisor (1 for every other op).
inline loomRedOp_t kernelOp(loomRedOp_t op) { return op == loomAvg ? loomSum : op; }
inline int averageDivisor(loomRedOp_t op, int nranks) { return op == loomAvg ? nranks : 1; }

class AlgoContext {
 public:
  int rank = 0;
  int nranks = 1;
  Device* device = nullptr;
  const ShmArena* arena = nullptr;                  // null when the ranks do not share a host
  const std::vector<Channel*>* channels = nullptr;  // collective channels, by rank of this context
  uint64_t* step = nullptr;                         // shared step counter of the communicator
  // Throws on timeout, abort, or when `peer` (the rank of this context being waited for; -1: none
  // in particular) is gone. Only the awaited peer matters: a rank that finished its part and exited
  // is no fault.
  std::function<void(int peer)> check;
  std::vector<char>* scratch = nullptr;  // grow-once scratch of the communicator
  size_t streamingMinBytes = 0;          // outputs at least this large bypass the cache
  // Per-communicator workspaces, sized at init or grown once, so no call allocates.
  std::vector<const void*>* sources = nullptr;  // one entry per rank, for reductions
  std::vector<RingStep>* ringSteps = nullptr;
  // Communicators on an accelerator: its engine (CudaEngine for CUDA), which GPU algorithms drive.
  void* deviceEngine = nullptr;
  // Ranks on several nodes: the sub-groups the hierarchical algorithms compose (null otherwise).
  const Hierarchy* hierarchy = nullptr;

  template <typename Ready>
  void wait(Ready&& ready, int peer) const {
    waitUntil(ready, [&] { check(peer); });
  }
  // Writes part of a call's result; outputBytes is the whole result's size on this rank.
  void copyOut(void* dst, const void* src, size_t bytes, size_t outputBytes) const {
    if (outputBytes >= streamingMinBytes)
      device->copyToOutput(dst, src, bytes);
    else
      device->copy(dst, src, bytes);
  }
  Channel& channel(int peer) const { return *(*channels)[peer]; }
  char* scratchBytes(size_t bytes) const {
    // Grows once to the largest size seen; never allocates again for smaller calls.
    if (scratch->size() < bytes) scratch->resize(bytes);
    return scratch->data();
  }
};

// The groups of a communicator that spans nodes, built once at init: this rank's node (ranks
// numbered by local index, the node's arena) and its column, the ranks with its local index on
// every node (numbered by node). Only local indices below the smallest node's size have a column
// (every node has such a rank), so uneven nodes still give every column one rank per node; the
// rest of a larger node takes part in the intra-node phases only.
struct Hierarchy {
  AlgoContext node;
  AlgoContext column;                     // nranks 0: this rank's local index has no column
  std::vector<std::vector<int>> members;  // global ranks of each node, ascending
  std::vector<int> nodeOf, localIndex;    // of each global rank
  int nodeIndex = 0;                      // this rank's node
  int columns = 1;                        // the smallest node's size
  std::vector<char>* scratch = nullptr;   // the hierarchical layer's own (phases use node's)
  char* scratchBytes(size_t bytes) const {
    if (scratch->size() < bytes) scratch->resize(bytes);
    return scratch->data();
  }
};

using AlgorithmFn = void (*)(const AlgoContext&, const CollArgs&);

struct Algorithm {
  loomFunc_t func;
  const char* name;
  AlgorithmFn run;
  bool needsArena;                       // runs only where all ranks share one host's memory
  DeviceKind device = DeviceKind::kCpu;  // the kind of buffers it works on
};

// Every algorithm Loom has, for the selector and for forcing one in tests.
const std::vector<Algorithm>& allAlgorithms();
const Algorithm* findAlgorithm(loomFunc_t func, const std::string& name,
                               DeviceKind device = DeviceKind::kCpu);
const char* funcName(loomFunc_t func);  // "allreduce", "allgather", ... (LOOM_ALGO keys)

}  // namespace loom
