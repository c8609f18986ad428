// A device plug-in that fails mid-run: on rank 1 the emulated device's copies start failing
// (LOOM_EMU_FAIL=copy:N, set before the plug-in loads). Every rank must get an error from a
// collective (the failing rank the plug-in's, the others the abort it caused), naming the
// plug-in's failure, well before the communicator's timeout; nobody hangs.
// Usage under loomrun: emu_fault_test PLUGIN.so. Exits 0 when every rank saw its error.
//
// LOOM_TEST_PLACEMENT (E or C per rank, rank 1 an E) makes the communicator heterogeneous.
// emu_fault_test PLUGIN.so kill VICTIM: rank VICTIM SIGKILLs itself before its 41st allreduce
// (its peers are then inside it); every survivor, of either kind, must get loomRemoteError or
// loomTimeout. Not under loomrun, which would stop the survivors itself: hetero_fault.sh starts
// the ranks.
#include <dlfcn.h>
#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "loom/loom.h"
#include "loom/loom_device_plugin.h"

int main(int argc, char** argv) {
  const bool killMode = argc == 4 && std::string(argv[2]) == "kill";
  if (argc != 2 && !killMode) return 2;
  const int victim = killMode ? std::atoi(argv[3]) : -1;
  const char* rankVar = std::getenv(killMode ? "LOOM_RANK" : "RANK");
  const int rank = std::atoi(rankVar != nullptr ? rankVar : "0");
  const char* placementVar = std::getenv("LOOM_TEST_PLACEMENT");
  const std::string placement = placementVar != nullptr ? placementVar : "";
  const bool emu =
      placement.empty() || (rank < static_cast<int>(placement.size()) && placement[rank] == 'E');
  if (rank == 1 && !killMode) setenv("LOOM_EMU_FAIL", "copy:40", 1);
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
  config.device = emu ? "loom-emu:0" : "cpu";
  loomComm_t comm = nullptr;
  if (loomCommInitFromEnv(&comm, &config) != loomSuccess) {
    std::fprintf(stderr, "rank %d: init failed: %s\n", rank, loomGetLastError(nullptr));
    return 2;
  }
  // Large enough for several chunks of the heterogeneous pipeline.
  constexpr size_t kCount = 1 << 20;
  void* buffer = nullptr;
  std::string host;
  if (emu) {
    plugin->memAlloc(0, kCount * sizeof(float), &buffer);
  } else {
    host.resize(kCount * sizeof(float));
    buffer = host.data();
  }
  loomResult_t result = loomSuccess;
  int calls = 0;
  for (; calls < 200 && result == loomSuccess; ++calls) {
    if (calls == 40 && rank == victim) kill(getpid(), SIGKILL);
    result = loomAllReduce(buffer, buffer, kCount, loomFloat32, loomSum, comm, nullptr);
  }
  const std::string why = loomGetLastError(nullptr);
  if (result == loomSuccess) {
    loomCommDestroy(comm);
  } else {
    loomCommAbort(comm);
  }
  // Calls return once enqueued on an emulated device: those still queued when the peer failed
  // must not leave the stream waiting for ever (their gates open; the outputs are undefined).
  if (emu && plugin->streamSynchronize(0, nullptr) != loomSuccess) {
    std::fprintf(stderr, "rank %d: the stream failed after the abort\n", rank);
    return 1;
  }
  if (killMode) {
    std::printf("rank %d: call %d returned %d: %s\n", rank, calls, static_cast<int>(result),
                why.c_str());
    return result == loomRemoteError || result == loomTimeout ? 0 : 1;
  }
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
