// The loomemu torch device's runtime: the emulated accelerator's plug-in table (plugins/device/emu,
// the same library Loom loads, so both see one set of devices), the current device and stream of
// each thread, streams and events as torch's device guard wants them, and a caching allocator.
//
// This is what a vendor's torch extension (torch_npu, intel_extension_for_pytorch) is, in
// miniature: torch's PrivateUse1 device over a device runtime. Here the runtime is the Loom
// plug-in's table, called directly (dlopen of the plug-in, the way a vendor links its runtime).
//
// Torch streams of this device: id 0 is the device's default stream, any other id is the plug-in's
// stream handle. That is the plug-in's torchStream convention, so Loom's torch backend finds the
// stream of a c10::Stream without asking this extension.
#pragma once

#include <c10/core/Allocator.h>
#include <c10/core/Stream.h>

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "loom/loom_device_plugin.h"

namespace loom::emu {

// The plug-in, loaded once per process by load() (torch's device registries are process-wide, so
// this is too); every entry's failure becomes a c10::Error naming the entry and the plug-in's
// words.
class Runtime {
 public:
  static void load(const std::string& pluginPath);
  static Runtime& get();  // throws unless loaded

  const loomDevicePlugin_v2& table() const { return table_; }
  const std::string& path() const { return path_; }
  void check(loomResult_t result, const char* entry) const;
  int deviceCount() const { return deviceCount_; }
  void checkDevice(c10::DeviceIndex index) const;

  // Streams: a small pool per device made on first use (torch never destroys its streams).
  loomStream_t stream(const c10::Stream& stream) const;
  c10::Stream newStream(c10::DeviceIndex index);

  // Blocking copies for the operators (the stream is the thread's current one).
  void copyToDevice(void* dst, const void* src, size_t bytes, c10::DeviceIndex index);
  void copyToHost(void* dst, const void* src, size_t bytes, c10::DeviceIndex index);
  void copyOnDevice(void* dst, const void* src, size_t bytes, c10::DeviceIndex index);

 private:
  Runtime(std::string path, void* library, const loomDevicePlugin_v2& table);
  std::string path_;
  void* library_;
  loomDevicePlugin_v2 table_;
  int deviceCount_ = 0;
  std::mutex mutex_;
  std::vector<std::vector<loomStream_t>> pools_;  // per device
  std::vector<size_t> nextInPool_;
};

// The thread's current device and stream (torch's model: per thread, as CUDA's).
c10::DeviceIndex currentDevice();
void setCurrentDevice(c10::DeviceIndex index);
c10::Stream currentStream(c10::DeviceIndex index);
c10::Stream exchangeStream(const c10::Stream& stream);
c10::Stream defaultStream(c10::DeviceIndex index);

// Device memory: blocks kept for reuse once every stream that used them passed their free (as
// CUDA's caching allocator; the plug-in's memFree waits for the whole device, which a collective
// in flight on another stream could hold up for long).
class CachingAllocator final : public c10::Allocator {
 public:
  c10::DataPtr allocate(size_t bytes) override;
  c10::DeleterFnPtr raw_deleter() const override { return nullptr; }
  void copy_data(void* dst, const void* src, size_t bytes) const override;
  // The block of dataPtr is also used on `stream`: its reuse waits for that stream too.
  void recordStream(const c10::DataPtr& dataPtr, const c10::Stream& stream);

 private:
  struct Block {
    void* ptr = nullptr;
    size_t bytes = 0;
    c10::DeviceIndex device = 0;
    std::vector<c10::Stream> streams;  // the allocating stream and those recorded
  };
  struct Freed {
    Block* block;
    std::vector<loomDevEvent_t> events;  // one per stream that used it
  };
  static void release(void* context);
  void free(Block* block);
  void reclaimLocked();
  std::mutex mutex_;
  std::map<std::pair<c10::DeviceIndex, size_t>, std::vector<Block*>> idle_;
  std::vector<Freed> pending_;
};

CachingAllocator& allocator();

}  // namespace loom::emu
