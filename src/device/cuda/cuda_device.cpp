#include "device/cuda/cuda_device.hpp"

#include <cstring>
#include <vector>

#include "base/dtype.hpp"
#include "device/cuda/collectives/exchange.hpp"
#include "device/cuda/cuda_check.hpp"
#include "device/cuda/cuda_engine.hpp"
#include "device/cuda/ep/cuda_ep.hpp"
#include "device/registry.hpp"

namespace loom {

namespace {

int deviceCount() {
  int count = 0;
  cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess) {
    cudaGetLastError();  // not sticky: leave no error behind for the caller's own CUDA calls
    LOOM_THROW(loomInvalidArgument, "device \"cuda\": no usable CUDA GPU (",
               cudaGetErrorString(err), ")");
  }
  return count;
}

class CudaEvent final : public DeviceEvent {
 public:
  CudaEvent() { LOOM_CUDA_CHECK(cudaEventCreateWithFlags(&event_, cudaEventDisableTiming)); }
  ~CudaEvent() override { cudaEventDestroy(event_); }
  cudaEvent_t get() const { return event_; }

 private:
  cudaEvent_t event_ = nullptr;
};

cudaStream_t streamOf(loomStream_t stream) { return static_cast<cudaStream_t>(stream); }

cudaMemcpyKind memcpyKind(CopyKind kind) {
  switch (kind) {
    case CopyKind::kHostToDevice:
      return cudaMemcpyHostToDevice;
    case CopyKind::kDeviceToHost:
      return cudaMemcpyDeviceToHost;
    default:
      return cudaMemcpyDeviceToDevice;
  }
}

}  // namespace

DeviceScope::DeviceScope(int ordinal) {
  int current = -1;
  if (cudaGetDevice(&current) != cudaSuccess) {
    cudaGetLastError();
    current = -1;
  }
  // Also where `ordinal` is current already: a thread that never called CUDA has device 0
  // "current" with no context bound to it (the shim's group threads, the watchdog), and the
  // driver API (cuMemGetAddressRange, stream memory operations) needs it bound; cudaSetDevice binds
  // it, and costs little once it is.
  LOOM_CUDA_CHECK(cudaSetDevice(ordinal));
  if (current != ordinal) previous_ = current;
}

DeviceScope::~DeviceScope() {
  if (previous_ >= 0 && cudaSetDevice(previous_) != cudaSuccess) cudaGetLastError();
}

bool contextGone(cudaError_t error) {
  return error == cudaErrorCudartUnloading || error == cudaErrorContextIsDestroyed ||
         error == cudaErrorDeviceUninitialized || error == cudaErrorInitializationError;
}

CudaDevice::CudaDevice(int ordinal) {
  cudaDeviceProp prop{};
  LOOM_CUDA_CHECK(cudaGetDeviceProperties(&prop, ordinal));
  multiprocessors_ = prop.multiProcessorCount;
  char bus[32] = {0};
  LOOM_CUDA_CHECK(cudaDeviceGetPCIBusId(bus, sizeof(bus) - 1, ordinal));
  identity_ = {"cuda", "nvidia", prop.name, ordinal, bus};
  // The context this device's resources will live in (cudaSetDevice makes it).
  DeviceScope scope(ordinal);
  contextId_ = driver_.primaryContextId(ordinal);
}

bool CudaDevice::contextAlive(bool thorough) const {
  if (!driver_.primaryContextActive(ordinal())) return false;
  return !thorough || contextId_ == 0 || driver_.primaryContextId(ordinal()) == contextId_;
}

void* CudaDevice::allocate(size_t bytes) {
  DeviceScope scope(ordinal());
  void* ptr = nullptr;
  LOOM_CUDA_CHECK(cudaMalloc(&ptr, bytes == 0 ? 1 : bytes));
  return ptr;
}

void CudaDevice::release(void* ptr) {
  // After cudaDeviceReset the pointer is stale: it may name memory of the new context.
  if (ptr == nullptr || !contextAlive(true)) return;
  DeviceScope scope(ordinal());
  cudaFree(ptr);
}

