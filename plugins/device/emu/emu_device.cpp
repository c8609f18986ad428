// "loom-emu": an emulated accelerator as a Loom device plug-in (include/loom/loom_device_plugin.h),
// built as its own shared library. It behaves like a discrete device so that CI exercises every
// device path without one, and it shows a vendor what a plug-in has to provide.
//
// Memory: each device reserves a range of addresses that the host cannot touch (PROT_NONE) and
// hands out pointers inside it; the bytes live in a separate backing mapping at the same offset.
// A host dereference of a device pointer faults at once, so only the plug-in's copies reach the
// data. Streams: one worker thread each, running copies and reductions in order some time after
// they are issued (LOOM_EMU_DELAY_US per operation), so a missing wait shows as a wrong result.
// Events: generation counters that a stream's worker advances. memFree waits for every stream of
// the device first, as cudaFree does. A stream holds a bounded number of pending operations, as a
// GPU's launch queue does: one more blocks the caller until the worker has run one.
//
// Torch: the table declares the torch device type "loomemu" (loom.emu, python/src/loom_emu, makes
// torch's PrivateUse1 device that name, with memory, streams and events of this plug-in).
//
// Test knobs (read when the library loads): LOOM_EMU_DEVICES (devices, default 4),
// LOOM_EMU_DISABLE=reduce,map_host,host_alloc,host_func (optional entries and flags switched off),
// LOOM_EMU_FAIL=init | copy:N (init fails; the Nth copy of the process fails), LOOM_EMU_VERSION
// (the ABI version the table reports; 1: read as a version 1 table, without the torch entries),
// LOOM_EMU_DELAY_US (default 20), LOOM_EMU_QUEUE_DEPTH
// (pending operations per stream before an enqueue blocks, default 1024; 0: unbounded).
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "base/dtype.hpp"
#include "base/reduce.hpp"
#include "loom/loom_device_plugin.h"

namespace {

constexpr size_t kReserveBytes = size_t{8} << 30;  // address space per device, committed lazily
constexpr size_t kAlign = 256;

thread_local std::string tlsError;  // the plug-in's own per-thread message (a vendor runtime's)

loomResult_t fail(loomResult_t code, std::string message) {
  tlsError = "loom-emu: " + std::move(message);
  return code;
}

struct Options {
  int devices = 4;
  bool reduce = true, mapHost = true, hostAlloc = true, hostFunc = true;
  bool failInit = false;
  long failCopyAt = -1;  // the Nth memcpyAsync fails (1-based); -1 never
  unsigned version = LOOM_DEVICE_PLUGIN_VERSION;
  long delayUs = 20;
  size_t queueDepth = 1024;
};

Options readOptions() {
  Options o;
  if (const char* v = std::getenv("LOOM_EMU_DEVICES")) o.devices = std::max(1, std::atoi(v));
  if (const char* v = std::getenv("LOOM_EMU_DISABLE")) {
    std::string s = std::string(",") + v + ",";
    o.reduce = s.find(",reduce,") == std::string::npos;
    o.mapHost = s.find(",map_host,") == std::string::npos;
    o.hostAlloc = s.find(",host_alloc,") == std::string::npos;
    o.hostFunc = s.find(",host_func,") == std::string::npos;
  }
  if (const char* v = std::getenv("LOOM_EMU_FAIL")) {
    std::string s = v;
    o.failInit = s == "init";
    if (s.rfind("copy:", 0) == 0) o.failCopyAt = std::atol(s.c_str() + 5);
  }
  if (const char* v = std::getenv("LOOM_EMU_VERSION")) o.version = std::atoi(v);
  if (const char* v = std::getenv("LOOM_EMU_DELAY_US")) o.delayUs = std::atol(v);
  if (const char* v = std::getenv("LOOM_EMU_QUEUE_DEPTH"))
    o.queueDepth = static_cast<size_t>(std::max(0L, std::atol(v)));
  return o;
}

// One stream: a worker thread that runs its tasks in order.
class Stream {
 public:
  Stream(long delayUs, size_t depth)
      : delayUs_(delayUs), depth_(depth), worker_([this] { loop(); }) {}
  ~Stream() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stopping_ = true;
    }
    wake_.notify_all();
    worker_.join();
  }
  void enqueue(std::function<void()> task) {
    {
      std::unique_lock<std::mutex> lock(mutex_);
      idle_.wait(lock, [&] { return depth_ == 0 || tasks_.size() < depth_; });
      tasks_.push_back(std::move(task));
      ++issued_;
    }
    wake_.notify_all();
  }
  void synchronize() {
    std::unique_lock<std::mutex> lock(mutex_);
    uint64_t target = issued_;
    idle_.wait(lock, [&] { return done_ >= target; });
  }

 private:
  void loop() {
    std::unique_lock<std::mutex> lock(mutex_);
    for (;;) {
      wake_.wait(lock, [&] { return stopping_ || !tasks_.empty(); });
      if (tasks_.empty()) return;  // stopping, and drained
      std::function<void()> task = std::move(tasks_.front());
      tasks_.pop_front();
      lock.unlock();
      if (delayUs_ > 0) std::this_thread::sleep_for(std::chrono::microseconds(delayUs_));
      task();
      lock.lock();
      ++done_;
      idle_.notify_all();
    }
  }
  long delayUs_;
  size_t depth_;  // pending tasks before enqueue blocks (0: unbounded)
  std::mutex mutex_;
  std::condition_variable wake_, idle_;
  std::deque<std::function<void()>> tasks_;
  uint64_t issued_ = 0, done_ = 0;
  bool stopping_ = false;
  std::thread worker_;  // last: starts once the rest is built
};

