#include "device/cuda/peer_windows.hpp"

#include <cuda_runtime.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>

#include "base/env.hpp"
#include "base/log.hpp"
#include "device/cuda/cuda_check.hpp"
#include "device/cuda/cuda_env.hpp"

namespace loom {

CudaTransport cudaTransportFromEnv() {
  const std::string v = env::cudaTransport();
  if (v.empty() || v == "auto") return CudaTransport::kAuto;
  if (v == "p2p") return CudaTransport::kP2P;
  if (v == "host") return CudaTransport::kHost;
  LOOM_THROW(loomInvalidArgument, "LOOM_CUDA_TRANSPORT='", v, "': expected auto, p2p or host");
}

PeerWindows::~PeerWindows() {
  closePeerMappings();
  if (own_ != nullptr) cudaFree(own_);
  if (registered_) cudaHostUnregister(hostSegment_.data());
}

void PeerWindows::abandon() {
  opened_.assign(opened_.size(), false);
  own_ = nullptr;
  registered_ = false;
}

void PeerWindows::closePeerMappings() {
  for (size_t q = 0; q < windows_.size(); ++q)
    if (q < opened_.size() && opened_[q]) cudaIpcCloseMemHandle(windows_[q]);
  opened_.assign(opened_.size(), false);
}

std::string PeerWindows::describe() const {
  if (viaHost_) return "host";
  int ipc = 0;
  for (bool o : opened_) ipc += o ? 1 : 0;
  return "p2p (" + std::to_string(direct_) + " peers in this process directly, " +
         std::to_string(ipc) + " through CUDA IPC)";
}

void PeerWindows::setUp(const PeerWindowsSetup& setup) {
  rank_ = setup.rank;
  windows_.assign(setup.nranks, nullptr);
  opened_.assign(setup.nranks, false);
  if (setup.transport != CudaTransport::kHost && tryPeerToPeer(setup)) return;
  LOOM_CHECK_ARG(setup.transport != CudaTransport::kP2P,
                 "LOOM_CUDA_TRANSPORT=p2p, but some GPUs of this communicator cannot map each "
                 "other's memory");
  setUpHost(setup);
}

namespace {

// What a rank publishes for its window: the IPC handle (peers in other processes), and the
// address and device (peers in its own process).
struct WindowRecord {
  cudaIpcMemHandle_t ipc;
  uint64_t address;
  int32_t device;
  int32_t pad;
};

}  // namespace

std::string PeerWindows::mapInProcess(const PeerWindowsSetup& setup, int q, char* address,
                                      int device) {
  if (device != setup.device) {
    int can = 0;
    cudaError_t err = cudaDeviceCanAccessPeer(&can, setup.device, device);
    if (err != cudaSuccess || can == 0) {
      cudaGetLastError();
      return "rank " + std::to_string(q) + " (same process): GPU " + std::to_string(setup.device) +
             " has no peer access to GPU " + std::to_string(device);
    }
    // Per pair of devices, for the whole process: a second enable (another communicator, the
    // user's own) says so, which is no failure.
    err = cudaDeviceEnablePeerAccess(device, 0);
    if (err != cudaSuccess && err != cudaErrorPeerAccessAlreadyEnabled) {
      cudaGetLastError();
      return "rank " + std::to_string(q) + " (same process): cudaDeviceEnablePeerAccess(" +
             std::to_string(device) + ") from GPU " + std::to_string(setup.device) + ": " +
             cudaGetErrorString(err);
    }
    cudaGetLastError();
  }
  windows_[q] = address;
  ++direct_;
  return "";
}

bool PeerWindows::tryPeerToPeer(const PeerWindowsSetup& setup) {
  LOOM_CUDA_CHECK(cudaMalloc(&own_, setup.windowBytes));
  LOOM_CUDA_CHECK(cudaMemset(own_, 0, setup.windowBytes));
  LOOM_CUDA_CHECK(cudaDeviceSynchronize());
  WindowRecord mine{};
  LOOM_CUDA_CHECK(cudaIpcGetMemHandle(&mine.ipc, own_));
  mine.address = reinterpret_cast<uint64_t>(own_);
  mine.device = setup.device;
  std::vector<std::string> records =
      setup.allGather(std::string(reinterpret_cast<const char*>(&mine), sizeof(mine)));
  windows_[rank_] = own_;
  std::string failure;
  for (int q = 0; q < setup.nranks && failure.empty(); ++q) {
    if (q == rank_) continue;
    if (records[q].size() != sizeof(WindowRecord))
      LOOM_THROW(loomInternalError, "rank ", q, " sent a malformed window record");
    WindowRecord peer{};
    std::memcpy(static_cast<void*>(&peer), records[q].data(), sizeof(peer));
    const bool sameProcess = !setup.process.empty() && setup.process[q] == setup.process[rank_];
    if (sameProcess) {
      failure = mapInProcess(setup, q, reinterpret_cast<char*>(peer.address), peer.device);
      continue;
    }
    void* mapped = nullptr;
    cudaError_t err = cudaIpcOpenMemHandle(&mapped, peer.ipc, cudaIpcMemLazyEnablePeerAccess);
    if (err != cudaSuccess) {
      cudaGetLastError();
      failure = "rank " + std::to_string(q) + ": " + cudaGetErrorString(err);
      break;
    }
    windows_[q] = static_cast<char*>(mapped);
    opened_[q] = true;
  }
  // Every rank must take the same path: one pair that cannot map sends everyone to host memory.
  std::vector<std::string> outcomes = setup.allGather(failure.empty() ? "ok" : failure);
  std::string firstFailure;
  for (int q = 0; q < setup.nranks && firstFailure.empty(); ++q)
    if (outcomes[q] != "ok")
      firstFailure = "rank " + std::to_string(q) + " could not map " + outcomes[q];
  if (firstFailure.empty()) return true;
  LOOM_WARN(kSubsysInit, rank_, "GPU peer memory unavailable (", firstFailure,
            "); using pinned host memory");
  closePeerMappings();
  cudaFree(own_);
  own_ = nullptr;
  direct_ = 0;
  windows_.assign(setup.nranks, nullptr);
  return false;
}

void PeerWindows::setUpHost(const PeerWindowsSetup& setup) {
  viaHost_ = true;
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  const size_t stride = (setup.windowBytes + page - 1) / page * page;
  const size_t total = stride * setup.nranks;
  std::string name;
  if (rank_ == 0) {
    name = ShmSegment::uniqueName("/loom-cuda-");
    hostSegment_ = ShmSegment::create(name, total);
  }
  name = setup.allGather(name)[0];
  if (rank_ != 0) hostSegment_ = ShmSegment::open(name, total);
  std::memset(hostSegment_.data() + stride * rank_, 0, setup.windowBytes);
  LOOM_CUDA_CHECK(cudaHostRegister(hostSegment_.data(), total,
                                   cudaHostRegisterMapped | cudaHostRegisterPortable));
  registered_ = true;
  void* devicePtr = nullptr;
  LOOM_CUDA_CHECK(cudaHostGetDevicePointer(&devicePtr, hostSegment_.data(), 0));
  for (int q = 0; q < setup.nranks; ++q) windows_[q] = static_cast<char*>(devicePtr) + stride * q;
  setup.allGather("");  // every rank mapped the segment and zeroed its window
  if (rank_ == 0) hostSegment_.unlink();
}

}  // namespace loom
