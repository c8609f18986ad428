#include "per_call.hpp"

#include <cstddef>
#include <cstdlib>
#include <cstring>

#if defined(LOOM_HAVE_CUDA)
#include <cuda_runtime_api.h>
#endif

namespace loom::nccl_shim {

// A field of the caller's per-call config, where its struct (its size) has it.
#define LOOM_NCCL_CONFIG_FIELD(config, field, fallback)                                      \
  ((config)->size >= offsetof(CollConfig, field) + sizeof((config)->field) ? (config)->field \
                                                                           : (fallback))

PerCall readConfig(const CollConfig* config) {
  PerCall out;
#if NCCL_VERSION_CODE >= NCCL_VERSION(2, 32, 0)
  if (config == nullptr) return out;
  if (config->magic != NCCL_API_MAGIC || config->size < offsetof(ncclCollConfig_t, minCTAs)) {
    out.refused = ncclInvalidArgument;
    out.why = "config was not initialized with NCCL_COLLCONFIG_INITIALIZER";
    return out;
  }
  const char* selection = LOOM_NCCL_CONFIG_FIELD(config, algSelection, nullptr);
  if (selection != nullptr && *selection != '\0') {
    out.toReal = true;
    out.why = std::string("a per-call algorithm selection (algSelection \"") + selection +
              "\": NCCL's own algorithms)";
  }
  out.event = LOOM_NCCL_CONFIG_FIELD(config, launchCompletionEvent, nullptr);
#else
  (void)config;
#endif
  return out;
}

ncclResult_t stageInput(Entry entry, bool host, int device, void* stream, const void* input,
                        size_t bytes, void** scratch) {
  if (host) {
    *scratch = std::malloc(bytes);
    if (*scratch == nullptr) return fail(entry, ncclSystemError, "out of host memory");
    std::memcpy(*scratch, input, bytes);
    return ncclSuccess;
  }
#if defined(LOOM_HAVE_CUDA)
  int previous = -1;
  cudaGetDevice(&previous);
  if (device >= 0) cudaSetDevice(device);
  const cudaStream_t s = static_cast<cudaStream_t>(stream);
  cudaError_t err = cudaMallocAsync(scratch, bytes, s);
  if (err == cudaSuccess)
    err = cudaMemcpyAsync(*scratch, input, bytes, cudaMemcpyDeviceToDevice, s);
  if (previous >= 0) cudaSetDevice(previous);
  if (err != cudaSuccess)
    return fail(entry, ncclUnhandledCudaError,
                std::string("in-place alltoall's scratch: ") + cudaGetErrorString(err));
  return ncclSuccess;
#else
  (void)device, (void)stream, (void)input, (void)bytes, (void)scratch;
  return fail(entry, ncclInvalidUsage, "CUDA buffers on a Loom built without CUDA");
#endif
}

void releaseStage(bool host, int device, void* stream, void* scratch) {
  if (scratch == nullptr) return;
  if (host) return std::free(scratch);
#if defined(LOOM_HAVE_CUDA)
  int previous = -1;
  cudaGetDevice(&previous);
  if (device >= 0) cudaSetDevice(device);
  if (cudaFreeAsync(scratch, static_cast<cudaStream_t>(stream)) != cudaSuccess) cudaGetLastError();
  if (previous >= 0) cudaSetDevice(previous);
#else
  (void)device, (void)stream;
#endif
}

ncclResult_t recordLaunchEvent(Entry entry, cudaEvent_t event, void* stream) {
#if defined(LOOM_HAVE_CUDA)
  if (event == nullptr) return ncclSuccess;
  const cudaError_t err = cudaEventRecord(event, static_cast<cudaStream_t>(stream));
  if (err != cudaSuccess)
    return fail(entry, ncclUnhandledCudaError,
                std::string("launchCompletionEvent: cudaEventRecord: ") + cudaGetErrorString(err));
#else
  (void)entry, (void)event, (void)stream;
#endif
  return ncclSuccess;
}

}  // namespace loom::nccl_shim
