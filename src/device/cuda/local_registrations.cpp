#include "device/cuda/local_registrations.hpp"

#include <cuda_runtime.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>

#include "base/error.hpp"
#include "base/log.hpp"
#include "device/cuda/cuda_check.hpp"
#include "device/cuda/cuda_device.hpp"

namespace loom {

// A member type, not one of this file's anonymous namespace: Page has linkage, and its fields'
// types must too (GCC's -Wsubobject-linkage when a unity build compiles this file with others).
struct LocalRegistrations::Page {
  struct Entry {
    std::atomic<uint64_t> gen;  // 0: free or being written
    SharedAllocation shared;
    uint64_t offset;  // of the registered buffer in what `shared` maps
    uint64_t bytes;
  };
  std::atomic<uint64_t> version;  // raised after every change of an entry
  Entry entries[cuda::kMaxRegistrations];
};

static_assert(std::atomic<uint64_t>::is_always_lock_free, "the board is shared between processes");

LocalRegistrations::LocalRegistrations(
    MemoryExports& exports, IpcImports& imports, int device, int rank, int nranks,
    std::vector<int> process, std::function<std::vector<std::string>(const std::string&)> allGather)
    : exports_(exports),
      imports_(imports),
      device_(device),
      rank_(rank),
      nranks_(nranks),
      process_(std::move(process)) {
  const size_t osPage = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  pageStride_ = (sizeof(Page) + osPage - 1) / osPage * osPage;
  std::string name, failure;
  try {
    if (rank_ == 0) {
      name = ShmSegment::uniqueName("/loom-reg-");
      board_ = ShmSegment::create(name, pageStride_ * nranks_);
    }
  } catch (const Error& e) {
    failure = e.what();
  }
  name = allGather(failure.empty() ? name : "")[0];
  if (name.empty()) failure = "rank 0 could not create the registration board";
  if (failure.empty() && rank_ != 0) {
    try {
      board_ = ShmSegment::open(name, pageStride_ * nranks_);
    } catch (const Error& e) {
      failure = e.what();
    }
  }
  if (failure.empty()) {
    const size_t tableBytes = sizeof(cuda::ImportEntry) * nranks_ * cuda::kMaxRegistrations;
    try {
      // Loom's own memory, registered: a watchdog still looking after cudaDeviceReset reads it.
      tableMemory_ = MappedHostMemory(tableBytes);
      table_ = static_cast<cuda::ImportEntry*>(tableMemory_.host());
      tableOnDevice_ = static_cast<const cuda::ImportEntry*>(tableMemory_.device());
    } catch (const Error& e) {
      failure = std::string("no pinned memory for the import table: ") + e.what();
    }
  }
  // The creator's pages are zero (a fresh segment): every entry free, every version 0.
  std::vector<std::string> outcomes = allGather(failure.empty() ? "ok" : failure);
  if (rank_ == 0 && board_.data() != nullptr) board_.unlink();
  usable_ = true;
  for (int q = 0; q < nranks_; ++q) {
    if (outcomes[q] == "ok") continue;
    usable_ = false;
    if (why_.empty()) why_ = "on rank " + std::to_string(q) + ", " + outcomes[q];
  }
  imported_.assign(nranks_, std::vector<Import>(cuda::kMaxRegistrations));
  seenVersion_.assign(nranks_, 0);
  for (int s = cuda::kMaxRegistrations - 1; s >= 0; --s) freeSlots_.push_back(s);
}

LocalRegistrations::~LocalRegistrations() {
  // The engine waited for its kernels before destroying this.
  for (int q = 0; q < nranks_; ++q)
    for (int s = 0; s < cuda::kMaxRegistrations; ++s) withdrawImport(q, s, true);
  unmapWithdrawn();
}

LocalRegistrations::Page* LocalRegistrations::page(int rank) const {
  return reinterpret_cast<Page*>(board_.data() + pageStride_ * rank);
}

void LocalRegistrations::add(uint64_t id, void* ptr, size_t bytes) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (freeSlots_.empty())
      LOOM_THROW(loomInvalidUsage, "this rank already has ", cuda::kMaxRegistrations,
                 " buffers registered with the communicator; deregister some first");
  }
  SharedAllocation shared;
  uint64_t offset = 0;
  std::string why;
  if (!exports_.share(ptr, bytes, shared, offset, why)) LOOM_THROW(loomInvalidArgument, why);
  std::lock_guard<std::mutex> lock(mutex_);
  if (freeSlots_.empty()) {  // taken by another thread meanwhile
    exports_.withdraw(shared);
    LOOM_THROW(loomInvalidUsage, "this rank already has ", cuda::kMaxRegistrations,
               " buffers registered with the communicator; deregister some first");
  }
  Own o{id, static_cast<char*>(ptr), bytes, freeSlots_.back(), nextGen_++, shared};
  freeSlots_.pop_back();
  Page* mine = page(rank_);
  Page::Entry& e = mine->entries[o.slot];
  e.gen.store(0, std::memory_order_release);
  e.shared = shared;
  e.offset = offset;
  e.bytes = bytes;
  e.gen.store(o.gen, std::memory_order_release);
  mine->version.fetch_add(1, std::memory_order_release);
  own_.push_back(o);
  LOOM_INFO(kSubsysColl, rank_, "registered ", static_cast<void*>(o.base), " (", bytes, " bytes",
            shared.kind == SharedAllocation::kCuMem ? ", cuMem memory shared as descriptors" : "",
            ") as slot ", o.slot, " generation ", o.gen);
}

