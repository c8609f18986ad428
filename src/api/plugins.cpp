// C entry points of the device plug-in ABI (include/loom/loom_device_plugin.h).
#include "api/handle.hpp"
#include "device/registry.hpp"
#include "loom/loom_device_plugin.h"

extern "C" loomResult_t loomDevicePluginLoad(const char* path) {
  return loom::guarded("loomDevicePluginLoad", [&] {
    LOOM_CHECK_ARG(path != nullptr && *path != '\0', "path is NULL or empty");
    loom::DeviceRegistry::process().loadPlugin(path);
    return loomSuccess;
  });
}
