// One loaded device plug-in: the dlopen'ed library, its checked table (loomDevicePlugin_v2; a
// version 1 table read into it), and the devices it creates (plugin_device.cpp). Every failing
// entry becomes a loom::Error that names the plug-in, the entry and the plug-in's own message.
#pragma once

#include <memory>
#include <string>

#include "device/device.hpp"
#include "loom/loom_device_plugin.h"

namespace loom {

class PluginLibrary {
 public:
  // dlopen + version and entry checks + init(); throws loomInvalidArgument (a bad file, a
  // wrong version, a missing entry) or the init's error, each naming `path`.
  static std::unique_ptr<PluginLibrary> open(const std::string& path);
  ~PluginLibrary();
  PluginLibrary(const PluginLibrary&) = delete;
  PluginLibrary& operator=(const PluginLibrary&) = delete;

  const std::string& path() const { return path_; }
  const std::string& kind() const { return kind_; }
  const std::string& vendor() const { return vendor_; }
  const loomDevicePlugin_v2& table() const { return table_; }
  // The torch device type it serves ("" for none) and its devices' count.
  std::string torchDeviceType() const;
  int deviceCount() const;
  // The plug-in stream of torch stream `streamId` of device `dev` (torchStream, else the id).
  loomStream_t torchStream(int dev, int64_t streamId) const;
  std::unique_ptr<Device> createDevice(const std::string& spec);

  // Throws unless `result` is loomSuccess: "device plug-in <kind> (<path>): <entry> failed: ..."
  void check(loomResult_t result, const char* entry) const;

 private:
  PluginLibrary(std::string path, void* handle);

  std::string path_;
  void* handle_;                 // dlopen's; the library stays loaded (see DeviceRegistry)
  loomDevicePlugin_v2 table_{};  // a version 1 table: its torch entries zero
  std::string kind_, vendor_;
};

}  // namespace loom
