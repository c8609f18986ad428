#include "device/cuda/ipc_imports.hpp"

#include <cuda_runtime.h>

#include <cstring>

namespace loom {

IpcImports::~IpcImports() {
  for (auto& [handle, o] : opened_) cudaIpcCloseMemHandle(o.base);
}

char* IpcImports::open(const std::string& handle, std::string* why) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = opened_.find(handle);
  if (it != opened_.end()) {
    it->second.users += 1;
    return it->second.base;
  }
  cudaIpcMemHandle_t h{};
  if (handle.size() != sizeof(h)) {
    if (why != nullptr) *why = "malformed IPC handle";
    return nullptr;
  }
  std::memcpy(&h, handle.data(), sizeof(h));
  void* mapped = nullptr;
  cudaError_t err = cudaIpcOpenMemHandle(&mapped, h, cudaIpcMemLazyEnablePeerAccess);
  if (err != cudaSuccess) {
    cudaGetLastError();
    if (why != nullptr) *why = std::string("cudaIpcOpenMemHandle: ") + cudaGetErrorString(err);
    return nullptr;
  }
  opened_[handle] = Opened{static_cast<char*>(mapped), 1};
  return static_cast<char*>(mapped);
}

void IpcImports::close(const std::string& handle) {
  char* base = nullptr;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = opened_.find(handle);
    if (it == opened_.end() || --it->second.users > 0) return;
    base = it->second.base;
    opened_.erase(it);
  }
  // Outside the lock: the close waits for this process's kernels, and the watchdog must be
  // able to open other peers' memory meanwhile (a kernel may be waiting for it).
  cudaIpcCloseMemHandle(base);
}

}  // namespace loom
