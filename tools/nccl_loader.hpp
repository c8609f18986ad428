// NCCL, found at run time with dlopen: loom-bench compares against it where it is installed, and
// neither builds nor runs against it otherwise. The few types below are declared here, with
// NCCL's ABI, rather than taken from nccl.h, which the build must not need.
#pragma once

#include <cstddef>
#include <string>

namespace loom::bench::nccl {

// ncclResult_t, ncclDataType_t and ncclRedOp_t are C enums (int). Loom numbers its types
// (int8 .. bfloat16 0..9, fp8 e4m3 10, e5m2 11) and ops (sum prod max min avg 0..4) as NCCL
// does, so Loom's values pass through unchanged.
using Result = int;
using DataType = int;
using RedOp = int;
constexpr Result kSuccess = 0;

struct OpaqueComm;
using Comm = OpaqueComm*;  // ncclComm_t
using Stream = void*;      // cudaStream_t
struct OpaqueWindow;
using Window = OpaqueWindow*;            // ncclWindow_t
constexpr int kWinCollSymmetric = 0x01;  // NCCL_WIN_COLL_SYMMETRIC

constexpr size_t kUniqueIdBytes = 128;
struct UniqueId {
  char internal[kUniqueIdBytes];
};

// NCCL_VERSION(2, 24, 0): the first release with fp8 types; avg came with 2.10.
constexpr int kFirstFp8Version = 22400;
constexpr int kFirstAvgVersion = 21000;

struct Api {
  std::string path;  // what dlopen was given
  int version = 0;   // ncclGetVersion's code (e.g. 22105 for 2.21.5), 0 when unknown
  Result (*getUniqueId)(UniqueId* id) = nullptr;
  Result (*commInitRank)(Comm* comm, int nranks, UniqueId id, int rank) = nullptr;
  Result (*commDestroy)(Comm comm) = nullptr;
  Result (*allReduce)(const void* send, void* recv, size_t count, DataType type, RedOp op,
                      Comm comm, Stream stream) = nullptr;
  Result (*allGather)(const void* send, void* recv, size_t sendCount, DataType type, Comm comm,
                      Stream stream) = nullptr;
  Result (*reduceScatter)(const void* send, void* recv, size_t recvCount, DataType type, RedOp op,
                          Comm comm, Stream stream) = nullptr;
  Result (*broadcast)(const void* send, void* recv, size_t count, DataType type, int root,
                      Comm comm, Stream stream) = nullptr;
  Result (*reduce)(const void* send, void* recv, size_t count, DataType type, RedOp op, int root,
                   Comm comm, Stream stream) = nullptr;
  Result (*send)(const void* send, size_t count, DataType type, int peer, Comm comm,
                 Stream stream) = nullptr;
  Result (*recv)(void* recv, size_t count, DataType type, int peer, Comm comm,
                 Stream stream) = nullptr;
  Result (*groupStart)() = nullptr;
  Result (*groupEnd)() = nullptr;
  const char* (*getErrorString)(Result result) = nullptr;
  // Optional (NCCL 2.19+ / 2.27+): null where the library lacks them.
  Result (*memAlloc)(void** ptr, size_t size) = nullptr;
  Result (*memFree)(void* ptr) = nullptr;
  Result (*commWindowRegister)(Comm comm, void* buff, size_t size, Window* win,
                               int flags) = nullptr;
  Result (*commWindowDeregister)(Comm comm, Window win) = nullptr;
  Result (*commRegister)(Comm comm, void* buff, size_t size, void** handle) = nullptr;
  Result (*commDeregister)(Comm comm, void* handle) = nullptr;
};

// Loads libnccl.so.2 (then libnccl.so; or only the file LOOM_BENCH_NCCL names) and resolves
// every entry point. Returns nullptr with the reason in *error when any is missing.
// The library stays loaded for the life of the process.
const Api* load(std::string* error);

}  // namespace loom::bench::nccl
