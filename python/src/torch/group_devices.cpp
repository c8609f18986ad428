// ProcessGroupLoom's devices: each rank's home device and the heterogeneous communicator of a
// mixed group, the communicators of CUDA and plug-in devices made at their first op, and their
// end (shutdown, abort). See process_group_loom.hpp.
#include <ATen/ATen.h>
#include <ATen/DeviceAccelerator.h>
#include <c10/core/impl/VirtualGuardImpl.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "process_group_loom.hpp"
#include "tensor_args.hpp"

#ifdef LOOM_TORCH_CUDA
#include <c10/cuda/CUDAFunctions.h>
#include <c10/cuda/CUDAGuard.h>
#endif

namespace loom::torchbackend {

namespace {

constexpr const char* kCudaUniqueIdKey = "loom_cuda_unique_id";
constexpr const char* kDeviceUniqueIdKey = "loom_device_unique_id";

// A rank's home: the torch device and Loom's kind of it ("cpu", "cuda", a plug-in's kind).
struct Home {
  at::Device device{at::kCPU};
  std::string kind = "cpu";
  std::string spec() const {
    return kind == "cpu" ? kind : kind + ":" + std::to_string(device.index());
  }
};

// The current device of a plug-in's torch device type, if the plug-in has devices.
std::optional<Home> pluginHome(c10::DeviceType type) {
  std::optional<DevicePlugin> plugin = pluginFor(type);
  if (!plugin) return std::nullopt;
  c10::impl::VirtualGuardImpl guard(type);
  if (guard.deviceCount() == 0) return std::nullopt;
  return Home{guard.getDevice(), plugin->kind};
}

// LOOM_TORCH_HOME_DEVICE (cpu, cuda, or a plug-in's torch device type), else the current GPU
// where this build serves CUDA tensors and one is visible, else the current device of torch's
// accelerator where a loaded plug-in serves its type, else the CPU.
Home homeDevice() {
  const char* setting = std::getenv("LOOM_TORCH_HOME_DEVICE");
  const std::string wanted = setting != nullptr ? setting : "";
  if (wanted == "cpu") return Home{};
  if (wanted.empty() || wanted == "cuda") {
#ifdef LOOM_TORCH_CUDA
    if (c10::cuda::device_count() > 0)
      return Home{at::Device(at::kCUDA, c10::cuda::current_device()), "cuda"};
#endif
    TORCH_CHECK(wanted.empty(), "ProcessGroupLoom: LOOM_TORCH_HOME_DEVICE=cuda, but ",
#ifdef LOOM_TORCH_CUDA
                "no GPU is visible"
#else
                "this build of the backend serves no CUDA tensors"
#endif
    );
    std::optional<c10::DeviceType> accelerator = at::getAccelerator(false);
    if (accelerator && *accelerator != at::kCUDA) {
      if (std::optional<Home> home = pluginHome(*accelerator)) return *home;
    }
    return Home{};
  }
  for (const DevicePlugin& p : torchPlugins()) {
    if (p.torchType != wanted) continue;
    std::optional<Home> home = pluginHome(c10::Device(wanted).type());
    TORCH_CHECK(home.has_value(), "ProcessGroupLoom: LOOM_TORCH_HOME_DEVICE=", wanted,
                ", but torch sees no ", wanted, " device");
    return *home;
  }
  TORCH_CHECK(false, "ProcessGroupLoom: LOOM_TORCH_HOME_DEVICE='", wanted,
              "' must be cpu, cuda or the torch device type of a loaded Loom device plug-in");
}

}  // namespace

void ProcessGroupLoom::adoptHomeDevices() {
  const Home home = homeDevice();
  // Kinds as fixed-size names: ranks whose kinds differ (even two plug-ins) make a mixed group.
  constexpr size_t kName = 64;
  std::vector<char> mine(kName, '\0'), homes(kName * size_);
  std::strncpy(mine.data(), home.kind.c_str(), kName - 1);
  call(loomAllGather(mine.data(), homes.data(), kName, loomUint8, comm_, nullptr),
       "init (home devices)", comm_, getGroupDesc());
  bool same = true;
  for (int r = 0; r < size_; ++r)
    same = same && std::memcmp(homes.data() + r * kName, mine.data(), kName) == 0;
  if (same) return;
  const std::string deviceName = home.spec();
#ifdef LOOM_TORCH_CUDA
  std::optional<c10::cuda::CUDAGuard> guard;
  if (home.device.is_cuda()) guard.emplace(home.device);
#endif
  loomConfig_t config = LOOM_CONFIG_INITIALIZER;
  config.timeoutMs = loomTimeoutMs(timeout_);
  config.name = "torch-mixed";
  config.device = deviceName.c_str();
  loomComm_t mixed = nullptr;
  call(loomCommSplit(comm_, 0, rank_, &mixed, &config), "init (mixed devices)", comm_,
       getGroupDesc());
  loomCommDestroy(comm_);
  comm_ = mixed;
  mixed_ = true;
#ifdef LOOM_TORCH_CUDA
  if (home.device.is_cuda()) {
    cudaHome_ = true;
    cuda_ = makeCudaComm(comm_, home.device);
  }
#endif
  if (!home.device.is_cpu() && !home.device.is_cuda()) {
    deviceHome_ = true;
    device_ = std::make_unique<DeviceComm>(DeviceComm{comm_, home.device, home.kind});
    attachStream(*device_);
  }
}

#ifdef LOOM_TORCH_CUDA
const CudaComm& ProcessGroupLoom::cudaComm(at::Device device) {
  std::lock_guard<std::mutex> lock(cudaMutex_);
  if (cuda_) {
    TORCH_CHECK(cuda_->device == device, "ProcessGroupLoom: this group runs on ", cuda_->device,
                "; a rank uses one CUDA device per group (got a tensor on ", device, ")");
    return *cuda_;
  }
  TORCH_CHECK(!mixed_, "ProcessGroupLoom: a ", device,
              " tensor on a rank whose home device is not a GPU in a group of mixed devices (no "
              "GPU was visible at init, or LOOM_TORCH_HOME_DEVICE says otherwise): this rank "
              "passes tensors of its home device");
  TORCH_CHECK(!aborted_.load(), "ProcessGroupLoom: the process group was aborted");
  c10::cuda::CUDAGuard guard(device);
  loomUniqueId id = sharedId(kCudaUniqueIdKey);
  std::string deviceName = "cuda:" + std::to_string(device.index());
  loomConfig_t config = LOOM_CONFIG_INITIALIZER;
  config.timeoutMs = loomTimeoutMs(timeout_);
  config.name = "torch-cuda";
  config.device = deviceName.c_str();
  loomComm_t comm = nullptr;
  call(loomCommInitRankConfig(&comm, size_, id, rank_, &config), "init (CUDA)", nullptr,
       getGroupDesc());
  cuda_ = makeCudaComm(comm, device);
  return *cuda_;
}
#endif

const DeviceComm& ProcessGroupLoom::deviceComm(at::Device device) {
  std::lock_guard<std::mutex> lock(deviceMutex_);
  if (device_) {
    TORCH_CHECK(device_->device == device, "ProcessGroupLoom: this group runs on ", device_->device,
                "; a rank uses one device per group (got a tensor on ", device, ")");
    return *device_;
  }
  std::optional<DevicePlugin> plugin = pluginFor(device.type());
  TORCH_CHECK(plugin.has_value(), "ProcessGroupLoom: no loaded Loom device plug-in serves ",
              device.type(), " tensors (a plug-in declares its torch device type; load it with ",
              "LOOM_DEVICE_PLUGIN=/path/plugin.so, docs/plugins.md)");
  TORCH_CHECK(!mixed_, "ProcessGroupLoom: a ", device,
              " tensor on a rank whose home device is another in a group of mixed devices: this "
              "rank passes tensors of its home device (LOOM_TORCH_HOME_DEVICE chooses it)");
  TORCH_CHECK(!aborted_.load(), "ProcessGroupLoom: the process group was aborted");
  loomUniqueId id = sharedId(kDeviceUniqueIdKey);
  const std::string deviceName = plugin->kind + ":" + std::to_string(device.index());
  loomConfig_t config = LOOM_CONFIG_INITIALIZER;
  config.timeoutMs = loomTimeoutMs(timeout_);
  config.name = "torch-device";
  config.device = deviceName.c_str();
  loomComm_t comm = nullptr;
  call(loomCommInitRankConfig(&comm, size_, id, rank_, &config), "init (device)", nullptr,
       getGroupDesc());
  device_ = std::make_unique<DeviceComm>(DeviceComm{comm, device, plugin->kind});
  attachStream(*device_);
  return *device_;
}

void ProcessGroupLoom::eagerConnectSingleDevice(at::Device device) {
  if (device.is_cpu()) return;
#ifdef LOOM_TORCH_CUDA
  if (device.is_cuda()) {
    cudaComm(device);
    return;
  }
#endif
  if (!device.is_cuda()) deviceComm(device);
}

ProcessGroupLoom::~ProcessGroupLoom() { shutdown(); }

void ProcessGroupLoom::shutdown() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (stopping_) return;
    stopping_ = true;
  }
  wake_.notify_all();
  if (worker_.joinable()) worker_.join();
  // After an abort the handles are tombstones that Loom keeps: nothing left to destroy.
  const bool aborted = aborted_.load();
  // A mixed group's device rank: cuda_ or device_ holds the same communicator, destroyed below.
  if (comm_ != nullptr && !aborted && !cudaHome_ && !deviceHome_) loomCommDestroy(comm_);
  comm_ = nullptr;
  {
    std::lock_guard<std::mutex> lock(deviceMutex_);
    if (device_ && !aborted) {
      loomResult_t asyncError = loomSuccess;
      loomCommGetAsyncError(device_->comm, &asyncError);
      // Ops still on Loom's stream end first (a failed communicator's have given up).
      if (asyncError == loomSuccess)
        c10::impl::VirtualGuardImpl(device_->device.type()).synchronizeStream(device_->stream);
      loomCommDestroy(device_->comm);
    }
    device_.reset();
  }
