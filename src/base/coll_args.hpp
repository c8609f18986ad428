// One call as the C API received it: the collective's arguments, or one send/receive of a group.
// Below every layer that runs calls (device backends' native algorithms, the host algorithms, the
// communicator), so each of them reads the same description.
#pragma once

#include <cstddef>

#include "loom/loom.h"

namespace loom {

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
  loomStream_t stream = nullptr;  // device communicators: the caller's stream (its kind's handle)
};

// The calls of the layers above the communicator (ep/: expert-parallel dispatch and combine), as
// the mismatch check signs them: a function number past the public enum's.
inline constexpr loomFunc_t kFuncExpertParallel = static_cast<loomFunc_t>(loomNumFuncs);

// One send or receive of a group on a device communicator.
struct DeviceP2POp {
  bool isSend = false;
  int peer = 0;
  void* buffer = nullptr;
  size_t bytes = 0;
  int64_t tag = 0;  // matched like a host send's tag (staged devices; native engines may ignore)
};

// The bytes a call reads from `send` and writes to `recv` on rank `rank` of `nranks`, each from
// the buffer's start (0: the buffer is not touched). Argument checks and host staging use it.
struct CallExtents {
  size_t sendBytes = 0;
  size_t recvBytes = 0;
};
CallExtents callExtents(const CollArgs& args, int rank, int nranks);

// Average runs as a sum followed by one division by the rank count on the final step: the op the
// reductions run, and that divisor (1 for every other op).
inline loomRedOp_t kernelOp(loomRedOp_t op) { return op == loomAvg ? loomSum : op; }
inline int averageDivisor(loomRedOp_t op, int nranks) { return op == loomAvg ? nranks : 1; }

}  // namespace loom
