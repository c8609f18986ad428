#include "device/device.hpp"

#include "base/error.hpp"

namespace loom {

std::unique_ptr<Device> createDevice(const std::string& spec) {
  if (spec.empty() || spec == "cpu") return createCpuDevice();
  if (spec == "cuda" || spec.rfind("cuda:", 0) == 0) {
#if LOOM_HAVE_CUDA
    return createCudaDevice(spec);
#else
    LOOM_THROW(
        loomInvalidArgument, "device '", spec,
        "': this build of Loom has no CUDA support (build with nvcc available, LOOM_CUDA=ON)");
#endif
  }
  LOOM_THROW(loomInvalidArgument, "unknown device '", spec,
             "': expected \"cpu\", \"cuda\" (the current CUDA device) or \"cuda:N\"");
}

}  // namespace loom
