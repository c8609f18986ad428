// Peers' memory mapped into this process (SharedAllocation), shared by windows
// (user_windows.hpp) and local registrations (local_registrations.hpp):
//   - legacy IPC: CUDA refuses a second open of one handle in a process, so an allocation is
//     opened once, however many windows and registrations lie in it, and closed with the last;
//   - cuMem: the owner's descriptor server hands out one file descriptor per physical
//     allocation; each is imported and mapped in order into a range reserved here, with read and
//     write access for this rank's device, and the descriptor closed at once (the mapping keeps
//     the memory). Unmapped, and the range freed, with the last user;
//   - an owner in this same process: its address as it is, once this rank's device may reach the
//     owner's (cudaDeviceEnablePeerAccess for cudaMalloc memory, cuMemSetAccess for cuMem memory;
//     neither is undone: peer access is the process's, and the owner's mapping is the owner's).
// Thread-safe: the watchdog maps registrations while the caller's thread registers windows; a
// cuMem fetch runs outside the lock.
#pragma once

#include <cstddef>
#include <map>
#include <mutex>
#include <string>

#include "device/cuda/cuda_driver.hpp"
#include "device/cuda/shared_allocation.hpp"

namespace loom {

class IpcImports {
 public:
  // `servers`: the descriptor servers' name prefix, the same on every rank of the communicator.
  IpcImports(const CudaDriver& driver, int device, std::string servers);
  ~IpcImports();
  IpcImports(const IpcImports&) = delete;
  IpcImports& operator=(const IpcImports&) = delete;

  // `shared` as mapped here; null, with `why`, when it cannot be mapped. `sameProcess`: its owner
  // runs in this process. The current device must be this rank's.
  char* open(const SharedAllocation& shared, bool sameProcess, std::string* why = nullptr);
  // One use of `shared` fewer; unmapped with its last.
  void close(const SharedAllocation& shared);
  // The context the mappings live in is gone (cudaDeviceReset): forget them, unmap nothing.
  void abandon();

 private:
  struct Opened {
    char* base;
    int users;
    SharedAllocation shared;
    bool direct;  // the owner's own address (same process): nothing to unmap
  };
  char* mapCuMem(const SharedAllocation& shared, std::string& why);
  // The owner's address, reachable from this rank's device; null with `why`.
  char* reachInProcess(const SharedAllocation& shared, std::string& why);
  void unmap(const Opened& o);

  const CudaDriver& driver_;
  int device_;
  std::string servers_;
  std::mutex mutex_;
  std::map<std::string, Opened> opened_;  // by SharedAllocation::identity()
};

}  // namespace loom
