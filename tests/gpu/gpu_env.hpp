// Process-level facts for the GPU tests, without GoogleTest (the fault test's ranks use it too):
// which GPU a rank runs on, and whether this host can run a job at all. A host that cannot exits
// with kSkipExitCode, which ctest reports as skipped (SKIP_RETURN_CODE).
#pragma once

#include <cuda_runtime.h>

#include <cstdlib>
#include <initializer_list>
#include <string>

namespace loom::gputest {

constexpr int kSkipExitCode = 77;

// The first of `names` that is set and not empty, as an integer; else fallback.
inline int envInt(std::initializer_list<const char*> names, int fallback) {
  for (const char* name : names) {
    const char* value = std::getenv(name);
    if (value != nullptr && value[0] != '\0') return std::atoi(value);
  }
  return fallback;
}

// This process's rank among the ranks of its host (loomrun and torchrun set LOCAL_RANK), and how
// many ranks the host runs.
inline int localRank() { return envInt({"LOCAL_RANK", "LOOM_RANK", "RANK"}, 0); }
inline int localRanks() { return envInt({"LOCAL_WORLD_SIZE", "LOOM_WORLD_SIZE", "WORLD_SIZE"}, 1); }

// GPUTEST_CPU_REFERENCE=1 checks the tests themselves on a host without a GPU: the harness-based
// tests run on CPU communicators ('direct', which reduces in rank order like the reference) with
// host buffers and the CUDA-only tests skip; the fault test's ranks use CPU communicators.
inline bool cpuReferenceMode() {
  static const bool on = envInt({"GPUTEST_CPU_REFERENCE"}, 0) != 0;
  return on;
}

inline std::string cudaErrorText(cudaError_t e) {
  return std::string(cudaGetErrorName(e)) + ": " + cudaGetErrorString(e);
}

// Number of CUDA devices, 0 when there is no driver or no device.
inline int cudaDeviceCount() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    (void)cudaGetLastError();  // not sticky, but keep the next query clean
    return 0;
  }
  return count;
}

// LOOM_TEST_SHARE_GPU=1: ranks may share GPUs (LOCAL_RANK modulo the device count), so a host
// with one GPU runs the multi-rank tests (tests/gpu/run.sh can start CUDA MPS for them).
inline bool shareGpus() { return envInt({"LOOM_TEST_SHARE_GPU"}, 0) != 0; }

// Empty when `ranks` processes on this host can each have a GPU (of their own, or shared when
// shareGpus()); else why not.
inline std::string gpuSkipReason(int ranks) {
  int count = 0;
  cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess) return "no usable CUDA device (" + cudaErrorText(e) + ")";
  if (count == 0) return "no CUDA device";
  if (count < ranks && !shareGpus())
    return "needs " + std::to_string(ranks) + " GPUs, found " + std::to_string(count) +
           " (LOOM_TEST_SHARE_GPU=1 lets ranks share them)";
  return "";
}

// Makes LOCAL_RANK modulo the device count the current device of this thread.
inline cudaError_t selectRankDevice(int* device) {
  int count = 0;
  cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess) return e;
  if (count == 0) return cudaErrorNoDevice;
  *device = localRank() % count;
  return cudaSetDevice(*device);
}

}  // namespace loom::gputest
