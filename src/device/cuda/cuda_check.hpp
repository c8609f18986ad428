// CUDA runtime errors as Loom errors: loomUnhandledCudaError with the call and CUDA's message.
#pragma once

#include <cuda_runtime.h>

#include "base/error.hpp"

#define LOOM_CUDA_CHECK(call)                                                                     \
  do {                                                                                            \
    cudaError_t loom_cuda_err_ = (call);                                                          \
    if (loom_cuda_err_ != cudaSuccess)                                                            \
      LOOM_THROW(loomUnhandledCudaError, #call, " failed: ", cudaGetErrorString(loom_cuda_err_)); \
  } while (0)