struct Event {
  std::mutex mutex;
  std::condition_variable doneCv;
  uint64_t recorded = 0, done = 0;
};

// One emulated device: its address range, backing bytes and allocations.
struct Device {
  char* addresses = nullptr;  // PROT_NONE: what pointers look like
  char* backing = nullptr;    // where the bytes are
  std::mutex mutex;
  std::map<size_t, size_t> allocations;  // offset -> bytes
  std::map<size_t, size_t> holes;        // freed ranges, offset -> bytes
  size_t top = 0;
  Stream* defaultStream = nullptr;
  std::vector<Stream*> streams;  // every live stream, the default one too (under mutex)

  bool contains(const void* p) const {
    auto a = reinterpret_cast<uintptr_t>(p), base = reinterpret_cast<uintptr_t>(addresses);
    return a >= base && a < base + kReserveBytes;
  }
  char* real(const void* p) const {
    return backing + (reinterpret_cast<const char*>(p) - addresses);
  }
  // True when [p, p + bytes) lies inside one live allocation.
  bool inAllocation(const void* p, size_t bytes) {
    if (!contains(p)) return false;
    size_t offset = static_cast<size_t>(reinterpret_cast<const char*>(p) - addresses);
    std::lock_guard<std::mutex> lock(mutex);
    auto it = allocations.upper_bound(offset);
    if (it == allocations.begin()) return false;
    --it;
    return offset + bytes <= it->first + it->second;
  }
};

struct State {
  Options options = readOptions();
  std::vector<Device> devices;
  std::atomic<long> copies{0};
  bool initialized = false;
};

// Created when the library loads, never destroyed: worker threads may outlive static destructors.
State* gState = nullptr;

loomResult_t noDevice(int dev) {
  return fail(loomInvalidArgument, "no device " + std::to_string(dev));
}

Device* deviceOf(int dev) {
  if (gState == nullptr || !gState->initialized || dev < 0 ||
      dev >= static_cast<int>(gState->devices.size()))
    return nullptr;
  return &gState->devices[dev];
}

Stream* streamOf(Device& d, loomStream_t s) {
  return s == nullptr ? d.defaultStream : reinterpret_cast<Stream*>(s);
}

// A pointer as the device's worker reads it: device memory through its backing, host memory as
// it is where the device maps host memory.
loomResult_t resolve(Device& d, const void* p, size_t bytes, bool wantDevice, const char* what,
                     const char** out) {
  if (d.contains(p)) {
    if (!d.inAllocation(p, bytes))
      return fail(loomInvalidArgument, std::string(what) + " is outside every allocation");
    *out = d.real(p);
    return loomSuccess;
  }
  if (wantDevice || !gState->options.mapHost)
    return fail(loomInvalidArgument,
                std::string(what) + " is not memory of this device (host memory is not mapped)");
  *out = static_cast<const char*>(p);
  return loomSuccess;
}

