// C entry points of the device plug-in ABI (include/loom/loom_device_plugin.h).
#include "api/handle.hpp"
#include "device/plugin/plugin_library.hpp"
#include "device/registry.hpp"
#include "loom/loom_device_plugin.h"

extern "C" loomResult_t loomDevicePluginLoad(const char* path) {
  return loom::guarded("loomDevicePluginLoad", [&] {
    LOOM_CHECK_ARG(path != nullptr && *path != '\0', "path is NULL or empty");
    loom::DeviceRegistry::process().loadPlugin(path);
    return loomSuccess;
  });
}

extern "C" loomResult_t loomDevicePluginCount(int* count) {
  return loom::guarded("loomDevicePluginCount", [&] {
    LOOM_CHECK_ARG(count != nullptr, "count is NULL");
    *count = static_cast<int>(loom::DeviceRegistry::process().plugins().size());
    return loomSuccess;
  });
}

extern "C" loomResult_t loomDevicePluginGetInfo(int index, loomDevicePluginInfo_t* info) {
  return loom::guarded("loomDevicePluginGetInfo", [&] {
    LOOM_CHECK_ARG(info != nullptr, "info is NULL");
    const auto plugins = loom::DeviceRegistry::process().plugins();
    LOOM_CHECK_ARG(index >= 0 && static_cast<size_t>(index) < plugins.size(), "index ", index,
                   " is not that of a loaded plug-in (", plugins.size(), " loaded)");
    const loom::PluginLibrary& p = *plugins[index];
    info->kind = p.kind().c_str();
    info->vendor = p.vendor().c_str();
    info->path = p.path().c_str();
    info->torchDeviceType = p.table().torchDeviceType;
    info->deviceCount = p.deviceCount();
    return loomSuccess;
  });
}

extern "C" loomResult_t loomDevicePluginTorchStream(const char* kind, int dev, int64_t streamId,
                                                    loomStream_t* stream) {
  return loom::guarded("loomDevicePluginTorchStream", [&] {
    LOOM_CHECK_ARG(kind != nullptr && stream != nullptr, "kind or stream is NULL");
    for (const loom::PluginLibrary* p : loom::DeviceRegistry::process().plugins()) {
      if (p->kind() != kind) continue;
      *stream = p->torchStream(dev, streamId);
      return loomSuccess;
    }
    LOOM_THROW(loomInvalidArgument, "no device plug-in of kind '", kind, "' is loaded");
  });
}
