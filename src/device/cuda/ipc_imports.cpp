#include "device/cuda/ipc_imports.hpp"

#include <cuda_runtime.h>

#include <cstring>
#include <vector>

#include "bootstrap/fd_passing.hpp"

namespace loom {

namespace {

// Bounds a whole fetch from a peer's descriptor server, mapping included: a live server answers
// in microseconds, and mapping a thousand allocations takes tens of milliseconds.
constexpr int kFetchTimeoutMs = 5000;

}  // namespace

IpcImports::IpcImports(const CudaDriver& driver, int device, std::string servers)
    : driver_(driver), device_(device), servers_(std::move(servers)) {}

IpcImports::~IpcImports() {
  for (auto& [identity, o] : opened_) unmap(o);
}

void IpcImports::abandon() {
  std::lock_guard<std::mutex> lock(mutex_);
  opened_.clear();
}

char* IpcImports::reachInProcess(const SharedAllocation& shared, std::string& why) {
  if (shared.address == 0) {
    why = "the owner sent no address";
    return nullptr;
  }
  char* base = reinterpret_cast<char*>(shared.address);
  if (shared.device == device_) return base;
  int can = 0;
  cudaError_t err = cudaDeviceCanAccessPeer(&can, device_, shared.device);
  if (err != cudaSuccess || can == 0) {
    cudaGetLastError();
    why = "GPU " + std::to_string(device_) + " has no peer access to GPU " +
          std::to_string(shared.device) + " (same process)";
    return nullptr;
  }
  if (shared.cuMem != 0) {
    // cuMem memory is reachable from the devices its mapping grants: add this one.
    CUmemAccessDesc access{};
    access.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    access.location.id = device_;
    access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    const CUresult r =
        driver_.vmm().available()
            ? driver_.vmm().setAccess(reinterpret_cast<CUdeviceptr>(base), shared.bytes, &access, 1)
            : CUDA_ERROR_NOT_SUPPORTED;
    if (r != CUDA_SUCCESS) {
      why = "cuMemSetAccess for GPU " + std::to_string(device_) + ": error " + std::to_string(r);
      return nullptr;
    }
    return base;
  }
  // Per pair of devices, for the whole process; a second enable is no failure.
  err = cudaDeviceEnablePeerAccess(shared.device, 0);
  if (err != cudaSuccess && err != cudaErrorPeerAccessAlreadyEnabled) {
    cudaGetLastError();
    why = std::string("cudaDeviceEnablePeerAccess: ") + cudaGetErrorString(err);
    return nullptr;
  }
  cudaGetLastError();
  return base;
}

char* IpcImports::open(const SharedAllocation& shared, bool sameProcess, std::string* why) {
  const std::string identity = shared.identity();
  std::string failure;
  char* mapped = nullptr;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = opened_.find(identity);
    if (it != opened_.end()) {
      it->second.users += 1;
      return it->second.base;
    }
    if (sameProcess) {
      mapped = reachInProcess(shared, failure);
      if (mapped != nullptr) {
        opened_[identity] = Opened{mapped, 1, shared, true};
        return mapped;
      }
    } else if (shared.kind == SharedAllocation::kSameProcess) {
      failure = "its memory can be reached only from its owner's process";
    } else if (shared.kind == SharedAllocation::kLegacyIpc) {
      // Under the lock: CUDA refuses a second open of the handle in this process.
      void* p = nullptr;
      cudaError_t err = cudaIpcOpenMemHandle(&p, shared.ipc, cudaIpcMemLazyEnablePeerAccess);
      if (err == cudaSuccess) {
        mapped = static_cast<char*>(p);
        opened_[identity] = Opened{mapped, 1, shared, false};
        return mapped;
      }
      cudaGetLastError();
      failure = std::string("cudaIpcOpenMemHandle: ") + cudaGetErrorString(err);
    } else if (shared.kind != SharedAllocation::kCuMem) {
      failure = "malformed shared allocation (kind " + std::to_string(shared.kind) + ")";
    }
  }
  if (!sameProcess && shared.kind == SharedAllocation::kCuMem) {
    // Outside the lock: the fetch waits for the owner, and the other threads' opens and closes
    // must not wait behind it. Two threads may map the same allocation at once (cuMem allows
    // it); the second keeps the first's mapping and unmaps its own.
    mapped = mapCuMem(shared, failure);
    if (mapped != nullptr) {
      Opened mine{mapped, 1, shared, false};
      {
        std::lock_guard<std::mutex> lock(mutex_);
        auto [it, inserted] = opened_.emplace(identity, mine);
        if (!inserted) {
          it->second.users += 1;
          mapped = it->second.base;
        }
      }
      if (mapped != mine.base) unmap(mine);
      return mapped;
    }
  }
  if (why != nullptr) *why = failure;
  return nullptr;
}

