// One checked call of each collective on a harness: poison the outputs, upload inputs, call, wait,
// compare with the reference, check that nothing was written outside the outputs and (out of
// place) that the inputs are unchanged. Every rank calls the same checks in the same order.
//
// In place follows nccl-tests: allreduce, reduce, broadcast: sendbuff == recvbuff; allgather and
// gather: sendbuff = recvbuff + rank * count; reducescatter and scatter: recvbuff = sendbuff +
// rank * count. alltoall and alltoallv cannot run in place (their layout is ignored).
#pragma once

#include <cstddef>

#include "gpu_harness.hpp"

namespace loom::gputest {

// gpu_reduce_checks.cpp
void checkAllReduce(Harness& h, loomDataType_t t, loomRedOp_t op, size_t count, Layout layout);
void checkReduce(Harness& h, loomDataType_t t, loomRedOp_t op, size_t count, Layout layout);
void checkReduceScatter(Harness& h, loomDataType_t t, loomRedOp_t op, size_t count, Layout layout);

// gpu_movement_checks.cpp
void checkBroadcast(Harness& h, loomDataType_t t, size_t count, Layout layout);
void checkAllGather(Harness& h, loomDataType_t t, size_t count, Layout layout);
void checkGather(Harness& h, loomDataType_t t, size_t count, Layout layout);
void checkScatter(Harness& h, loomDataType_t t, size_t count, Layout layout);
void checkAllToAll(Harness& h, loomDataType_t t, size_t count, Layout layout);
// Uneven per-pair counts (some zero), packed in reverse peer order, with gaps between blocks.
void checkAllToAllv(Harness& h, loomDataType_t t, size_t count, Layout layout);
// In one group: send to rank+1 and rank-1, receive from rank-1 and rank+1.
void checkSendRecvRing(Harness& h, loomDataType_t t, size_t count, Layout layout);

// A root that differs between calls (the same on every rank).
inline int rootFor(loomDataType_t t, int salt, size_t count) {
  return static_cast<int>((static_cast<size_t>(t) * 3 + static_cast<size_t>(salt) + count) %
                          static_cast<size_t>(gRanks));
}

}  // namespace loom::gputest