loomResult_t emuInit() {
  if (gState->options.failInit) return fail(loomSystemError, "init failed (LOOM_EMU_FAIL=init)");
  if (gState->initialized) return loomSuccess;
  gState->devices = std::vector<Device>(gState->options.devices);
  for (Device& d : gState->devices) {
    void* addresses =
        mmap(nullptr, kReserveBytes, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    void* backing = mmap(nullptr, kReserveBytes, PROT_READ | PROT_WRITE,
                         MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (addresses == MAP_FAILED || backing == MAP_FAILED)
      return fail(loomSystemError, "cannot reserve device address space");
    d.addresses = static_cast<char*>(addresses);
    d.backing = static_cast<char*>(backing);
    d.defaultStream = new Stream(gState->options.delayUs, gState->options.queueDepth);
    d.streams.push_back(d.defaultStream);
  }
  gState->initialized = true;
  return loomSuccess;
}

loomResult_t emuGetDeviceCount(int* count) {
  *count = static_cast<int>(gState->devices.size());
  return loomSuccess;
}

loomResult_t emuGetDeviceInfo(int dev, loomDevicePluginDeviceInfo_v1* info) {
  if (deviceOf(dev) == nullptr) return noDevice(dev);
  std::snprintf(info->model, sizeof(info->model), "Loom emulated accelerator");
  std::snprintf(info->busId, sizeof(info->busId), "emu:%d", dev);
  return loomSuccess;
}

loomResult_t emuMemAlloc(int dev, size_t bytes, void** ptr) {
  Device* d = deviceOf(dev);
  if (d == nullptr) return noDevice(dev);
  size_t need = (std::max<size_t>(bytes, 1) + kAlign - 1) / kAlign * kAlign;
  std::lock_guard<std::mutex> lock(d->mutex);
  size_t offset = SIZE_MAX;
  for (auto it = d->holes.begin(); it != d->holes.end(); ++it) {
    if (it->second < need) continue;
    offset = it->first;
    if (it->second > need) d->holes[offset + need] = it->second - need;
    d->holes.erase(it);
    break;
  }
  if (offset == SIZE_MAX) {
    if (d->top + need > kReserveBytes)
      return fail(loomSystemError, "out of device memory allocating " + std::to_string(bytes));
    offset = d->top;
    d->top += need;
  }
  d->allocations[offset] = need;
  *ptr = d->addresses + offset;
  return loomSuccess;
}

loomResult_t emuMemFree(int dev, void* ptr) {
  Device* d = deviceOf(dev);
  if (d == nullptr) return noDevice(dev);
  if (ptr == nullptr) return loomSuccess;
  if (!d->contains(ptr)) return fail(loomInvalidArgument, "memFree of a pointer not of the device");
  // As cudaFree: the device's work in flight finishes first (it may still use the memory).
  std::vector<Stream*> streams;
  {
    std::lock_guard<std::mutex> lock(d->mutex);
    streams = d->streams;
  }
  for (Stream* stream : streams) stream->synchronize();
  size_t offset = static_cast<size_t>(static_cast<char*>(ptr) - d->addresses);
  std::lock_guard<std::mutex> lock(d->mutex);
  auto it = d->allocations.find(offset);
  if (it == d->allocations.end())
    return fail(loomInvalidArgument, "memFree of a pointer never allocated");
  // Freed memory reads as zeros again. madvise drops whole pages: only those inside this
  // allocation (a page it shares with a live allocation would lose that one's data too).
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  const size_t end = offset + it->second;
  const size_t first = (offset + page - 1) / page * page, last = end / page * page;
  if (last > first) {
    std::memset(d->backing + offset, 0, first - offset);
    madvise(d->backing + first, last - first, MADV_DONTNEED);
    std::memset(d->backing + last, 0, end - last);
  } else {
    std::memset(d->backing + offset, 0, it->second);
  }
  d->holes[offset] = it->second;
  d->allocations.erase(it);
  return loomSuccess;
}

loomResult_t emuMemIsDevice(int dev, const void* ptr, size_t bytes, int* isDevice) {
  Device* d = deviceOf(dev);
  if (d == nullptr) return noDevice(dev);
  *isDevice = d->inAllocation(ptr, std::max<size_t>(bytes, 1)) ? 1 : 0;
  return loomSuccess;
}

loomResult_t emuStreamCreate(int dev, loomStream_t* stream) {
  Device* d = deviceOf(dev);
  if (d == nullptr) return noDevice(dev);
  auto* created = new Stream(gState->options.delayUs, gState->options.queueDepth);
  {
    std::lock_guard<std::mutex> lock(d->mutex);
    d->streams.push_back(created);
  }
  *stream = reinterpret_cast<loomStream_t>(created);
  return loomSuccess;
}

loomResult_t emuStreamDestroy(int dev, loomStream_t stream) {
  Device* d = deviceOf(dev);
  if (d == nullptr) return noDevice(dev);
  auto* gone = reinterpret_cast<Stream*>(stream);
  {
    std::lock_guard<std::mutex> lock(d->mutex);
    d->streams.erase(std::remove(d->streams.begin(), d->streams.end(), gone), d->streams.end());
  }
  delete gone;
  return loomSuccess;
}

loomResult_t emuStreamSynchronize(int dev, loomStream_t stream) {
  Device* d = deviceOf(dev);
  if (d == nullptr) return noDevice(dev);
  streamOf(*d, stream)->synchronize();
  return loomSuccess;
}

loomResult_t emuMemcpyAsync(int dev, void* dst, const void* src, size_t bytes,
                            loomMemcpyKind_t kind, loomStream_t stream) {
  Device* d = deviceOf(dev);
  if (d == nullptr) return noDevice(dev);
  long n = ++gState->copies;
  if (gState->options.failCopyAt > 0 && n >= gState->options.failCopyAt)
    return fail(loomSystemError, "copy " + std::to_string(n) + " failed (LOOM_EMU_FAIL=copy:" +
                                     std::to_string(gState->options.failCopyAt) + ")");
  if (bytes == 0) return loomSuccess;
  const bool srcDevice = kind != loomMemcpyHostToDevice;
  const bool dstDevice = kind != loomMemcpyDeviceToHost;
  const char* from = nullptr;
  const char* to = nullptr;
  // A copy's host side is host memory by definition; its device side must be the device's.
  if (srcDevice) {
    if (loomResult_t r = resolve(*d, src, bytes, true, "copy source", &from)) return r;
  } else if (d->contains(src)) {
    return fail(loomInvalidArgument, "host-to-device copy from device memory");
  } else {
    from = static_cast<const char*>(src);
  }
  if (dstDevice) {
    if (loomResult_t r = resolve(*d, dst, bytes, true, "copy destination", &to)) return r;
  } else if (d->contains(dst)) {
    return fail(loomInvalidArgument, "device-to-host copy into device memory");
  } else {
    to = static_cast<const char*>(dst);
  }
  char* out = const_cast<char*>(to);
  streamOf(*d, stream)->enqueue([out, from, bytes] { std::memmove(out, from, bytes); });
  return loomSuccess;
}

loomResult_t emuReduceAsync(int dev, void* dst, const void* const* srcs, int nsrc, size_t count,
                            loomDataType_t dtype, loomRedOp_t op, int accumType, int divisor,
                            loomStream_t stream) {
  Device* d = deviceOf(dev);
  if (d == nullptr) return noDevice(dev);
  if (nsrc < 1) return fail(loomInvalidArgument, "reduce of no source");
  const size_t bytes = count * loom::dtypeSize(dtype);
  std::vector<const void*> real(nsrc);
  for (int i = 0; i < nsrc; ++i) {
    const char* r = nullptr;
    if (loomResult_t res = resolve(*d, srcs[i], bytes, false, "reduce source", &r)) return res;
    real[i] = r;
  }
  const char* out = nullptr;
  if (loomResult_t res = resolve(*d, dst, bytes, false, "reduce destination", &out)) return res;
  streamOf(*d, stream)->enqueue([=, real = std::move(real)] {
    loom::reduceManyAndScale(const_cast<char*>(out), real.data(), nsrc, count, dtype, op, accumType,
                             divisor);
  });
  return loomSuccess;
}

loomResult_t emuHostAlloc(int, size_t bytes, void** ptr) {
  *ptr = std::aligned_alloc(4096, (bytes + 4095) / 4096 * 4096);
  return *ptr != nullptr ? loomSuccess : fail(loomSystemError, "out of host memory");
}

loomResult_t emuHostFree(int, void* ptr) {
  std::free(ptr);
  return loomSuccess;
}

// An event handle owns one reference; stream tasks that record or wait on it hold their own, so
// destroying an event with such a task still queued is safe (as cudaEventDestroy is).
using EventRef = std::shared_ptr<Event>;

EventRef& eventOf(loomDevEvent_t event) { return *reinterpret_cast<EventRef*>(event); }

loomResult_t emuEventCreate(int, loomDevEvent_t* event) {
  *event = reinterpret_cast<loomDevEvent_t>(new EventRef(std::make_shared<Event>()));
  return loomSuccess;
}

loomResult_t emuEventDestroy(int, loomDevEvent_t event) {
  delete reinterpret_cast<EventRef*>(event);
  return loomSuccess;
}

loomResult_t emuEventRecord(int dev, loomDevEvent_t event, loomStream_t stream) {
  Device* d = deviceOf(dev);
  if (d == nullptr) return noDevice(dev);
  EventRef e = eventOf(event);
  uint64_t generation;
  {
    std::lock_guard<std::mutex> lock(e->mutex);
    generation = ++e->recorded;
  }
  streamOf(*d, stream)->enqueue([e, generation] {
    std::lock_guard<std::mutex> lock(e->mutex);
    e->done = std::max(e->done, generation);
    e->doneCv.notify_all();
  });
  return loomSuccess;
}

loomResult_t emuStreamWaitEvent(int dev, loomStream_t stream, loomDevEvent_t event) {
  Device* d = deviceOf(dev);
  if (d == nullptr) return noDevice(dev);
  EventRef e = eventOf(event);
  uint64_t target;
  {
    std::lock_guard<std::mutex> lock(e->mutex);
    target = e->recorded;
  }
  streamOf(*d, stream)->enqueue([e, target] {
    std::unique_lock<std::mutex> lock(e->mutex);
    e->doneCv.wait(lock, [&] { return e->done >= target; });
  });
  return loomSuccess;
}

loomResult_t emuEventQuery(int, loomDevEvent_t event, int* done) {
  Event* e = eventOf(event).get();
  std::lock_guard<std::mutex> lock(e->mutex);
  *done = e->done >= e->recorded ? 1 : 0;
  return loomSuccess;
}

// A host function is one more task of the stream's worker: it runs in order, and the stream's
// later tasks wait for it.
loomResult_t emuLaunchHostFunc(int dev, loomStream_t stream, void (*fn)(void*), void* arg) {
  Device* d = deviceOf(dev);
  if (d == nullptr) return noDevice(dev);
  if (fn == nullptr) return fail(loomInvalidArgument, "launchHostFunc of a NULL function");
  streamOf(*d, stream)->enqueue([fn, arg] { fn(arg); });
  return loomSuccess;
}

// Torch streams of the loomemu torch device (python/src/loom_emu): id 0 is the default stream, any
// other id is a stream handle of this plug-in's, checked here (a stale or foreign id is an error,
// not a crash).
loomResult_t emuTorchStream(int dev, int64_t streamId, loomStream_t* stream) {
  Device* d = deviceOf(dev);
  if (d == nullptr) return noDevice(dev);
  if (streamId == 0) {
    *stream = nullptr;
    return loomSuccess;
  }
  auto* candidate = reinterpret_cast<Stream*>(static_cast<intptr_t>(streamId));
  std::lock_guard<std::mutex> lock(d->mutex);
  if (std::find(d->streams.begin(), d->streams.end(), candidate) == d->streams.end())
    return fail(loomInvalidArgument, "torch stream id " + std::to_string(streamId) +
                                         " is no stream of device " + std::to_string(dev));
  *stream = reinterpret_cast<loomStream_t>(candidate);
  return loomSuccess;
}

const char* emuGetLastError() { return tlsError.c_str(); }

}  // namespace

extern "C" {

__attribute__((visibility("default"))) loomDevicePlugin_v2 loomDevicePluginEntry = {
    LOOM_DEVICE_PLUGIN_VERSION,
    sizeof(loomDevicePlugin_v2),
    "loom-emu",
    "loom",
    LOOM_DEVICE_PLUGIN_MAPS_HOST_MEMORY,
    emuInit,
    emuGetDeviceCount,
    emuGetDeviceInfo,
    emuMemAlloc,
    emuMemFree,
    emuMemIsDevice,
    emuStreamCreate,
    emuStreamDestroy,
    emuStreamSynchronize,
    emuMemcpyAsync,
    emuEventCreate,
    emuEventDestroy,
    emuEventRecord,
    emuStreamWaitEvent,
    emuEventQuery,
    nullptr,  // finalize: the address space goes with the process
    emuGetLastError,
    emuHostAlloc,
    emuHostFree,
    emuReduceAsync,
    nullptr,  // memExport: peers exchange data through host memory
    nullptr,
    nullptr,
    emuLaunchHostFunc,
    "loomemu",  // torch's PrivateUse1 device as the loomemu extension renames it
    emuTorchStream,
};

}  // extern "C"

namespace {

// Runs when the library loads, before Loom reads the table: the test knobs shape it.
__attribute__((constructor)) void configureTable() {
  gState = new State();
  const Options& o = gState->options;
  loomDevicePluginEntry.version = o.version;
  if (!o.reduce) loomDevicePluginEntry.reduceAsync = nullptr;
  if (!o.mapHost) loomDevicePluginEntry.flags &= ~LOOM_DEVICE_PLUGIN_MAPS_HOST_MEMORY;
  if (!o.hostAlloc)
    loomDevicePluginEntry.hostAlloc = nullptr, loomDevicePluginEntry.hostFree = nullptr;
  if (!o.hostFunc) loomDevicePluginEntry.launchHostFunc = nullptr;
}

}  // namespace
