// Buffers the ranks of a CUDA communicator register alone (loomCommRegister), and the peers'
// registrations as mapped into this process.
//
// A rank publishes each registration on its page of a board in host shared memory that every
// rank maps (set up at init): the registration's generation, how its memory is shared
// (SharedAllocation: a legacy IPC handle, or a cuMem export peers fetch from this rank's
// descriptor server), its offset in that memory and its size, under the slot it takes. Nothing else
// is exchanged when a buffer is registered: a call on registered buffers tells the peers (slot,
// generation, offset) of its buffers through the zero-copy kernels' arrival, and a peer's kernel
// finds that buffer in its import table (pinned host memory the kernels read). This class fills the
// table from the peers' pages: before a call that needs a peer's buffer, and from the watchdog
// every millisecond (for a kernel waiting on a registration published after its host looked).
// Registrations the peers withdrew leave the table at once but stay mapped until this rank's
// device is idle (unmapWithdrawn, at this rank's own deregistrations): cudaIpcCloseMemHandle
// waits for the kernels of this process, and one of them may be waiting for the watchdog to map
// a registration (seen on an H100: the watchdog stalled until the kernel timed out).
//
// A page entry is written as a seqlock: generation 0 while the entry changes, the registration's
// generation once it is whole; a reader that sees the generation change under it looks again.
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "base/shm_segment.hpp"
#include "device/cuda/collectives/dev_comm.hpp"
#include "device/cuda/ipc_imports.hpp"
#include "device/cuda/mapped_host_memory.hpp"
#include "device/cuda/memory_exports.hpp"

namespace loom {

class LocalRegistrations {
 public:
  // Collective (at init): sets up the board. When some rank cannot, registrations are recorded
  // but never used on every rank (usable() false, with why()). process[q] == process[rank]:
  // rank q runs in this process (empty: none does).
  LocalRegistrations(MemoryExports& exports, IpcImports& imports, int device, int rank, int nranks,
                     std::vector<int> process,
                     std::function<std::vector<std::string>(const std::string&)> allGather);
  ~LocalRegistrations();
  LocalRegistrations(const LocalRegistrations&) = delete;
  LocalRegistrations& operator=(const LocalRegistrations&) = delete;

  bool usable() const { return usable_; }
  const std::string& why() const { return why_; }

  // This rank's [ptr, ptr + bytes) as registration `id`. Throws loomInvalidArgument when the
  // memory cannot be shared with peers (see MemoryExports::share) and
  // loomInvalidUsage when kMaxRegistrations are live.
  void add(uint64_t id, void* ptr, size_t bytes);
  // Withdraws registration `id` (no kernel may use it any more: the caller waited for them).
  void remove(uint64_t id);
  bool empty() const;
  // The registration holding [ptr, ptr + bytes), as peers name it; false if none.
  bool find(const void* ptr, size_t bytes, cuda::BufferRef& ref) const;
  // Maps the registrations peers published since the last look and takes those they withdrew out
  // of the table; a few loads when nothing changed. Never waits for the device. Thread-safe.
  void refresh();
  // Unmaps the withdrawn registrations; call when no kernel of this rank runs (it would wait).
  void unmapWithdrawn();
  // [nranks][kMaxRegistrations] as the kernels address it.
  const cuda::ImportEntry* deviceTable() const { return tableOnDevice_; }
  // The context the table was registered in is gone (cudaDeviceReset): free it without CUDA.
  void abandonContext() { tableMemory_.forgetRegistration(); }

 private:
  struct Page;
  Page* page(int rank) const;
  void refreshPeer(int q);
  // Out of the table; its mapping is closed now or (later) kept for unmapWithdrawn.
  void withdrawImport(int q, int slot, bool closeNow);

  MemoryExports& exports_;
  IpcImports& imports_;
  int device_, rank_, nranks_;
  std::vector<int> process_;
  bool usable_ = false;
  std::string why_;
  ShmSegment board_;
  size_t pageStride_ = 0;  // bytes of a rank's page in board_, whole OS pages
  MappedHostMemory tableMemory_;
  cuda::ImportEntry* table_ = nullptr;  // in tableMemory_
  const cuda::ImportEntry* tableOnDevice_ = nullptr;

  struct Own {
    uint64_t id;
    char* base;
    size_t bytes;
    uint32_t slot, gen;
    SharedAllocation shared;
  };
  mutable std::mutex mutex_;
  std::vector<Own> own_;
  uint32_t nextGen_ = 1;
  std::vector<uint32_t> freeSlots_;

  struct Import {
    uint64_t gen = 0;
    SharedAllocation shared;  // kind kNone: none mapped
    uint64_t failedGen = 0;   // the generation whose mapping failed last (warned once)
    // Its next try: a failed cuMem mapping costs the owner and this rank a whole fetch, so
    // tries back off from 10 ms to 1 s instead of running at every look.
    std::chrono::steady_clock::time_point retryAt{};
    int64_t backoffMs = 0;
  };
  std::mutex refreshMutex_;
  std::vector<std::vector<Import>> imported_;  // [q][slot]
  std::vector<uint64_t> seenVersion_;          // [q]: the page version last mapped whole
  std::vector<SharedAllocation> unmapLater_;   // withdrawn imports, still mapped
};

}  // namespace loom
