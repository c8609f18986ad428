// The CUDA backend's own LOOM_CUDA_* parameters (docs/configuration.md).
#pragma once

#include <cstdint>
#include <string>

namespace loom::env {

int64_t cudaSlotBytes();       // LOOM_CUDA_SLOT_BYTES: bytes of one channel slot in a GPU window
std::string cudaTransport();   // LOOM_CUDA_TRANSPORT: auto, p2p or host
int64_t cudaMaxBlocks();       // LOOM_CUDA_MAX_BLOCKS: thread blocks (channels) per kernel, <= 64
int64_t cudaLLMaxBytes();      // LOOM_CUDA_LL_MAX_BYTES: LL below this, simple above (-1: table)
bool cudaWindows();            // LOOM_CUDA_WINDOWS: calls on registered windows run zero-copy
int64_t cudaWindowMinBytes();  // LOOM_CUDA_WINDOW_MIN_BYTES: ... from this size on
int64_t cudaCopyEngineMinBytes();  // LOOM_CUDA_CE_MIN_BYTES: copy engines from here (-1: never)
int64_t cudaOneShotMaxBytes();     // LOOM_CUDA_ONESHOT_MAX_BYTES: one-shot allreduce on windows
int64_t cudaPlanLLMaxBytes();      // LOOM_CUDA_PLAN_LL_MAX_BYTES: the plan kernel's LL limit
int64_t cudaPlanSliceBytes();      // LOOM_CUDA_PLAN_SLICE_BYTES: bulk bytes a block takes
int64_t cudaPlanPartGroups();      // LOOM_CUDA_PLAN_PART_GROUPS: pipeline parts side by side
// The settings above that shape what the ranks' kernels do together ("Same on every rank" in
// docs/configuration.md), as NAME=value,NAME=value: the engine compares them across ranks.
std::string cudaSharedSettings();

}  // namespace loom::env