#ifdef LOOM_TORCH_CUDA
  std::lock_guard<std::mutex> lock(cudaMutex_);
  if (cuda_ && !aborted) {
    loomResult_t asyncError = loomSuccess;
    loomCommGetAsyncError(cuda_->comm, &asyncError);
    // Ops still on Loom's stream end first (a failed communicator's kernels have stopped).
    if (asyncError == loomSuccess) cuda_->stream.synchronize();
    cuda_->segments.reset();
    loomCommDestroy(cuda_->comm);
  }
  cuda_.reset();
#endif
}

void ProcessGroupLoom::abort() {
  // Safe from any thread, also while the worker is inside a call on the communicator: that call
  // and every later one fail at once, and the peers learn of the abort.
  if (!aborted_.exchange(true)) {
    if (comm_ != nullptr) loomCommAbort(comm_);
    {
      std::lock_guard<std::mutex> lock(deviceMutex_);
      if (device_ && device_->comm != comm_) loomCommAbort(device_->comm);
    }
#ifdef LOOM_TORCH_CUDA
    std::lock_guard<std::mutex> lock(cudaMutex_);
    if (cuda_ && cuda_->comm != comm_) loomCommAbort(cuda_->comm);  // its kernels stop waiting
#endif
  }
  shutdown();
}

}  // namespace loom::torchbackend
