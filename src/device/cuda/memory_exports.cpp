#include "device/cuda/memory_exports.hpp"

#include <cuda_runtime.h>

#include "base/error.hpp"

namespace loom {

MemoryExports::MemoryExports(const CudaDriver& driver, int device, int rank, std::string servers,
                             bool peersInProcess)
    : driver_(driver),
      device_(device),
      rank_(rank),
      servers_(std::move(servers)),
      peersInProcess_(peersInProcess) {
  try {
    server_ = std::make_unique<FdServer>(fdServerName(servers_, rank_), source());
  } catch (const Error& e) {
    // Legacy IPC needs no server: only cuMem buffers are refused, with this reason.
    serverWhy_ = e.what();
  }
}

MemoryExports::~MemoryExports() {
  server_.reset();
  for (auto& [key, e] : exports_) release(e);
}

void MemoryExports::abandon() {
  server_.reset();
  std::lock_guard<std::mutex> lock(mutex_);
  exports_.clear();
}

bool MemoryExports::share(void* ptr, size_t bytes, SharedAllocation& shared, uint64_t& offset,
                          std::string& why) {
  char* p = static_cast<char*>(ptr);
  char* base = nullptr;
  size_t size = 0;
  driver_.allocationOf(ptr, base, size);
  shared = SharedAllocation{};
  shared.device = device_;
  why.clear();
  cudaError_t err = cudaIpcGetMemHandle(&shared.ipc, base);
  if (err == cudaSuccess) {
    LOOM_CHECK_ARG(p + bytes <= base + size, "the buffer runs past the end of its allocation");
    shared.kind = SharedAllocation::kLegacyIpc;
    shared.address = reinterpret_cast<uint64_t>(base);
    shared.bytes = size;
    offset = static_cast<uint64_t>(p - base);
    return true;
  }
  cudaGetLastError();
  if (driver_.vmm().available() && shareCuMem(p, bytes, base, shared, offset, why)) return true;
  if (why.empty())  // not cuMem memory either
    why = std::string("its memory cannot be shared with peers (cudaIpcGetMemHandle: ") +
          cudaGetErrorString(err) +
          "); use memory from loomMemAlloc, cudaMalloc or cuMemCreate with POSIX file "
          "descriptor handles, not from cudaMallocAsync pools";
  return false;
}

bool MemoryExports::shareCuMem(char* ptr, size_t bytes, char* firstBase, SharedAllocation& shared,
                               uint64_t& offset, std::string& why) {
  const CudaDriver::Vmm& vmm = driver_.vmm();
  CuMemExport e;
  bool withoutDescriptors = false;
  // Every physical allocation the buffer touches, in address order; they must follow each other
  // without a hole.
  uint64_t span = 0;
  for (char* at = firstBase; at < ptr + bytes || e.chunks.empty();) {
    char* base = nullptr;
    size_t size = 0;
    CUmemGenericAllocationHandle h{};
    if (!driver_.addressRange(at, base, size) || base != at) {
      release(e);
      LOOM_THROW(loomInvalidArgument, "the buffer runs past the end of its mapped memory (at ",
                 static_cast<void*>(at), ")");
    }
    if (vmm.retainAllocationHandle(&h, at) != CUDA_SUCCESS) {
      // At the first allocation: no cuMem memory at all (share() says why); later, the buffer
      // runs on into other memory.
      if (e.chunks.empty()) return false;
      release(e);
      LOOM_THROW(loomInvalidArgument, "the buffer runs from cuMem memory into other memory (at ",
                 static_cast<void*>(at), ")");
    }
    e.chunks.push_back(h);
    e.sizes.push_back(size);
    CUmemAllocationProp prop{};
    const bool known = vmm.getAllocationProperties(&prop, h) == CUDA_SUCCESS;
    if (known &&
        (prop.location.type != CU_MEM_LOCATION_TYPE_DEVICE || prop.location.id != device_)) {
      release(e);
      why = "its cuMem memory lives on another device than the communicator's (" +
            std::to_string(device_) + ")";
      return false;
    }
    if (!known || (prop.requestedHandleTypes & CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR) == 0) {
      // No other process can map it; ranks of this one can, by its address.
      if (known && peersInProcess_) {
        withoutDescriptors = true;
      } else {
        release(e);
        why =
            "its cuMem memory cannot be shared with peers: it was created without "
            "CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR in requestedHandleTypes";
        return false;
      }
    }
    span += size;
    at = base + size;
  }
  shared.address = reinterpret_cast<uint64_t>(firstBase);
  shared.bytes = span;
  shared.cuMem = 1;
  offset = static_cast<uint64_t>(ptr - firstBase);
  if (withoutDescriptors) {
    // Nothing to serve or retain: the peers use the owner's own mapping, by its address.
    release(e);
    shared.kind = SharedAllocation::kSameProcess;
    return true;
  }
  std::lock_guard<std::mutex> lock(mutex_);
  if (server_ == nullptr) {
    release(e);
    why = "its cuMem memory cannot be shared: " + serverWhy_;
    return false;
  }
  server_->start();
  shared.kind = SharedAllocation::kCuMem;
  shared.owner = static_cast<uint32_t>(rank_);
  shared.key = nextKey_++;
  exports_.emplace(shared.key, std::move(e));
  return true;
}

void MemoryExports::withdraw(const SharedAllocation& shared) {
  if (shared.kind != SharedAllocation::kCuMem) return;
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = exports_.find(shared.key);
  if (it == exports_.end()) return;
  release(it->second);
  exports_.erase(it);
}

void MemoryExports::release(const CuMemExport& e) const {
  for (CUmemGenericAllocationHandle h : e.chunks) driver_.vmm().release(h);
}

FdServer::Source MemoryExports::source() {
  FdServer::Source s;
  s.describe = [this](uint64_t key, std::string& payload, size_t& count) {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = exports_.find(key);
    if (it == exports_.end()) return false;
    const std::vector<uint64_t>& sizes = it->second.sizes;
    payload.assign(reinterpret_cast<const char*>(sizes.data()), sizes.size() * sizeof(uint64_t));
    count = sizes.size();
    return true;
  };
  s.open = [this](uint64_t key, size_t index, std::string& why) {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = exports_.find(key);
    if (it == exports_.end() || index >= it->second.chunks.size()) {
      why = "the buffer was deregistered meanwhile";
      return -1;
    }
    // The runtime makes the device's primary context current on this thread.
    cudaSetDevice(device_);
    int fd = -1;
    const CUresult r = driver_.vmm().exportToShareableHandle(
        &fd, it->second.chunks[index], CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0);
    if (r != CUDA_SUCCESS) {
      why = "cuMemExportToShareableHandle: error " + std::to_string(r);
      return -1;
    }
    return fd;
  };
  return s;
}

}  // namespace loom
