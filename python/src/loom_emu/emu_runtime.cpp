#include "emu_runtime.hpp"

#include <c10/util/Exception.h>
#include <dlfcn.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <thread>

namespace loom::emu {

namespace {

constexpr size_t kStreamsPerDevice = 4;  // torch's pool streams, handed out round robin
constexpr size_t kGranule = 512;         // allocation sizes round up to this

// The process's runtime: made once by load() and never destroyed (the plug-in's worker threads
// and torch's registries outlive static destructors).
Runtime* gRuntime = nullptr;
std::mutex gLoadMutex;

// The thread's current device and, per device, its current stream id (0: the default stream).
thread_local c10::DeviceIndex tCurrentDevice = 0;
thread_local std::vector<c10::StreamId> tCurrentStreams;

c10::StreamId& currentStreamId(c10::DeviceIndex index) {
  if (tCurrentStreams.size() <= static_cast<size_t>(index)) tCurrentStreams.resize(index + 1, 0);
  return tCurrentStreams[index];
}

c10::Device emuDevice(c10::DeviceIndex index) { return c10::Device(c10::kPrivateUse1, index); }

}  // namespace

void Runtime::load(const std::string& pluginPath) {
  std::lock_guard<std::mutex> lock(gLoadMutex);
  if (gRuntime != nullptr) {
    TORCH_CHECK(gRuntime->path() == pluginPath, "loom.emu: the plug-in ", gRuntime->path(),
                " is loaded already; cannot load ", pluginPath, " beside it");
    return;
  }
  void* library = dlopen(pluginPath.c_str(), RTLD_NOW | RTLD_LOCAL);
  TORCH_CHECK(library != nullptr, "loom.emu: cannot load the emulated device plug-in ", pluginPath,
              ": ", dlerror());
  const auto* table =
      static_cast<const loomDevicePlugin_v2*>(dlsym(library, LOOM_DEVICE_PLUGIN_SYMBOL));
  TORCH_CHECK(table != nullptr, "loom.emu: ", pluginPath, " exports no ",
              LOOM_DEVICE_PLUGIN_SYMBOL);
  TORCH_CHECK(table->version == LOOM_DEVICE_PLUGIN_VERSION && table->size >= sizeof(*table),
              "loom.emu: ", pluginPath, " is not a version ", LOOM_DEVICE_PLUGIN_VERSION,
              " plug-in of this build (version ", table->version, ")");
  gRuntime = new Runtime(pluginPath, library, *table);
}

Runtime& Runtime::get() {
  TORCH_CHECK(gRuntime != nullptr,
              "loom.emu: the device is not set up (import loom.emu before using it)");
  return *gRuntime;
}

Runtime::Runtime(std::string path, void* library, const loomDevicePlugin_v2& table)
    : path_(std::move(path)), library_(library), table_(table) {
  check(table_.init(), "init");
  check(table_.getDeviceCount(&deviceCount_), "getDeviceCount");
  pools_.resize(deviceCount_);
  nextInPool_.resize(deviceCount_, 0);
}

void Runtime::check(loomResult_t result, const char* entry) const {
  if (result == loomSuccess) return;
  const char* why = table_.getLastError != nullptr ? table_.getLastError() : "";
  TORCH_CHECK(false, "loom.emu: ", entry, " failed (code ", static_cast<int>(result), "): ", why);
}

void Runtime::checkDevice(c10::DeviceIndex index) const {
  TORCH_CHECK(index >= 0 && index < deviceCount_, "loom.emu: no device ", int(index), " (",
              deviceCount_, " devices; LOOM_EMU_DEVICES sets how many)");
}

loomStream_t Runtime::stream(const c10::Stream& stream) const {
  // The plug-in's own convention (its torchStream entry reads ids the same way).
  return reinterpret_cast<loomStream_t>(static_cast<intptr_t>(stream.id()));
}

c10::Stream Runtime::newStream(c10::DeviceIndex index) {
  checkDevice(index);
  std::lock_guard<std::mutex> lock(mutex_);
  std::vector<loomStream_t>& pool = pools_[index];
  if (pool.size() < kStreamsPerDevice) {
    loomStream_t created = nullptr;
    check(table_.streamCreate(index, &created), "streamCreate");
    pool.push_back(created);
  }
  loomStream_t handle = pool[nextInPool_[index]++ % pool.size()];
  return c10::Stream(c10::Stream::UNSAFE, emuDevice(index),
                     static_cast<c10::StreamId>(reinterpret_cast<intptr_t>(handle)));
}

void Runtime::copyToDevice(void* dst, const void* src, size_t bytes, c10::DeviceIndex index) {
  if (bytes == 0) return;
  loomStream_t s = stream(currentStream(index));
  check(table_.memcpyAsync(index, dst, src, bytes, loomMemcpyHostToDevice, s), "memcpyAsync");
  check(table_.streamSynchronize(index, s), "streamSynchronize");  // src may go right after
}

void Runtime::copyToHost(void* dst, const void* src, size_t bytes, c10::DeviceIndex index) {
  if (bytes == 0) return;
  loomStream_t s = stream(currentStream(index));
  check(table_.memcpyAsync(index, dst, src, bytes, loomMemcpyDeviceToHost, s), "memcpyAsync");
  check(table_.streamSynchronize(index, s), "streamSynchronize");
}

void Runtime::copyOnDevice(void* dst, const void* src, size_t bytes, c10::DeviceIndex index) {
  if (bytes == 0 || dst == src) return;
  loomStream_t s = stream(currentStream(index));
  check(table_.memcpyAsync(index, dst, src, bytes, loomMemcpyDeviceToDevice, s), "memcpyAsync");
}

c10::DeviceIndex currentDevice() { return tCurrentDevice; }

void setCurrentDevice(c10::DeviceIndex index) {
  Runtime::get().checkDevice(index);
  tCurrentDevice = index;
}

c10::Stream currentStream(c10::DeviceIndex index) {
  if (index < 0) index = tCurrentDevice;
  return c10::Stream(c10::Stream::UNSAFE, emuDevice(index), currentStreamId(index));
}

c10::Stream exchangeStream(const c10::Stream& stream) {
  c10::Stream previous = currentStream(stream.device_index());
  currentStreamId(stream.device_index()) = stream.id();
  return previous;
}

c10::Stream defaultStream(c10::DeviceIndex index) {
  return c10::Stream(c10::Stream::UNSAFE, emuDevice(index), 0);
}

c10::DataPtr CachingAllocator::allocate(size_t bytes) {
  Runtime& rt = Runtime::get();
  const c10::DeviceIndex device = currentDevice();
  rt.checkDevice(device);
  const size_t rounded = std::max<size_t>(kGranule, (bytes + kGranule - 1) / kGranule * kGranule);
  Block* block = nullptr;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    reclaimLocked();
    auto& idle = idle_[{device, rounded}];
    if (!idle.empty()) {
      block = idle.back();
      idle.pop_back();
    }
  }
  if (block == nullptr) {
    block = new Block{nullptr, rounded, device, {}};
    rt.check(rt.table().memAlloc(device, rounded, &block->ptr), "memAlloc");
  }
  block->streams.assign(1, currentStream(device));
  return c10::DataPtr(block->ptr, block, &CachingAllocator::release, emuDevice(device));
}

