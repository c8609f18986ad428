// Buffers the ranks of a CUDA communicator registered together as a window
// (loomCommWindowRegister): every rank's part mapped into every process through CUDA IPC (or, for
// a rank of this same process, used at its own address with peer access), so the zero-copy
// kernels and the copy-engine collectives address a peer's buffer directly.
//
// A part may start anywhere inside an allocation: what travels is how its memory is shared
// (SharedAllocation, from MemoryExports) and the part's offset in it (opened through IpcImports,
// once per process).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "device/cuda/collectives/dev_comm.hpp"
#include "device/cuda/ipc_imports.hpp"
#include "device/cuda/memory_exports.hpp"

namespace loom {

struct UserWindow {
  uint64_t id = 0;
  char* base = nullptr;  // this rank's part
  size_t bytes = 0;
  char* part[cuda::kMaxRanks] = {};  // every rank's part as mapped here (part[rank] == base)
};

class UserWindows {
 public:
  // process[q] == process[rank]: rank q runs in this process (empty: none does).
  UserWindows(MemoryExports& exports, IpcImports& imports, int rank, int nranks,
              std::vector<int> process,
              std::function<std::vector<std::string>(const std::string&)> allGather);
  ~UserWindows();
  UserWindows(const UserWindows&) = delete;
  UserWindows& operator=(const UserWindows&) = delete;

  // Collective. False on every rank, with why, when some rank's part cannot be mapped by some
  // peer (nothing stays open then).
  bool add(uint64_t id, void* ptr, size_t bytes, std::string& why);
  // Collective, after this rank's device work is finished: closes the peers' parts and returns
  // once every rank has closed this rank's (at once when every peer is in this process: none maps
  // it).
  void remove(uint64_t id);
  bool empty() const { return windows_.empty(); }
  // The window whose part holds [ptr, ptr + bytes), and ptr's offset in it; null if none.
  const UserWindow* find(const void* ptr, size_t bytes, size_t& offset) const;

 private:
  MemoryExports& exports_;
  IpcImports& imports_;
  int rank_, nranks_;
  std::vector<int> process_;
  std::function<std::vector<std::string>(const std::string&)> allGather_;
  // Of windows_: this rank's part as shared, and each peer's as opened here (kNone: not opened).
  struct Sharing {
    SharedAllocation mine;
    std::vector<SharedAllocation> peers;
  };
  void closePeers(const Sharing& s);
  std::vector<UserWindow> windows_;
  std::vector<Sharing> sharing_;
};

}  // namespace loom
