// A device plug-in that fails mid-run: on rank 1 the emulated device's copies start failing
// (LOOM_EMU_FAIL=copy:N, set before the plug-in loads). Every rank must get an error from a
// collective (the failing rank the plug-in's, the others the abort it caused), naming the
// plug-in's failure, well before the communicator's timeout; nobody hangs.
// Usage under loomrun: emu_fault_test PLUGIN.so. Exits 0 when every rank saw its error.
#include <dlfcn.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "loom/loom.h"
#include "loom/loom_device_plugin.h"

int main(int argc, char** argv) {
  if (argc != 2) return 2;
  const int rank = std::atoi(std::getenv("RANK") != nullptr ? std::getenv("RANK") : "0");
  if (rank == 1) setenv("LOOM_EMU_FAIL", "copy:40", 1);
  void* library = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
  auto* plugin =
      library != nullptr
          ? static_cast<const loomDevicePlugin_v1*>(dlsym(library, LOOM_DEVICE_PLUGIN_SYMBOL))
          : nullptr;
  if (plugin == nullptr || loomDevicePluginLoad(argv[1]) != loomSuccess) {
    std::fprintf(stderr, "rank %d: cannot load %s: %s\n", rank, argv[1], loomGetLastError(nullptr));
    return 2;
  }
  loomConfig_t config = LOOM_CONFIG_INITIALIZER;
  config.device = "loom-emu:0";
  loomComm_t comm = nullptr;
  if (loomCommInitFromEnv(&comm, &config) != loomSuccess) {
    std::fprintf(stderr, "rank %d: init failed: %s\n", rank, loomGetLastError(nullptr));
    return 2;
  }
  void* buffer = nullptr;
  plugin->memAlloc(0, 4096 * sizeof(float), &buffer);
  loomResult_t result = loomSuccess;
  int calls = 0;
  for (; calls < 200 && result == loomSuccess; ++calls)
    result = loomAllReduce(buffer, buffer, 4096, loomFloat32, loomSum, comm, nullptr);
  const std::string why = loomGetLastError(nullptr);
  loomCommDestroy(comm);
  const bool named = why.find("LOOM_EMU_FAIL") != std::string::npos;
  const bool expected = rank == 1 ? result == loomSystemError : result == loomRemoteError;
  std::printf("rank %d: call %d returned %d: %s\n", rank, calls, static_cast<int>(result),
              why.c_str());
  if (!expected || !named) {
    std::fprintf(stderr, "rank %d: expected %s naming the plug-in's failure\n", rank,
                 rank == 1 ? "loomSystemError" : "loomRemoteError");
    return 1;
  }
  return 0;
}
