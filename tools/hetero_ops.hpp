// The collectives that loom-hetero-bench measures, each as one call's shape: its count argument,
// its buffers, nccl-tests' "bytes" of it, what a rank hands to it and gets back (what a device
// rank copies when it stages by hand), the call itself, its input and its exact result.
// float32 throughout; the input values are small integers, so every order of summation gives the
// same bits and the expected result is computed here, not by another collective.
#pragma once

#include <cstddef>
#include <string>

#include "loom/loom.h"

namespace loom::tool {

enum class HeteroOp { kAllReduce, kBroadcast, kReduce, kAllGather, kReduceScatter };

// "allreduce", "broadcast", "reduce", "allgather", "reducescatter"; false for any other name.
bool parseHeteroOp(const std::string& name, HeteroOp* op);
const char* heteroOpName(HeteroOp op);
// What a row's bytes are for this collective (nccl-tests' size column), for the header line.
const char* heteroOpBytes(HeteroOp op);

struct OpShape {
  HeteroOp op = HeteroOp::kAllReduce;
  int nranks = 1;
  int root = 0;      // broadcast, reduce
  size_t count = 0;  // the call's count: allgather's sendcount, reduce-scatter's recvcount

  bool rooted() const { return op == HeteroOp::kBroadcast || op == HeteroOp::kReduce; }
  bool reduces() const { return op != HeteroOp::kBroadcast && op != HeteroOp::kAllGather; }
  // allreduce and broadcast run in place (recvbuff == sendbuff), the others out of place.
  bool inPlace() const { return op == HeteroOp::kAllReduce || op == HeteroOp::kBroadcast; }
  size_t inputElems() const;   // the send buffer
  size_t outputElems() const;  // the receive buffer (the send buffer where in place)
  size_t bytes() const;        // nccl-tests' bytes: the larger of the two, in bytes
  // What rank hands to the collective and what it gets back, in elements (0: nothing). A
  // broadcast's root receives nothing (in place it has the data); its other ranks send nothing.
  size_t sendElems(int rank) const;
  size_t recvElems(int rank) const;
};

// The shape whose nccl-tests bytes are `bytes` on a communicator of nranks. allgather and
// reduce-scatter round down to a multiple of 4 * nranks (at least one element per rank).
OpShape shapeFor(HeteroOp op, size_t bytes, int nranks, int root);

// The collective (float32; reductions sum) from send into recv on comm.
loomResult_t runOp(const OpShape& s, const void* send, void* recv, loomComm_t comm,
                   loomStream_t stream);

// rank's input (inputElems values; a broadcast's non-root ranks get -1, to be overwritten).
void fillInput(const OpShape& s, int rank, float* in);
// How many of rank's output values (outputElems) differ from the exact result; 0 where rank
// receives nothing (a reduce's non-root ranks).
long countWrong(const OpShape& s, int rank, const float* out);

}  // namespace loom::tool
