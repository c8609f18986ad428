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
#if NCCL_VERSION_CODE >= NCCL_VERSION(2, 32, 0)
// NCCL's device API headers define static helpers that a host file leaves unused.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wunused-function"
#include <nccl_device/host.h>
#pragma GCC diagnostic pop
#endif
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
// What NCCL 2.29 to 2.32 added (null in an older real NCCL), where the shim is built against
// 2.32's nccl.h.
#if NCCL_VERSION_CODE >= NCCL_VERSION(2, 32, 0)
// clang-format off
#define LOOM_NCCL_REAL_FUNCTIONS_2_32(X) \
  X(AllReduceConfig) X(BroadcastConfig) X(ReduceConfig) X(AllGatherConfig) \
  X(ReduceScatterConfig) X(AlltoAllConfig) X(GatherConfig) X(ScatterConfig) \
  X(CommGetUniqueId) X(CommGrow) X(CommSuspend) X(CommResume) X(CommMemStats) \
  X(WinGetUserPtr) X(PutSignal) X(Signal) X(WaitSignal) X(SetEncryption) X(ParamBind) \
  X(ParamGetI8) X(ParamGetI16) X(ParamGetI32) X(ParamGetI64) X(ParamGetU8) X(ParamGetU16) \
  X(ParamGetU32) X(ParamGetU64) X(ParamGetStr) X(ParamGet) X(ParamGetParameter) \
  X(ParamGetAllParameterKeys) X(ParamDumpAll) X(CommQueryProperties) \
  X(GetLsaMultimemDevicePointer) X(GetMultimemDevicePointer) X(GetLsaDevicePointer) \
  X(GetPeerDevicePointer) X(GetMultimemDeviceLeInfo) X(GetCftDeviceLeInfo) \
  X(GetPeerDeviceLeInfo)
// clang-format on
#else
#define LOOM_NCCL_REAL_FUNCTIONS_2_32(X)
#endif
#define LOOM_NCCL_REAL_MEMBER(name) decltype(&nccl##name) name = nullptr;
  LOOM_NCCL_REAL_FUNCTIONS(LOOM_NCCL_REAL_MEMBER)
  LOOM_NCCL_REAL_FUNCTIONS_2_32(LOOM_NCCL_REAL_MEMBER)
#undef LOOM_NCCL_REAL_MEMBER
  // NCCL's device API (nccl_device.h, C++ only): declared here by their C ABI.
  ncclResult_t (*DevCommCreate)(ncclComm_t, const void* requirements, void* devComm) = nullptr;
  ncclResult_t (*DevCommDestroy)(ncclComm_t, const void* devComm) = nullptr;
};

// The process's real NCCL, loaded on first call; nullptr with the reason in *why when none can
// be used. Thread-safe; the library stays loaded for the life of the process.
const RealNccl* realNccl(std::string* why);

}  // namespace loom::nccl_shim
