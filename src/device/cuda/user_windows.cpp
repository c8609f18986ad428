#include "device/cuda/user_windows.hpp"

#include <cuda_runtime.h>

#include <cstring>

#include "base/error.hpp"
#include "device/cuda/cuda_check.hpp"

namespace loom {

namespace {

// What a rank publishes for its part: how its memory is shared, the part's offset in it and its
// size.
struct PartRecord {
  SharedAllocation shared;
  uint64_t offset;
  uint64_t bytes;
};

}  // namespace

UserWindows::UserWindows(MemoryExports& exports, IpcImports& imports, int rank, int nranks,
                         std::vector<int> process,
                         std::function<std::vector<std::string>(const std::string&)> allGather)
    : exports_(exports),
      imports_(imports),
      rank_(rank),
      nranks_(nranks),
      process_(std::move(process)),
      allGather_(std::move(allGather)) {}

UserWindows::~UserWindows() {
  for (const Sharing& s : sharing_) {
    closePeers(s);
    exports_.withdraw(s.mine);
  }
}

void UserWindows::closePeers(const Sharing& s) {
  for (const SharedAllocation& peer : s.peers)
    if (peer.kind != SharedAllocation::kNone) imports_.close(peer);
}

bool UserWindows::add(uint64_t id, void* ptr, size_t bytes, std::string& why) {
  // A bad part is still taken through both exchanges, so that every rank fails the same way
  // instead of leaving its peers waiting.
  std::string badArgument, failure;
  PartRecord mine{};
  try {
    exports_.share(ptr, bytes, mine.shared, mine.offset, failure);
  } catch (const Error& e) {
    badArgument = e.what();
  }
  mine.bytes = bytes;
  std::vector<std::string> records =
      allGather_(std::string(reinterpret_cast<const char*>(&mine), sizeof(mine)));

  UserWindow w;
  w.id = id;
  w.base = static_cast<char*>(ptr);
  w.bytes = bytes;
  Sharing sharing;
  sharing.mine = mine.shared;
  sharing.peers.resize(nranks_);
  for (int q = 0; q < nranks_ && badArgument.empty() && failure.empty(); ++q) {
    PartRecord r{};
    if (records[q].size() != sizeof(r))
      LOOM_THROW(loomInternalError, "rank ", q, " sent a malformed window record");
    std::memcpy(static_cast<void*>(&r), records[q].data(), sizeof(r));
    if (r.bytes != bytes) {
      badArgument = "rank " + std::to_string(q) + " registered " + std::to_string(r.bytes) +
                    " bytes and this rank " + std::to_string(bytes) +
                    " (a window has the same size on every rank)";
      break;
    }
    if (q == rank_) {
      w.part[q] = w.base;
      continue;
    }
    std::string reason;
    const bool sameProcess = !process_.empty() && process_[q] == process_[rank_];
    char* mapped = imports_.open(r.shared, sameProcess, &reason);
    if (mapped == nullptr) {
      failure = "rank " + std::to_string(q) + "'s part could not be mapped (" + reason + ")";
      break;
    }
    sharing.peers[q] = r.shared;
    w.part[q] = mapped + r.offset;
  }
  // Every rank must agree: a bad argument anywhere fails the call everywhere; a part that some
  // peer cannot reach leaves the window unused by all.
  std::vector<std::string> outcomes = allGather_(!badArgument.empty() ? "argument: " + badArgument
                                                 : failure.empty()    ? "ok"
                                                                      : failure);
  std::string argumentError;
  why.clear();
  for (int q = 0; q < nranks_; ++q) {
    const std::string& o = outcomes[q];
    if (o.rfind("argument: ", 0) == 0 && argumentError.empty())
      argumentError = "rank " + std::to_string(q) + ": " + o.substr(10);
    else if (o != "ok" && why.empty())
      why = "on rank " + std::to_string(q) + ", " + o;
  }
  if (!argumentError.empty() || !why.empty()) {
    closePeers(sharing);
    exports_.withdraw(sharing.mine);
    if (!argumentError.empty())
      LOOM_THROW(loomInvalidArgument, "loomCommWindowRegister: ", argumentError);
    return false;
  }
  windows_.push_back(w);
  sharing_.push_back(std::move(sharing));
  return true;
}

void UserWindows::remove(uint64_t id) {
  for (size_t i = 0; i < windows_.size(); ++i) {
    if (windows_[i].id != id) continue;
    closePeers(sharing_[i]);
    exports_.withdraw(sharing_[i].mine);
    windows_.erase(windows_.begin() + static_cast<ptrdiff_t>(i));
    sharing_.erase(sharing_.begin() + static_cast<ptrdiff_t>(i));
    break;
  }
  // No rank frees its part before every peer has closed its mapping of it. Peers of this process
  // map nothing (they use the part's own address), so when every peer is one, nothing is waited
  // for: one thread may deregister the windows of all its GPUs one after the other (nccl-tests).
  bool allInProcess = !process_.empty();
  for (int q : process_) allInProcess &= q == process_[rank_];
  if (!allInProcess) allGather_("");
}

const UserWindow* UserWindows::find(const void* ptr, size_t bytes, size_t& offset) const {
  const char* p = static_cast<const char*>(ptr);
  for (const UserWindow& w : windows_) {
    if (p >= w.base && p + bytes <= w.base + w.bytes) {
      offset = static_cast<size_t>(p - w.base);
      return &w;
    }
  }
  return nullptr;
}

}  // namespace loom
