// How a rank names, to the peers on its host, device memory they may map (MemoryExports makes
// one, IpcImports maps it). Two kinds, because CUDA shares memory two ways:
//   - legacy IPC: cudaMalloc'd memory travels as a cudaIpcMemHandle_t of its allocation, which
//     any process on the host can open;
//   - cuMem: memory from cuMemCreate (PyTorch's expandable segments, ncclMemAlloc) travels only
//     as POSIX file descriptors, one per physical allocation, which the owner's descriptor
//     server (bootstrap/fd_passing.hpp) hands out under `key`; a peer maps them in order into one
//     range it reserves, so a buffer spanning several physical allocations is contiguous there
//     too.
// Trivially copyable: it travels in allGather strings and on the registration board.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <string>

namespace loom {

struct SharedAllocation {
  enum Kind : uint32_t { kNone = 0, kLegacyIpc = 1, kCuMem = 2 };
  uint32_t kind = kNone;
  uint32_t owner = 0;        // kCuMem: the rank whose descriptor server holds it
  uint64_t key = 0;          // kCuMem: its key there
  uint64_t bytes = 0;        // kCuMem: the span of its physical allocations
  cudaIpcMemHandle_t ipc{};  // kLegacyIpc

  // Its bytes: equal for the same shared allocation (IpcImports opens each once).
  std::string identity() const {
    return std::string(reinterpret_cast<const char*>(this), sizeof(*this));
  }
};

static_assert(sizeof(SharedAllocation) == 24 + sizeof(cudaIpcMemHandle_t),
              "no padding: identity() compares every byte");

// The name of rank `rank`'s descriptor server, from the prefix the communicator agreed on.
inline std::string fdServerName(const std::string& prefix, int rank) {
  return prefix + "-" + std::to_string(rank);
}

}  // namespace loom
