// The build's one registration point of built-in device backends: the CPU always, CUDA where the
// build has it. Every other kind comes as a plug-in (device/plugin/), with no edit here.
#include "device/cpu/cpu_device.hpp"
#include "device/registry.hpp"
#if LOOM_HAVE_CUDA
#include "device/cuda/cuda_device.hpp"
#endif

namespace loom {

void registerBuiltinDevices(DeviceRegistry& registry) {
  registry.add(
      "cpu", [](const std::string&) { return createCpuDevice(); }, "built in");
#if LOOM_HAVE_CUDA
  registry.add("cuda", &createCudaDevice, "built in");
#else
  registry.addUnavailable(
      "cuda", "this build of Loom has no CUDA support (build with nvcc available, LOOM_CUDA=ON)");
#endif
}

}  // namespace loom