char* IpcImports::mapCuMem(const SharedAllocation& shared, std::string& why) {
  const CudaDriver::Vmm& vmm = driver_.vmm();
  if (!vmm.available()) {
    why = "this CUDA driver has no cuMem entry points";
    return nullptr;
  }
  CUdeviceptr range = 0;
  if (vmm.addressReserve(&range, shared.bytes, 0, 0, 0) != CUDA_SUCCESS) {
    why = "cuMemAddressReserve of " + std::to_string(shared.bytes) + " bytes failed";
    return nullptr;
  }
  std::vector<uint64_t> sizes;
  uint64_t mappedBytes = 0;
  std::string payload;
  const bool fetched = fetchFds(
      fdServerName(servers_, static_cast<int>(shared.owner)), shared.key, kFetchTimeoutMs, payload,
      [&](size_t index, int fd, std::string& reason) {
        if (index == 0) {
          sizes.resize(payload.size() / sizeof(uint64_t));
          std::memcpy(sizes.data(), payload.data(), sizes.size() * sizeof(uint64_t));
          uint64_t total = 0;
          for (uint64_t s : sizes) total += s;
          if (total != shared.bytes || sizes.size() * sizeof(uint64_t) != payload.size()) {
            reason = "the owner described " + std::to_string(total) + " bytes, not " +
                     std::to_string(shared.bytes);
            return false;
          }
        }
        if (index >= sizes.size()) {
          reason = "more descriptors than allocations";
          return false;
        }
        CUmemGenericAllocationHandle h{};
        CUresult r =
            vmm.importFromShareableHandle(&h, reinterpret_cast<void*>(static_cast<uintptr_t>(fd)),
                                          CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
        if (r != CUDA_SUCCESS) {
          reason = "cuMemImportFromShareableHandle: error " + std::to_string(r);
          return false;
        }
        r = vmm.map(range + mappedBytes, sizes[index], 0, h, 0);
        // The mapping holds the memory from here on.
        vmm.release(h);
        if (r != CUDA_SUCCESS) {
          reason = "cuMemMap: error " + std::to_string(r);
          return false;
        }
        mappedBytes += sizes[index];
        return true;
      },
      why);
  bool ok = fetched && mappedBytes == shared.bytes;
  if (fetched && !ok) why = "the owner sent fewer allocations than it described";
  if (ok) {
    CUmemAccessDesc access{};
    access.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    access.location.id = device_;
    access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    const CUresult r = vmm.setAccess(range, shared.bytes, &access, 1);
    if (r != CUDA_SUCCESS) {
      why = "cuMemSetAccess: error " + std::to_string(r);
      ok = false;
    }
  }
  if (!ok) {
    if (mappedBytes > 0) vmm.unmap(range, mappedBytes);
    vmm.addressFree(range, shared.bytes);
    return nullptr;
  }
  return reinterpret_cast<char*>(range);
}

void IpcImports::close(const SharedAllocation& shared) {
  Opened o{};
  {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = opened_.find(shared.identity());
    if (it == opened_.end() || --it->second.users > 0) return;
    o = it->second;
    opened_.erase(it);
  }
  // Outside the lock: the close waits for this process's kernels, and the watchdog must be
  // able to open other peers' memory meanwhile (a kernel may be waiting for it).
  unmap(o);
}

void IpcImports::unmap(const Opened& o) {
  if (o.direct) return;
  if (o.shared.kind == SharedAllocation::kLegacyIpc) {
    cudaIpcCloseMemHandle(o.base);
  } else {
    const CUdeviceptr range = reinterpret_cast<CUdeviceptr>(o.base);
    driver_.vmm().unmap(range, o.shared.bytes);
    driver_.vmm().addressFree(range, o.shared.bytes);
  }
}

}  // namespace loom
