// Which backends this process has: the built-in ones (device/builtin.cpp, the build's one
// registration point) and the plug-ins loaded from LOOM_DEVICE_PLUGIN or loomDevicePluginLoad.
// A device is named by its kind, optionally with an ordinal: "cpu", "cuda:1", "loom-emu:0".
//
// This is the process's one registry, not a communicator's: dlopen itself is process-wide, and
// loomDevicePluginLoad takes no communicator. It is created on first use, guarded by a mutex,
// and deliberately never destroyed (plug-ins stay loaded until the process exits, so no device
// of a late-destroyed communicator outlives its code).
#pragma once

#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "base/error.hpp"
#include "device/device.hpp"

namespace loom {

class PluginLibrary;  // device/plugin/plugin_library.hpp

// Creates the device of a spec of its kind ("cuda" or "cuda:1").
using DeviceFactory = std::function<std::unique_ptr<Device>(const std::string& spec)>;

class DeviceRegistry {
 public:
  static DeviceRegistry& process();

  void add(const std::string& kind, DeviceFactory factory, const std::string& origin);
  // A kind this build knows but cannot run (e.g. CUDA without nvcc): asking for it says why.
  void addUnavailable(const std::string& kind, const std::string& why);
  // Throws loomInvalidArgument for an unknown kind or ordinal, naming the known kinds.
  std::unique_ptr<Device> create(const std::string& spec);
  // Loads a plug-in (throws naming the file and the problem); the same file twice is a no-op.
  void loadPlugin(const std::string& path);
  std::vector<std::string> kinds() const;  // the kinds that can run, for messages and loom-info
  // The loaded plug-ins, those of LOOM_DEVICE_PLUGIN first (a failure to load one throws), in
  // load order; they are never unloaded.
  std::vector<const PluginLibrary*> plugins();

 private:
  DeviceRegistry();
  void loadPluginLocked(const std::string& path);
  void loadEnvPluginsLocked();

  struct Entry {
    std::string kind;
    std::string origin;       // "built in" or the plug-in's path
    std::string unavailable;  // non-empty: why this kind cannot run here
    DeviceFactory factory;
  };
  mutable std::mutex mutex_;
  std::vector<Entry> entries_;
  std::vector<std::unique_ptr<PluginLibrary>> plugins_;
  bool envLoaded_ = false;
  std::optional<Error> envError_;
};

// Splits "kind:N" into kind and ordinal (-1 when absent); throws loomInvalidArgument naming the
// spec when N is not a non-negative number.
std::pair<std::string, int> parseDeviceSpec(const std::string& spec);

void registerBuiltinDevices(DeviceRegistry& registry);  // device/builtin.cpp

}  // namespace loom
