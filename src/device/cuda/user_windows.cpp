#include "device/cuda/user_windows.hpp"

#include <cuda_runtime.h>

#include <cstring>

#include "base/error.hpp"
#include "device/cuda/cuda_check.hpp"

namespace loom {

namespace {

// What a rank publishes for its part: the allocation's IPC handle, the part's offset in the
// allocation and its size.
struct PartRecord {
  cudaIpcMemHandle_t handle;
  uint64_t offset;
  uint64_t bytes;
};

}  // namespace

UserWindows::UserWindows(const CudaDriver& driver, IpcImports& imports, int rank, int nranks,
                         std::function<std::vector<std::string>(const std::string&)> allGather)
    : driver_(driver),
      imports_(imports),
      rank_(rank),
      nranks_(nranks),
      allGather_(std::move(allGather)) {}

UserWindows::~UserWindows() {
  for (const std::vector<std::string>& handles : handles_)
    for (const std::string& h : handles)
      if (!h.empty()) imports_.close(h);
}

bool UserWindows::add(uint64_t id, void* ptr, size_t bytes, std::string& why) {
  // A bad part is still taken through both exchanges, so that every rank fails the same way
  // instead of leaving its peers waiting.
  std::string badArgument, failure;
  char* allocation = nullptr;
  size_t allocationBytes = 0;
  try {
    driver_.allocationOf(ptr, allocation, allocationBytes);
    if (static_cast<char*>(ptr) + bytes > allocation + allocationBytes)
      badArgument = "its window runs past the end of its allocation";
  } catch (const Error& e) {
    badArgument = e.what();
  }
  PartRecord mine{};
  if (badArgument.empty()) {
    cudaError_t err = cudaIpcGetMemHandle(&mine.handle, allocation);
    if (err != cudaSuccess) {
      cudaGetLastError();
      // Memory from cudaMallocAsync pools or cuMemCreate cannot travel as an IPC handle.
      failure = std::string("its memory cannot be exported (cudaIpcGetMemHandle: ") +
                cudaGetErrorString(err) + "; allocate windows with loomMemAlloc or cudaMalloc)";
    }
    mine.offset = static_cast<uint64_t>(static_cast<char*>(ptr) - allocation);
  }
  mine.bytes = bytes;
  std::vector<std::string> records =
      allGather_(std::string(reinterpret_cast<const char*>(&mine), sizeof(mine)));

  UserWindow w;
  w.id = id;
  w.base = static_cast<char*>(ptr);
  w.bytes = bytes;
  std::vector<std::string> handles(nranks_);
  for (int q = 0; q < nranks_ && badArgument.empty() && failure.empty(); ++q) {
    PartRecord r{};
    if (records[q].size() != sizeof(r))
      LOOM_THROW(loomInternalError, "rank ", q, " sent a malformed window record");
    std::memcpy(&r, records[q].data(), sizeof(r));
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
    handles[q].assign(reinterpret_cast<const char*>(&r.handle), sizeof(r.handle));
    char* mapped = imports_.open(handles[q]);
    if (mapped == nullptr) {
      handles[q].clear();
      failure = "rank " + std::to_string(q) + "'s part could not be mapped";
      break;
    }
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
    for (const std::string& h : handles)
      if (!h.empty()) imports_.close(h);
    if (!argumentError.empty())
      LOOM_THROW(loomInvalidArgument, "loomCommWindowRegister: ", argumentError);
    return false;
  }
  windows_.push_back(w);
  handles_.push_back(std::move(handles));
  return true;
}

void UserWindows::remove(uint64_t id) {
  for (size_t i = 0; i < windows_.size(); ++i) {
    if (windows_[i].id != id) continue;
    for (const std::string& h : handles_[i])
      if (!h.empty()) imports_.close(h);
    windows_.erase(windows_.begin() + static_cast<ptrdiff_t>(i));
    handles_.erase(handles_.begin() + static_cast<ptrdiff_t>(i));
    break;
  }
  // No rank frees its part before every peer has closed its mapping of it.
  allGather_("");
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
