// LOOM_NCCL_REPORT=1: per entry point, the calls that ran on Loom, on the real NCCL, and those
// that failed, printed to stderr when the process exits.
#pragma once

namespace loom::nccl_shim {

// clang-format off
#define LOOM_NCCL_ENTRIES(X) \
  X(GetVersion) X(GetUniqueId) X(CommInitRank) X(CommInitRankConfig) X(CommInitAll) \
  X(CommInitRankScalable) X(CommSplit) X(CommShrink) X(CommFinalize) X(CommDestroy) \
  X(CommAbort) X(CommRevoke) X(CommGetAsyncError) X(CommCount) X(CommCuDevice) X(CommUserRank) \
  X(GetErrorString) X(GetLastError) X(ResetDebugInit) X(AllReduce) X(Broadcast) X(Bcast) \
  X(Reduce) X(AllGather) X(ReduceScatter) X(AlltoAll) X(Gather) X(Scatter) X(Send) X(Recv) \
  X(GroupStart) X(GroupEnd) X(GroupSimulateEnd) X(RedOpCreatePreMulSum) X(RedOpDestroy) \
  X(MemAlloc) X(MemFree) X(CommRegister) X(CommDeregister) X(CommWindowRegister) \
  X(CommWindowDeregister) X(DevCommCreate) X(DevCommDestroy) X(AllReduceConfig) \
  X(BroadcastConfig) X(ReduceConfig) X(AllGatherConfig) X(ReduceScatterConfig) \
  X(AlltoAllConfig) X(GatherConfig) X(ScatterConfig) X(CommGetUniqueId) X(CommGrow) \
  X(CommSuspend) X(CommResume) X(CommMemStats) X(WinGetUserPtr) X(PutSignal) X(Signal) \
  X(WaitSignal) X(SetEncryption) X(Param) X(CommQueryProperties) X(GetDevicePointer) \
  X(GetDeviceLeInfo)
// clang-format on

enum class Entry {
#define LOOM_NCCL_ENTRY_ENUM(name) k##name,
  LOOM_NCCL_ENTRIES(LOOM_NCCL_ENTRY_ENUM)
#undef LOOM_NCCL_ENTRY_ENUM
      kCount
};

enum class Route { kLoom, kNccl, kError };

// Counted only when LOOM_NCCL_REPORT is set (a relaxed atomic increment otherwise skipped).
void count(Entry entry, Route route);
const char* entryName(Entry entry);

}  // namespace loom::nccl_shim
