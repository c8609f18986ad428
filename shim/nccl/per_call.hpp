// What one collective call of the shim carries beyond its arguments: NCCL 2.32's per-call config
// (nccl*Config collectives), and the scratch an in-place alltoall needs on Loom.
#pragma once

#include <string>

#include "shim.hpp"

namespace loom::nccl_shim {

// The per-call config of NCCL 2.32's nccl*Config collectives (none before).
#if NCCL_VERSION_CODE >= NCCL_VERSION(2, 32, 0)
using CollConfig = ncclCollConfig_t;
#else
struct CollConfig;
#endif

// What Loom makes of a per-call config: its event, and whether the call must go to the real NCCL
// (an algorithm selection names NCCL's own algorithms). The tuning fields (CTAs, CGA cluster
// size, CTA policy, vendor extensions) and the profiler tag are NCCL's and ignored.
struct PerCall {
  ncclResult_t refused = ncclSuccess;
  std::string why;  // the refusal, or the reason to fall back
  bool toReal = false;
  cudaEvent_t event = nullptr;  // launchCompletionEvent: recorded on the stream before the call
};
// A config without NCCL_COLLCONFIG_INITIALIZER's magic is refused; one is read as far as its
// size goes (a caller built against an older release's struct).
PerCall readConfig(const CollConfig* config);

// launchCompletionEvent on Loom's route: recorded on the stream right before the call's work, as
// NCCL records it before the launch with CUDA < 12.3 (work the event releases may run beside
// the call's kernel, never wait for it).
ncclResult_t recordLaunchEvent(Entry entry, cudaEvent_t event, void* stream);

// NCCL runs alltoall in place, Loom out of place only: the input goes to scratch first (host
// memory; or memory of the communicator's GPU, allocated and copied in the stream's order), and
// Loom reads it from there; releaseStage frees it, in the stream's order, once the call is issued.
ncclResult_t stageInput(Entry entry, bool host, int device, void* stream, const void* input,
                        size_t bytes, void** scratch);
void releaseStage(bool host, int device, void* stream, void* scratch);

}  // namespace loom::nccl_shim
