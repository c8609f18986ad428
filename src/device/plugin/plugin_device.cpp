// A device of a loaded plug-in: the Device contract over its loomDevicePlugin_v2 table. Optional
// entries that are absent turn into capabilities that are off (caps()), and the layers above
// fall back: host memory from malloc, reductions on the host, data through host memory.
#include <cstring>

#include "base/error.hpp"
#include "device/plugin/plugin_library.hpp"
#include "device/registry.hpp"

namespace loom {

namespace {

class PluginEvent final : public DeviceEvent {
 public:
  PluginEvent(const PluginLibrary& lib, int dev) : lib_(lib), dev_(dev) {
    lib_.check(lib_.table().eventCreate(dev_, &event_), "eventCreate");
  }
  ~PluginEvent() override { lib_.table().eventDestroy(dev_, event_); }
  loomDevEvent_t get() const { return event_; }

 private:
  const PluginLibrary& lib_;
  int dev_;
  loomDevEvent_t event_ = nullptr;
};

// The C ABI's callback: the task is what enqueueHostTask passed.
void runHostTask(void* task) { static_cast<HostTask*>(task)->run(); }

class PluginDevice final : public Device {
 public:
  PluginDevice(const PluginLibrary& lib, int dev) : lib_(lib), t_(lib.table()), dev_(dev) {
    loomDevicePluginDeviceInfo_v1 info{};
    lib_.check(t_.getDeviceInfo(dev_, &info), "getDeviceInfo");
    info.model[sizeof(info.model) - 1] = '\0';
    info.busId[sizeof(info.busId) - 1] = '\0';
    identity_ = {lib_.kind(), lib_.vendor(), info.model, dev_, info.busId};
    lib_.check(t_.streamCreate(dev_, &work_), "streamCreate");
  }
  ~PluginDevice() override { t_.streamDestroy(dev_, work_); }

  const DeviceIdentity& identity() const override { return identity_; }
  DeviceCaps caps() const override {
    DeviceCaps c;
    c.reduces = t_.reduceAsync != nullptr;
    c.mapsHostMemory = (t_.flags & LOOM_DEVICE_PLUGIN_MAPS_HOST_MEMORY) != 0;
    c.peerMappable = t_.memExport != nullptr;
    c.hostTasks = t_.launchHostFunc != nullptr;
    return c;
  }
  std::string spec() const override { return lib_.kind() + ":" + std::to_string(dev_); }

  void* allocate(size_t bytes) override {
    void* ptr = nullptr;
    lib_.check(t_.memAlloc(dev_, bytes == 0 ? 1 : bytes, &ptr), "memAlloc");
    return ptr;
  }
  void release(void* ptr) override {
    if (ptr != nullptr) t_.memFree(dev_, ptr);
  }
  void* allocateHost(size_t bytes) override {
    if (t_.hostAlloc == nullptr) return Device::allocateHost(bytes);
    void* ptr = nullptr;
    lib_.check(t_.hostAlloc(dev_, bytes == 0 ? 1 : bytes, &ptr), "hostAlloc");
    return ptr;
  }
  void releaseHost(void* ptr) override {
    if (t_.hostFree == nullptr) return Device::releaseHost(ptr);
    if (ptr != nullptr) t_.hostFree(dev_, ptr);
  }
  bool isDeviceMemory(const void* ptr) const override {
    int isDevice = 0;
    lib_.check(t_.memIsDevice(dev_, ptr, 1, &isDevice), "memIsDevice");
    return isDevice != 0;
  }
  void checkBuffer(const void* ptr, size_t bytes, const char* what) const override {
    if (bytes == 0) return;
    int isDevice = 0;
    lib_.check(t_.memIsDevice(dev_, ptr, bytes, &isDevice), "memIsDevice");
    LOOM_CHECK_ARG(isDevice != 0, what, " (", bytes, " bytes at ", ptr,
                   ") is not memory of device ", spec(), " (a ", lib_.kind(),
                   " communicator takes that device's memory)");
  }
  std::string exportMemory(void* ptr, size_t bytes) override {
    if (t_.memExport == nullptr) return Device::exportMemory(ptr, bytes);
    char handle[256];
    size_t length = sizeof(handle);
    lib_.check(t_.memExport(dev_, ptr, bytes, handle, &length), "memExport");
    if (length > sizeof(handle))
      LOOM_THROW(loomSystemError, "device plug-in ", lib_.path(), ": memExport wrote a handle of ",
                 length, " bytes (room: 256)");
    return std::string(handle, length);
  }
  void* importMemory(const std::string& handle) override {
    if (t_.memImport == nullptr) return Device::importMemory(handle);
    void* ptr = nullptr;
    lib_.check(t_.memImport(dev_, handle.data(), handle.size(), &ptr), "memImport");
    return ptr;
  }
  void closeImported(void* ptr) override {
    if (t_.memCloseImport != nullptr && ptr != nullptr) t_.memCloseImport(dev_, ptr);
  }