void CachingAllocator::release(void* context) { allocator().free(static_cast<Block*>(context)); }

void CachingAllocator::free(Block* block) {
  Runtime& rt = Runtime::get();
  Freed freed{block, {}};
  for (const c10::Stream& s : block->streams) {
    loomDevEvent_t event = nullptr;
    rt.check(rt.table().eventCreate(block->device, &event), "eventCreate");
    rt.check(rt.table().eventRecord(block->device, event, rt.stream(s)), "eventRecord");
    freed.events.push_back(event);
  }
  std::lock_guard<std::mutex> lock(mutex_);
  pending_.push_back(std::move(freed));
}

void CachingAllocator::reclaimLocked() {
  Runtime& rt = Runtime::get();
  auto done = [&](const Freed& f) {
    for (loomDevEvent_t e : f.events) {
      int finished = 0;
      rt.check(rt.table().eventQuery(f.block->device, e, &finished), "eventQuery");
      if (!finished) return false;
    }
    return true;
  };
  auto reusable = std::stable_partition(pending_.begin(), pending_.end(),
                                        [&](const Freed& f) { return !done(f); });
  for (auto it = reusable; it != pending_.end(); ++it) {
    for (loomDevEvent_t e : it->events) rt.table().eventDestroy(it->block->device, e);
    idle_[{it->block->device, it->block->bytes}].push_back(it->block);
  }
  pending_.erase(reusable, pending_.end());
}

void CachingAllocator::copy_data(void* dst, const void* src, size_t bytes) const {
  Runtime::get().copyOnDevice(dst, src, bytes, currentDevice());
}

void CachingAllocator::recordStream(const c10::DataPtr& dataPtr, const c10::Stream& stream) {
  auto* block = static_cast<Block*>(dataPtr.get_context());
  if (block == nullptr || dataPtr.get_deleter() != &CachingAllocator::release) return;
  std::lock_guard<std::mutex> lock(mutex_);
  if (std::find(block->streams.begin(), block->streams.end(), stream) == block->streams.end())
    block->streams.push_back(stream);
}

CachingAllocator& allocator() {
  static CachingAllocator* instance = new CachingAllocator();  // see gRuntime
  return *instance;
}

}  // namespace loom::emu
