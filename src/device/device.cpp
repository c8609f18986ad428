#include "device/device.hpp"

#include <cstdlib>
#include <cstring>

#include "base/error.hpp"
#include "device/native.hpp"

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

CopyKind copyKindFor(const Device& device, void* dst, const void* src) {
  const bool fromDevice = device.isDeviceMemory(src), toDevice = device.isDeviceMemory(dst);
  if (fromDevice && toDevice) return CopyKind::kDeviceToDevice;
  return fromDevice ? CopyKind::kDeviceToHost : CopyKind::kHostToDevice;
}

void Device::copy(void* dst, const void* src, size_t bytes) {
  if (dst == src || bytes == 0) return;
  if (!isDeviceMemory(dst) && !isDeviceMemory(src)) {
    std::memcpy(dst, src, bytes);
    return;
  }
  copyAsync(dst, src, bytes, copyKindFor(*this, dst, src), workStream());
  synchronize(workStream());
}

void Device::reduce(void* dst, const void* const* srcs, int nsrc, size_t count,
                    loomDataType_t dtype, loomRedOp_t op, int accum, int divisor) {
  if (count == 0) return;
  reduceAsync(dst, srcs, nsrc, count, dtype, op, accum, divisor, workStream());
  synchronize(workStream());
}

std::unique_ptr<NativeCollectives> Device::createCollectives(const NativeSetup&) { return nullptr; }

}  // namespace loom
