// This rank's buffers as its peers may map them (SharedAllocation): cudaMalloc'd memory through
// its allocation's legacy IPC handle, cuMem memory (cuMemCreate with POSIX file descriptor
// handles, e.g. PyTorch's expandable segments) through the descriptors of the physical
// allocations it spans, which this rank's descriptor server hands out until the buffer is
// withdrawn. The server's name is bound at init (no other process can take it later); its
// thread starts with the first cuMem buffer, so a communicator that shares none runs none.
//
// A cuMem export retains its physical allocations (cuMemRetainAllocationHandle): the memory
// stays valid for peers that fetch it until withdraw(), even if the owner unmaps it first.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "bootstrap/fd_passing.hpp"
#include "device/cuda/cuda_driver.hpp"
#include "device/cuda/shared_allocation.hpp"

namespace loom {

class MemoryExports {
 public:
  // `servers`: the descriptor servers' name prefix, the same on every rank of the communicator.
  // `peersInProcess`: every peer lives in this process, so memory no other process could map
  // (cuMem memory without file descriptor handles) is still shared (kSameProcess).
  MemoryExports(const CudaDriver& driver, int device, int rank, std::string servers,
                bool peersInProcess);
  ~MemoryExports();
  MemoryExports(const MemoryExports&) = delete;
  MemoryExports& operator=(const MemoryExports&) = delete;

  // How peers map [ptr, ptr + bytes): `shared`, and ptr's offset in what it maps. Throws
  // loomInvalidArgument when the range is not this process's device memory (or runs past it);
  // false, with `why`, when it is but cannot be shared (from a cudaMallocAsync pool, cuMem memory
  // without POSIX file descriptor handles, or another device's).
  bool share(void* ptr, size_t bytes, SharedAllocation& shared, uint64_t& offset, std::string& why);
  // Peers that have not fetched a cuMem export yet no longer can; those that did keep their
  // mapping. Nothing to do for legacy IPC.
  void withdraw(const SharedAllocation& shared);
  // The context the exports live in is gone (cudaDeviceReset): stop serving, release nothing.
  void abandon();

 private:
  struct CuMemExport {
    std::vector<CUmemGenericAllocationHandle> chunks;  // retained, in address order
    std::vector<uint64_t> sizes;
  };
  // False with `why` empty when firstBase is not cuMem memory.
  bool shareCuMem(char* ptr, size_t bytes, char* firstBase, SharedAllocation& shared,
                  uint64_t& offset, std::string& why);
  void release(const CuMemExport& e) const;
  FdServer::Source source();

  const CudaDriver& driver_;
  int device_, rank_;
  std::string servers_;
  bool peersInProcess_;
  std::mutex mutex_;
  std::map<uint64_t, CuMemExport> exports_;
  uint64_t nextKey_ = 1;
  std::string serverWhy_;             // why server_ is null: its name could not be bound
  std::unique_ptr<FdServer> server_;  // last: stopped before the exports are released
};

}  // namespace loom
