// The CUDA backend's peer windows: one window of memory per rank that every peer's kernels can
// write, mapped into every process of the communicator.
//
// p2p: each window is device memory of its rank's GPU, exported as a CUDA IPC handle, sent over
// the bootstrap and opened by every peer (peer access enabled on the way). host: when some pair of
// GPUs cannot map each other's memory (or LOOM_CUDA_TRANSPORT=host), the windows live in one
// shared host segment, pinned and mapped into every GPU's address space instead. Kernels see
// pointers either way and do not know which.
#pragma once

#include <cstddef>
#include <functional>
#include <string>
#include <vector>

#include "base/shm_segment.hpp"

namespace loom {

enum class CudaTransport { kAuto, kP2P, kHost };

// Reads LOOM_CUDA_TRANSPORT (auto, p2p, host); throws loomInvalidArgument for other values.
CudaTransport cudaTransportFromEnv();

struct PeerWindowsSetup {
  int rank = 0;
  int nranks = 1;
  size_t windowBytes = 0;
  CudaTransport transport = CudaTransport::kAuto;
  // All-gather of one string per rank over the communicator's bootstrap.
  std::function<std::vector<std::string>(const std::string&)> allGather;
};

class PeerWindows {
 public:
  PeerWindows() = default;
  PeerWindows(const PeerWindows&) = delete;
  PeerWindows& operator=(const PeerWindows&) = delete;
  ~PeerWindows();

  // Collective: every rank of the communicator calls it with the same windowBytes. The current
  // CUDA device must be this rank's. Zero-fills this rank's window before any peer can write it.
  void setUp(const PeerWindowsSetup& setup);

  char* window(int rank) const { return windows_[rank]; }  // usable by this rank's kernels
  bool viaHost() const { return viaHost_; }
  const char* transportName() const { return viaHost_ ? "host" : "p2p"; }

 private:
  bool tryPeerToPeer(const PeerWindowsSetup& setup);
  void setUpHost(const PeerWindowsSetup& setup);
  void closePeerMappings();

  int rank_ = 0;
  std::vector<char*> windows_;
  std::vector<bool> opened_;  // windows_[q] came from cudaIpcOpenMemHandle
  char* own_ = nullptr;       // cudaMalloc'd window (p2p)
  bool viaHost_ = false;
  ShmSegment hostSegment_;
  bool registered_ = false;
};

}  // namespace loom
