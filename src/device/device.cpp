#include "device/device.hpp"

#include <cstdlib>
#include <cstring>

#include "base/error.hpp"
#include "device/native.hpp"
#include "device/native_ep.hpp"

namespace loom {

void* Device::allocateHost(size_t bytes) {
  void* ptr = std::aligned_alloc(64, (bytes + 63) / 64 * 64 + 64);
  if (ptr == nullptr)
    LOOM_THROW(loomSystemError, "out of host memory allocating ", bytes, " bytes");
  return ptr;
}

void Device::releaseHost(void* ptr) { std::free(ptr); }

std::string Device::exportMemory(void*, size_t) {
  LOOM_THROW(loomInvalidUsage, "device ", identity().kind, " cannot export memory to peers");
}

void* Device::importMemory(const std::string&) {
  LOOM_THROW(loomInvalidUsage, "device ", identity().kind, " cannot import peers' memory");
}

void Device::closeImported(void*) {}

void Device::reduceAsync(void*, const void* const*, int, size_t, loomDataType_t, loomRedOp_t, int,
                         int, loomStream_t) {
  LOOM_THROW(loomInternalError, "device ", identity().kind, " has no reduction (caps().reduces)");
}

void Device::enqueueHostTask(HostTask&, loomStream_t) {
  LOOM_THROW(loomInternalError, "device ", identity().kind,
             " cannot run host tasks in stream order (caps().hostTasks)");
}

void Device::copy(void* dst, const void* src, size_t bytes) {
  if (dst == src || bytes == 0) return;
  // Each pointer is classified once: for a plug-in that is a call into it.
  const bool fromDevice = isDeviceMemory(src), toDevice = isDeviceMemory(dst);
  if (!fromDevice && !toDevice) {
    std::memcpy(dst, src, bytes);
    return;
  }
  const CopyKind kind = fromDevice && toDevice ? CopyKind::kDeviceToDevice
                        : fromDevice           ? CopyKind::kDeviceToHost
                                               : CopyKind::kHostToDevice;
  copyAsync(dst, src, bytes, kind, workStream());
  synchronize(workStream());
}

void Device::reduce(void* dst, const void* const* srcs, int nsrc, size_t count,
                    loomDataType_t dtype, loomRedOp_t op, int accum, int divisor) {
  if (count == 0) return;
  reduceAsync(dst, srcs, nsrc, count, dtype, op, accum, divisor, workStream());
  synchronize(workStream());
}

std::unique_ptr<NativeCollectives> Device::createCollectives(const NativeSetup&) { return nullptr; }

std::unique_ptr<NativeEp> Device::createEp(const NativeEpSetup&) { return nullptr; }

}  // namespace loom
