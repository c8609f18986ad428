#include "device/cuda/cuda_env.hpp"

#include "base/env.hpp"

namespace loom::env {

int64_t cudaSlotBytes() { return getInt("LOOM_CUDA_SLOT_BYTES", 256 * 1024); }
std::string cudaTransport() { return get("LOOM_CUDA_TRANSPORT").value_or("auto"); }
int64_t cudaMaxBlocks() { return getInt("LOOM_CUDA_MAX_BLOCKS", 64); }
int64_t cudaLLMaxBytes() { return getInt("LOOM_CUDA_LL_MAX_BYTES", -1); }
bool cudaWindows() { return getInt("LOOM_CUDA_WINDOWS", 1) != 0; }
int64_t cudaWindowMinBytes() { return getInt("LOOM_CUDA_WINDOW_MIN_BYTES", 0); }
int64_t cudaCopyEngineMinBytes() { return getInt("LOOM_CUDA_CE_MIN_BYTES", -1); }
int64_t cudaOneShotMaxBytes() { return getInt("LOOM_CUDA_ONESHOT_MAX_BYTES", 256 * 1024); }

}  // namespace loom::env
