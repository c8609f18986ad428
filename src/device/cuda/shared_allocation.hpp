// How a rank names, to the peers on its host, device memory they may map (MemoryExports makes
// one, IpcImports maps it). Three kinds, because CUDA shares memory three ways:
//   - legacy IPC: cudaMalloc'd memory travels as a cudaIpcMemHandle_t of its allocation, which
//     any process on the host can open;
//   - cuMem: memory from cuMemCreate (PyTorch's expandable segments, ncclMemAlloc) travels only
//     as POSIX file descriptors, one per physical allocation, which the owner's descriptor
//     server (bootstrap/fd_passing.hpp) hands out under `key`; a peer maps them in order into one
//     range it reserves, so a buffer spanning several physical allocations is contiguous there
//     too;
//   - same process: cuMem memory made without file descriptor handles, which only the owner's
//     own process can reach (a communicator whose ranks all live in one process).
// Every kind also carries the memory's address and device in the owner's process: a peer in that
// same process (one process driving several GPUs) uses the address as it is, with peer access
// from its GPU (cudaDeviceEnablePeerAccess for cudaMalloc memory, cuMemSetAccess for cuMem
// memory), since CUDA IPC cannot open a handle its own process exported.
// Trivially copyable: it travels in allGather strings and on the registration board.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <string>

namespace loom {

struct SharedAllocation {
  enum Kind : uint32_t { kNone = 0, kLegacyIpc = 1, kCuMem = 2, kSameProcess = 3 };
  uint32_t kind = kNone;
  uint32_t owner = 0;        // kCuMem: the rank whose descriptor server holds it
  uint64_t key = 0;          // kCuMem: its key there
  uint64_t bytes = 0;        // the span of its allocations (kCuMem, kSameProcess: physical ones)
  cudaIpcMemHandle_t ipc{};  // kLegacyIpc
  uint64_t address = 0;      // where it starts in the owner's process
  int32_t device = -1;       // the owner's CUDA device
  uint32_t cuMem = 0;        // 1: cuMem memory (access granted with cuMemSetAccess)

  // Its bytes: equal for the same shared allocation (IpcImports opens each once).
  std::string identity() const {
    return std::string(reinterpret_cast<const char*>(this), sizeof(*this));
  }
};

static_assert(sizeof(SharedAllocation) == 24 + sizeof(cudaIpcMemHandle_t) + 16,
              "no padding: identity() compares every byte");

// The name of rank `rank`'s descriptor server, from the prefix the communicator agreed on.
inline std::string fdServerName(const std::string& prefix, int rank) {
  return prefix + "-" + std::to_string(rank);
}

}  // namespace loom