void LocalRegistrations::remove(uint64_t id) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = std::find_if(own_.begin(), own_.end(), [&](const Own& o) { return o.id == id; });
  if (it == own_.end()) return;
  Page* mine = page(rank_);
  mine->entries[it->slot].gen.store(0, std::memory_order_release);
  mine->version.fetch_add(1, std::memory_order_release);
  LOOM_INFO(kSubsysColl, rank_, "withdrew slot ", it->slot, " generation ", it->gen);
  // A peer that has not mapped it yet will not: the entry is gone from the board.
  exports_.withdraw(it->shared);
  freeSlots_.push_back(it->slot);
  own_.erase(it);
}

bool LocalRegistrations::empty() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return own_.empty();
}

bool LocalRegistrations::find(const void* ptr, size_t bytes, cuda::BufferRef& ref) const {
  const char* p = static_cast<const char*>(ptr);
  std::lock_guard<std::mutex> lock(mutex_);
  for (const Own& o : own_) {
    if (p >= o.base && p + bytes <= o.base + o.bytes) {
      ref = cuda::BufferRef{o.slot, o.gen, static_cast<uint64_t>(p - o.base)};
      return true;
    }
  }
  return false;
}

void LocalRegistrations::refresh() {
  if (!usable_) return;
  std::lock_guard<std::mutex> lock(refreshMutex_);
  for (int q = 0; q < nranks_; ++q)
    if (q != rank_) refreshPeer(q);
}

void LocalRegistrations::refreshPeer(int q) {
  Page* theirs = page(q);
  const uint64_t version = theirs->version.load(std::memory_order_acquire);
  if (version == seenVersion_[q]) return;
  bool whole = true;
  for (int s = 0; s < cuda::kMaxRegistrations; ++s) {
    Page::Entry& e = theirs->entries[s];
    const uint64_t gen = e.gen.load(std::memory_order_acquire);
    Import& im = imported_[q][s];
    if (gen == im.gen) continue;
    withdrawImport(q, s, false);
    if (gen == 0) continue;
    const auto now = std::chrono::steady_clock::now();
    if (im.failedGen == gen && now < im.retryAt) {
      whole = false;
      continue;
    }
    Page::Entry copy;
    std::memcpy(static_cast<void*>(&copy.shared), &e.shared, sizeof(copy.shared));
    copy.offset = e.offset;
    copy.bytes = e.bytes;
    std::atomic_thread_fence(std::memory_order_acquire);
    if (e.gen.load(std::memory_order_relaxed) != gen) {
      whole = false;  // rewritten while read: look again next time
      continue;
    }
    std::string why;
    DeviceScope scope(device_);
    const bool sameProcess = !process_.empty() && process_[q] == process_[rank_];
    char* mapped = imports_.open(copy.shared, sameProcess, &why);
    if (mapped == nullptr) {
      // Tried again, less and less often (a kernel that needs it gives up at the
      // communicator's timeout); said once per registration.
      if (im.failedGen != gen) {
        LOOM_WARN(kSubsysColl, rank_, "rank ", q,
                  "'s registered buffer could not be mapped: ", why);
        im.backoffMs = 10;
      } else {
        im.backoffMs = std::min<int64_t>(2 * im.backoffMs, 1000);
      }
      im.failedGen = gen;
      im.retryAt = now + std::chrono::milliseconds(im.backoffMs);
      whole = false;
      continue;
    }
    im.gen = gen;
    im.shared = copy.shared;
    volatile cuda::ImportEntry* t = table_ + static_cast<size_t>(q) * cuda::kMaxRegistrations + s;
    t->base = reinterpret_cast<uint64_t>(mapped + copy.offset);
    std::atomic_thread_fence(std::memory_order_release);
    t->gen = gen;
    LOOM_INFO(kSubsysColl, rank_, "mapped rank ", q, "'s slot ", s, " generation ", gen, " (",
              copy.bytes, " bytes)");
  }
  if (whole) seenVersion_[q] = version;
}

void LocalRegistrations::unmapWithdrawn() {
  std::vector<SharedAllocation> withdrawn;
  {
    // Not held while closing: the watchdog must never wait behind a close.
    std::lock_guard<std::mutex> lock(refreshMutex_);
    withdrawn.swap(unmapLater_);
  }
  for (const SharedAllocation& shared : withdrawn) imports_.close(shared);
}

void LocalRegistrations::withdrawImport(int q, int slot, bool closeNow) {
  Import& im = imported_[q][slot];
  if (im.gen == 0) return;
  volatile cuda::ImportEntry* t = table_ + static_cast<size_t>(q) * cuda::kMaxRegistrations + slot;
  t->gen = 0;
  std::atomic_thread_fence(std::memory_order_release);
  // A later registration in the same allocation reopens it at no cost: IpcImports counts uses.
  if (im.shared.kind != SharedAllocation::kNone) {
    if (closeNow)
      imports_.close(im.shared);
    else
      unmapLater_.push_back(im.shared);
  }
  LOOM_INFO(kSubsysColl, rank_, "dropped rank ", q, "'s slot ", slot, " generation ", im.gen,
            closeNow ? " (unmapped)" : " (unmapped at this rank's next deregistration)");
  im.gen = 0;
  im.shared = SharedAllocation{};
}

}  // namespace loom