void* CudaDevice::allocateHost(size_t bytes) {
  DeviceScope scope(ordinal());
  void* ptr = nullptr;
  LOOM_CUDA_CHECK(cudaHostAlloc(&ptr, bytes == 0 ? 1 : bytes, cudaHostAllocMapped));
  return ptr;
}

void CudaDevice::releaseHost(void* ptr) {
  if (ptr == nullptr || !contextAlive(true)) return;
  DeviceScope scope(ordinal());
  cudaFreeHost(ptr);
}

bool CudaDevice::isDeviceMemory(const void* ptr) const {
  cudaPointerAttributes attr{};
  if (cudaPointerGetAttributes(&attr, ptr) != cudaSuccess) {
    cudaGetLastError();
    return false;
  }
  return attr.type == cudaMemoryTypeDevice || attr.type == cudaMemoryTypeManaged;
}

void CudaDevice::checkBuffer(const void* ptr, size_t bytes, const char* what) const {
  if (bytes == 0) return;
  const size_t slot = (reinterpret_cast<uintptr_t>(ptr) >> 8) % kCheckedCache;
  if (checked_[slot] == ptr) return;
  LOOM_CHECK_ARG(usableOnDevice(ptr, ordinal()), what, " is not memory of CUDA device ", ordinal(),
                 " (a CUDA communicator takes device pointers, e.g. from cudaMalloc)");
  checked_[slot] = ptr;
}

std::string CudaDevice::exportMemory(void* ptr, size_t) {
  DeviceScope scope(ordinal());
  cudaIpcMemHandle_t handle{};
  LOOM_CUDA_CHECK(cudaIpcGetMemHandle(&handle, ptr));
  return std::string(reinterpret_cast<const char*>(&handle), sizeof(handle));
}

void* CudaDevice::importMemory(const std::string& bytes) {
  LOOM_CHECK_ARG(bytes.size() == sizeof(cudaIpcMemHandle_t), "not a CUDA IPC handle (",
                 bytes.size(), " bytes)");
  DeviceScope scope(ordinal());
  cudaIpcMemHandle_t handle{};
  std::memcpy(&handle, bytes.data(), sizeof(handle));
  void* ptr = nullptr;
  LOOM_CUDA_CHECK(cudaIpcOpenMemHandle(&ptr, handle, cudaIpcMemLazyEnablePeerAccess));
  return ptr;
}

void CudaDevice::closeImported(void* ptr) {
  if (ptr != nullptr) cudaIpcCloseMemHandle(ptr);
}

void CudaDevice::copyAsync(void* dst, const void* src, size_t bytes, CopyKind kind,
                           loomStream_t stream) {
  if (dst == src || bytes == 0) return;
  DeviceScope scope(ordinal());
  LOOM_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, memcpyKind(kind), streamOf(stream)));
}

void CudaDevice::reduceAsync(void* dst, const void* const* srcs, int nsrc, size_t count,
                             loomDataType_t dtype, loomRedOp_t op, int accum, int divisor,
                             loomStream_t stream) {
  LOOM_CHECK_ARG(nsrc >= 1 && nsrc <= cuda::kMaxRanks, "reduce takes 1 to ", cuda::kMaxRanks,
                 " sources, got ", nsrc);
  if (count == 0) return;
  DeviceScope scope(ordinal());
  const size_t bytes = count * dtypeSize(dtype);
  // The kernel reads the source list from device memory, which must outlive the launch: this
  // (off the hot path) form waits for it.
  const char** table = nullptr;
  LOOM_CUDA_CHECK(cudaMalloc(&table, sizeof(char*) * nsrc));
  cudaError_t err =
      cudaMemcpyAsync(table, srcs, sizeof(char*) * nsrc, cudaMemcpyHostToDevice, streamOf(stream));
  if (err == cudaSuccess) {
    try {
      cuda::ReduceKey key{dtype, op == loomAvg ? loomSum : op, resolveGpuAccum(dtype, accum)};
      cuda::launchLocalReduce(static_cast<char*>(dst), table, nsrc, bytes, key,
                              divisor < 1 ? 1 : divisor, streamOf(stream));
      err = cudaStreamSynchronize(streamOf(stream));
    } catch (...) {
      cudaFree(table);
      throw;
    }
  }
  cudaFree(table);
  if (err != cudaSuccess)
    LOOM_THROW(loomUnhandledCudaError, "device reduce: ", cudaGetErrorString(err));
}

