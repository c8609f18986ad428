// The real NCCL, loaded with dlopen for what Loom does not do.
//
// Which library: LOOM_NCCL_FALLBACK names one file (the only one tried; "off": none). Otherwise
// the way PyTorch's wheels find theirs: nvidia/nccl/lib/libnccl.so.2 under the site-packages of
// every library already loaded from a site-packages (libtorch_cuda.so's RPATH points there), of
// $VIRTUAL_ENV and of the running python; then LD_LIBRARY_PATH's directories, the system's
// libnccl.so.2 (ld.so.cache) and the usual directories. A candidate that is this shim itself
// (same file, or the same ncclGetVersion once loaded: a libnccl.so.2 symlink to the shim) is
// skipped. RTLD_LOCAL | RTLD_DEEPBIND: the real NCCL's calls to its own entry points stay inside
// it instead of binding to the shim's, which come first in the process.
#pragma once

#pragma GCC visibility push(default)
#include <nccl.h>
#pragma GCC visibility pop

#include <string>

namespace loom::nccl_shim {

struct RealNccl {
  std::string path;
  int version = 0;
// clang-format off
#define LOOM_NCCL_REAL_FUNCTIONS(X) \
  X(GetVersion) X(GetUniqueId) X(CommInitRank) X(CommInitRankConfig) X(CommInitAll) \
  X(CommInitRankScalable) X(CommSplit) X(CommShrink) X(CommFinalize) X(CommDestroy) \
  X(CommAbort) X(CommRevoke) X(CommGetAsyncError) X(CommCount) X(CommCuDevice) X(CommUserRank) \
  X(GetErrorString) X(GetLastError) X(AllReduce) X(Broadcast) X(Reduce) X(AllGather) \
  X(ReduceScatter) X(AlltoAll) X(Gather) X(Scatter) X(Send) X(Recv) X(GroupStart) X(GroupEnd) \
  X(GroupSimulateEnd) X(RedOpCreatePreMulSum) X(RedOpDestroy) X(MemAlloc) X(MemFree) \
  X(CommRegister) X(CommDeregister) X(CommWindowRegister) X(CommWindowDeregister)
// clang-format on
#define LOOM_NCCL_REAL_MEMBER(name) decltype(&nccl##name) name = nullptr;
  LOOM_NCCL_REAL_FUNCTIONS(LOOM_NCCL_REAL_MEMBER)
#undef LOOM_NCCL_REAL_MEMBER
  // NCCL's device API (nccl_device.h, C++ only): declared here by their C ABI.
  ncclResult_t (*DevCommCreate)(ncclComm_t, const void* requirements, void* devComm) = nullptr;
  ncclResult_t (*DevCommDestroy)(ncclComm_t, const void* devComm) = nullptr;
};

// The process's real NCCL, loaded on first call; nullptr with the reason in *why when none can
// be used. Thread-safe; the library stays loaded for the life of the process.
const RealNccl* realNccl(std::string* why);

}  // namespace loom::nccl_shim
