// The host side of every kernel launch: the reducer for a call's type, op and accumulation, and
// the launch's own error, reported the same way by every collective.
#pragma once

#include <cuda_runtime.h>

#include "base/error.hpp"
#include "device/cuda/collectives/exchange.hpp"
#include "device/cuda/collectives/reduce_ops.cuh"

namespace loom::cuda {

// Throws loomUnhandledCudaError naming `kernel` ("LL", "two-shot", ...) when its launch failed.
inline void checkLaunch(const char* kernel) {
  cudaError_t err = cudaGetLastError();
  if (err != cudaSuccess)
    LOOM_THROW(loomUnhandledCudaError, "launching the ", kernel,
               " kernel: ", cudaGetErrorString(err));
}

// launch(Reducer{}) with the reducer of `key`, then checkLaunch(kernel); loomInvalidArgument for
// a combination that has no reducer.
template <typename Launch>
void launchReducing(ReduceKey key, const char* kernel, Launch&& launch) {
  if (!withReducer(key.dtype, key.op, static_cast<Accum>(key.accum), launch))
    LOOM_THROW(loomInvalidArgument, "no GPU reduction for this type, op and accumulation");
  checkLaunch(kernel);
}

}  // namespace loom::cuda