std::unique_ptr<DeviceEvent> CudaDevice::createEvent() {
  DeviceScope scope(ordinal());
  return std::make_unique<CudaEvent>();
}

void CudaDevice::recordEvent(DeviceEvent& event, loomStream_t stream) {
  DeviceScope scope(ordinal());  // the null stream is the current device's
  LOOM_CUDA_CHECK(cudaEventRecord(static_cast<CudaEvent&>(event).get(), streamOf(stream)));
}

void CudaDevice::waitEvent(loomStream_t stream, DeviceEvent& event) {
  DeviceScope scope(ordinal());
  LOOM_CUDA_CHECK(cudaStreamWaitEvent(streamOf(stream), static_cast<CudaEvent&>(event).get(), 0));
}

bool CudaDevice::eventDone(DeviceEvent& event) {
  cudaError_t err = cudaEventQuery(static_cast<CudaEvent&>(event).get());
  if (err == cudaErrorNotReady) return false;
  LOOM_CUDA_CHECK(err);
  return true;
}

void CudaDevice::synchronize(loomStream_t stream) {
  DeviceScope scope(ordinal());
  LOOM_CUDA_CHECK(cudaStreamSynchronize(streamOf(stream)));
}

namespace {

void CUDART_CB runHostTask(void* task) { static_cast<HostTask*>(task)->run(); }

}  // namespace

void CudaDevice::enqueueHostTask(HostTask& task, loomStream_t stream) {
  DeviceScope scope(ordinal());
  LOOM_CUDA_CHECK(cudaLaunchHostFunc(streamOf(stream), runHostTask, &task));
}

bool usableOnDevice(const void* ptr, int ordinal) {
  cudaPointerAttributes attr{};
  cudaError_t err = cudaPointerGetAttributes(&attr, ptr);
  if (err != cudaSuccess) {
    cudaGetLastError();
    return false;
  }
  switch (attr.type) {
    case cudaMemoryTypeDevice:
      return attr.device == ordinal;
    case cudaMemoryTypeManaged:
      return true;
    case cudaMemoryTypeHost:
      return attr.devicePointer != nullptr;
    default:
      return false;
  }
}

int resolveGpuAccum(loomDataType_t dtype, int accum) {
  if (!dtypeIsNarrowFloat(dtype) || accum < 0 || accum == dtype) return 0;
  switch (accum) {
    case loomFloat16:
      return 1;
    case loomFloat32:
      return 2;
    case loomFloat64:
      return 3;
    default:
      break;
  }
  LOOM_THROW(loomInvalidArgument, "cannot accumulate ", dtypeName(dtype), " in ",
             dtypeValid(accum) ? dtypeName(static_cast<loomDataType_t>(accum)) : "type ", accum);
}

std::unique_ptr<Device> createCudaDevice(const std::string& spec) {
  const int count = deviceCount();
  int ordinal = parseDeviceSpec(spec).second;
  if (ordinal < 0) LOOM_CUDA_CHECK(cudaGetDevice(&ordinal));
  LOOM_CHECK_ARG(ordinal < count, "device '", spec, "': this process sees ", count,
                 " CUDA device(s)");
  // The caller's current device stays what it was: every call of the device makes its own
  // current for its duration.
  return std::make_unique<CudaDevice>(ordinal);
}

std::unique_ptr<NativeCollectives> CudaDevice::createCollectives(const NativeSetup& setup) {
  return std::make_unique<CudaEngine>(*this, setup);
}

std::unique_ptr<NativeEp> CudaDevice::createEp(const NativeEpSetup& setup) {
  return makeCudaEp(*this, setup);
}

}  // namespace loom