  void copyAsync(void* dst, const void* src, size_t bytes, CopyKind kind,
                 loomStream_t stream) override {
    if (bytes == 0 || dst == src) return;
    lib_.check(t_.memcpyAsync(dev_, dst, src, bytes, static_cast<loomMemcpyKind_t>(kind), stream),
               "memcpyAsync");
  }
  void reduceAsync(void* dst, const void* const* srcs, int nsrc, size_t count, loomDataType_t dtype,
                   loomRedOp_t op, int accum, int divisor, loomStream_t stream) override {
    if (t_.reduceAsync == nullptr)
      return Device::reduceAsync(dst, srcs, nsrc, count, dtype, op, accum, divisor, stream);
    lib_.check(t_.reduceAsync(dev_, dst, srcs, nsrc, count, dtype, op, accum, divisor, stream),
               "reduceAsync");
  }
  std::unique_ptr<DeviceEvent> createEvent() override {
    return std::make_unique<PluginEvent>(lib_, dev_);
  }
  void recordEvent(DeviceEvent& event, loomStream_t stream) override {
    lib_.check(t_.eventRecord(dev_, static_cast<PluginEvent&>(event).get(), stream), "eventRecord");
  }
  void waitEvent(loomStream_t stream, DeviceEvent& event) override {
    lib_.check(t_.streamWaitEvent(dev_, stream, static_cast<PluginEvent&>(event).get()),
               "streamWaitEvent");
  }
  bool eventDone(DeviceEvent& event) override {
    int done = 0;
    lib_.check(t_.eventQuery(dev_, static_cast<PluginEvent&>(event).get(), &done), "eventQuery");
    return done != 0;
  }
  void synchronize(loomStream_t stream) override {
    lib_.check(t_.streamSynchronize(dev_, stream), "streamSynchronize");
  }
  void enqueueHostTask(HostTask& task, loomStream_t stream) override {
    if (t_.launchHostFunc == nullptr) return Device::enqueueHostTask(task, stream);
    lib_.check(t_.launchHostFunc(dev_, stream, runHostTask, &task), "launchHostFunc");
  }

 protected:
  loomStream_t workStream() override { return work_; }

 private:
  const PluginLibrary& lib_;
  const loomDevicePlugin_v2& t_;
  int dev_;
  DeviceIdentity identity_;
  loomStream_t work_ = nullptr;
};

}  // namespace

std::string PluginLibrary::torchDeviceType() const {
  return table_.torchDeviceType != nullptr ? table_.torchDeviceType : "";
}

int PluginLibrary::deviceCount() const {
  int count = 0;
  check(table_.getDeviceCount(&count), "getDeviceCount");
  return count;
}

loomStream_t PluginLibrary::torchStream(int dev, int64_t streamId) const {
  LOOM_CHECK_ARG(table_.torchDeviceType != nullptr, "device plug-in ", kind_, " (", path_,
                 ") serves no torch device type");
  if (table_.torchStream == nullptr)
    return reinterpret_cast<loomStream_t>(static_cast<intptr_t>(streamId));
  loomStream_t stream = nullptr;
  check(table_.torchStream(dev, streamId, &stream), "torchStream");
  return stream;
}

std::unique_ptr<Device> PluginLibrary::createDevice(const std::string& spec) {
  int ordinal = parseDeviceSpec(spec).second;
  int count = deviceCount();
  if (ordinal < 0) ordinal = 0;
  LOOM_CHECK_ARG(ordinal < count, "device '", spec, "': plug-in ", path_, " has ", count,
                 " device(s)");
  return std::make_unique<PluginDevice>(*this, ordinal);
}

}  // namespace loom
