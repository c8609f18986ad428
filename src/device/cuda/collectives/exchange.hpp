// The one shape every GPU collective except the two-shot allreduce takes: each rank sends one
// byte range to some peers and receives one from some peers, and either copies what it receives
// to a destination per source ("copy") or combines all sources, its own included, in rank order
// into one output ("reduce"). Broadcast, scatter, gather, allgather, alltoall(v) and send/recv are
// copies; allreduce (one-shot), reduce and reduce-scatter are reductions.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "device/cuda/collectives/dev_comm.hpp"
#include "loom/loom.h"

namespace loom::cuda {

struct ExchangeArgs {
  // What this rank sends to rank p (sendBytes[p] == 0: nothing) and receives from rank q.
  const char* send[kMaxRanks];
  size_t sendBytes[kMaxRanks];
  char* recv[kMaxRanks];  // copy: where q's bytes go (unused for reductions)
  size_t recvBytes[kMaxRanks];
  // Copy: this rank's own part, copied locally (selfBytes == 0: none).
  const char* selfSend;
  char* selfRecv;
  size_t selfBytes;
  // Reduce: output = op over ranks q in order of (q == rank ? selfSend : data from q), for every
  // q with recvBytes[q] > 0 plus this rank; reduceBytes == 0: this rank only sends.
  char* reduceOut;
  size_t reduceBytes;
  int divisor;
  int blocks;       // grid size, the same on every rank for the same call
  int channelBase;  // first channel (block) index: collectives and point-to-point use their own
  int threads;      // LL kernels' block size (0: kThreads), the same on every rank
};

struct TwoShotArgs {
  const char* send;
  char* recv;
  size_t bytes;
  int divisor;
  int blocks;
};

struct ReduceKey {
  loomDataType_t dtype;
  loomRedOp_t op;  // sum, prod, max or min
  int accum;       // 0 native, 1 fp16, 2 fp32, 3 fp64 (Accum)
};

// Launchers (they check the launch, not the kernel's completion).
void launchLLCopy(const DevComm& comm, const ExchangeArgs& args, cudaStream_t stream);
void launchLLReduce(const DevComm& comm, const ExchangeArgs& args, ReduceKey key,
                    cudaStream_t stream);
void launchSimpleCopy(const DevComm& comm, const ExchangeArgs& args, cudaStream_t stream);
void launchSimpleReduce(const DevComm& comm, const ExchangeArgs& args, ReduceKey key,
                        cudaStream_t stream);
void launchTwoShot(const DevComm& comm, const TwoShotArgs& args, ReduceKey key,
                   cudaStream_t stream);
// A local dst = op(srcs...) over device buffers, for the device adaptor's reduce().
void launchLocalReduce(char* dst, const char* const* srcs, int nsrc, size_t bytes, ReduceKey key,
                       int divisor, cudaStream_t stream);

}  // namespace loom::cuda
