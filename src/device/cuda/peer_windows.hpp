// The CUDA backend's peer windows: one window of memory per rank that every peer's kernels can
// write, mapped into every process of the communicator.
//
// p2p: each window is device memory of its rank's GPU, exported as a CUDA IPC handle, sent over
// the bootstrap and opened by every peer (peer access enabled on the way); a peer in this same
// process (one process driving several GPUs) uses the window's own address instead, with peer
// access from this rank's GPU to the peer's (CUDA IPC cannot open a handle its own process
// exported). host: when some pair of
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
  int device = 0;  // this rank's CUDA device (current while setUp runs)
  // process[q] == process[rank]: rank q runs in this process (empty: none does).
  std::vector<int> process;
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
  // "p2p" or "host", and how the peers' windows were mapped ("p2p (3 peers in this process
  // directly, 0 through CUDA IPC)").
  std::string describe() const;
  // The context that held the windows is gone (cudaDeviceReset): free nothing through CUDA.
  void abandon();

 private:
  bool tryPeerToPeer(const PeerWindowsSetup& setup);
  // Rank q's window `address` on `device`, a peer of this process: usable as it is once this
  // rank's device may access `device`. Empty, or why not.
  std::string mapInProcess(const PeerWindowsSetup& setup, int q, char* address, int device);
  void setUpHost(const PeerWindowsSetup& setup);
  void closePeerMappings();

  int rank_ = 0;
  std::vector<char*> windows_;
  std::vector<bool> opened_;  // windows_[q] came from cudaIpcOpenMemHandle
  int direct_ = 0;            // peers of this process whose windows are used as they are
  char* own_ = nullptr;       // cudaMalloc'd window (p2p)
  bool viaHost_ = false;
  ShmSegment hostSegment_;
  bool registered_ = false;
};

}  // namespace loom
