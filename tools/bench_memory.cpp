#include "bench_memory.hpp"

#include <dlfcn.h>
#include <unistd.h>

#include <climits>
#include <cstdlib>
#include <cstring>

#include "tool_cli.hpp"

#if LOOM_HAVE_CUDA
#include <cuda_runtime.h>
#endif

// The installed tools' directory to the installed libraries' (tools/CMakeLists.txt).
#ifndef LOOM_INSTALL_BIN_TO_LIB
#define LOOM_INSTALL_BIN_TO_LIB "../lib"
#endif

namespace loom::tool {

Memory::~Memory() {
  for (void* p : mallocd_) std::free(p);
}

void* Memory::mallocd(size_t bytes) {
  void* p = std::malloc(bytes > 0 ? bytes : 1);
  if (p == nullptr) die("loom", "cannot allocate " + std::to_string(bytes) + " bytes");
  return mallocd_.emplace_back(p);
}

void Memory::toHost(void* host, const void* dev, size_t bytes) { std::memcpy(host, dev, bytes); }
void Memory::toDevice(void* dev, const void* host, size_t bytes) { std::memcpy(dev, host, bytes); }

int launcherLocalRank() {
  for (const char* name : {"LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_RANK", "SLURM_LOCALID"}) {
    const char* value = std::getenv(name);
    if (value != nullptr && *value != '\0') return std::max(0, std::atoi(value));
  }
  return 0;
}

namespace {

const loomDevicePlugin_v1* pluginTable(const std::string& path) {
  // Loom loads the same file: dlopen hands out the one copy of it.
  void* lib = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (lib == nullptr) return nullptr;
  auto* table = static_cast<const loomDevicePlugin_v1*>(dlsym(lib, LOOM_DEVICE_PLUGIN_SYMBOL));
  if (table == nullptr || table->size < LOOM_DEVICE_PLUGIN_V1_BASE_SIZE || table->kind == nullptr)
    return nullptr;
  return table;
}

std::string executableDir() {
  char path[PATH_MAX] = {0};
  const ssize_t n = readlink("/proc/self/exe", path, sizeof(path) - 1);
  if (n <= 0) return ".";
  std::string text(path, static_cast<size_t>(n));
  return text.substr(0, text.rfind('/'));
}

}  // namespace

std::string findDevicePlugin(const std::string& kind, std::string* why) {
  const char* listed = std::getenv("LOOM_DEVICE_PLUGIN");
  std::string tried;
  if (listed != nullptr && *listed != '\0') {
    const std::string list = listed;
    for (size_t start = 0; start <= list.size();) {
      const size_t end = std::min(list.find(',', start), list.size());
      const std::string path = list.substr(start, end - start);
      start = end + 1;
      const loomDevicePlugin_v1* table = path.empty() ? nullptr : pluginTable(path);
      if (table != nullptr && kind == table->kind) return path;
    }
    tried = "LOOM_DEVICE_PLUGIN=" + list + " names no plug-in of that kind; ";
  }
  // Loom's own plug-ins: kind "loom-NAME" is libloom-device-NAME.so.
  const std::string name = kind.rfind("loom-", 0) == 0 ? kind.substr(5) : kind;
  const std::string file = "libloom-device-" + name + ".so";
  const std::string dir = executableDir();
  for (const std::string& candidate : {dir + "/../plugins/device/" + name + "/" + file,
                                       dir + "/" + LOOM_INSTALL_BIN_TO_LIB + "/loom/" + file}) {
    if (access(candidate.c_str(), R_OK) != 0) continue;
    const loomDevicePlugin_v1* table = pluginTable(candidate);
    if (table != nullptr && kind == table->kind) return candidate;
  }
  *why = "no device plug-in of kind '" + kind + "': " + tried + "no " + file + " in " + dir +
         "/../plugins/device/" + name + "/ (a build tree) or " + dir + "/" +
         LOOM_INSTALL_BIN_TO_LIB + "/loom/ (an installation); set LOOM_DEVICE_PLUGIN=/path/lib.so";
  return "";
}

PluginMemory::PluginMemory(const char* tool, const std::string& kind, int ordinal)
    : tool_(tool), kind_(kind) {
  std::string why;
  const std::string path = findDevicePlugin(kind, &why);
  if (path.empty()) die(tool_, why);
  if (loomDevicePluginLoad(path.c_str()) != loomSuccess)
    die(tool_, std::string("loading ") + path + ": " + loomGetLastError(nullptr));
  plugin_ = pluginTable(path);
  if (plugin_ == nullptr) die(tool_, path + ": " + dlerror());
  int count = 0;
  ok(plugin_->getDeviceCount(&count), "getDeviceCount");
  if (count < 1) die(tool_, kind + ": the plug-in reports no device");
  dev_ = ordinal >= 0 ? ordinal : launcherLocalRank() % count;
  if (dev_ >= count)
    die(tool_, kind + ":" + std::to_string(dev_) + ": the plug-in has " + std::to_string(count) +
                   " devices");
  loomDevicePluginDeviceInfo_v1 info{};
  ok(plugin_->getDeviceInfo(dev_, &info), "getDeviceInfo");
  model_ = info.model;
  ok(plugin_->streamCreate(dev_, &stream_), "streamCreate");
}

PluginMemory::~PluginMemory() {
  if (stream_ != nullptr) {
    plugin_->streamSynchronize(dev_, stream_);
    plugin_->streamDestroy(dev_, stream_);
  }
  for (void* p : device_) plugin_->memFree(dev_, p);
  for (void* p : pinned_) plugin_->hostFree(dev_, p);
}

void PluginMemory::ok(loomResult_t r, const char* what) const {
  if (r == loomSuccess) return;
  const char* message = plugin_->getLastError != nullptr ? plugin_->getLastError() : "";
  die(tool_, kind_ + " " + what + " failed: " + loomGetErrorString(r) + " " + message);
}

void* PluginMemory::allocate(size_t bytes) {
  void* ptr = nullptr;
  ok(plugin_->memAlloc(dev_, bytes > 0 ? bytes : 1, &ptr), "memAlloc");
  return device_.emplace_back(ptr);
}

void* PluginMemory::allocateHost(size_t bytes) {
  if (plugin_->hostAlloc == nullptr || plugin_->hostFree == nullptr) return mallocd(bytes);
  void* ptr = nullptr;
  ok(plugin_->hostAlloc(dev_, bytes > 0 ? bytes : 1, &ptr), "hostAlloc");
  return pinned_.emplace_back(ptr);
}

void PluginMemory::toHost(void* host, const void* dev, size_t bytes) {
  ok(plugin_->memcpyAsync(dev_, host, dev, bytes, loomMemcpyDeviceToHost, stream_), "copy");
  synchronize();
}

void PluginMemory::toDevice(void* dev, const void* host, size_t bytes) {
  toDeviceQueued(dev, host, bytes);
  synchronize();
}

void PluginMemory::toDeviceQueued(void* dev, const void* host, size_t bytes) {
  ok(plugin_->memcpyAsync(dev_, dev, host, bytes, loomMemcpyHostToDevice, stream_), "copy");
}

void PluginMemory::synchronize() { ok(plugin_->streamSynchronize(dev_, stream_), "synchronize"); }

std::string PluginMemory::device() const { return kind_ + ":" + std::to_string(dev_); }

std::string PluginMemory::description() const { return device() + " (" + model_ + ")"; }

#if LOOM_HAVE_CUDA
namespace {

class CudaMemory : public Memory {
 public:
  CudaMemory(const char* tool, int ordinal) : tool_(tool) {
    if (ordinal >= 0) ok(cudaSetDevice(ordinal), "cudaSetDevice");
    ok(cudaGetDevice(&ordinal_), "cudaGetDevice");
    ok(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "cudaStreamCreate");
  }
  ~CudaMemory() override {
    cudaStreamSynchronize(stream_);
    for (void* p : device_) cudaFree(p);
    for (void* p : pinned_) cudaFreeHost(p);
    cudaStreamDestroy(stream_);
  }
  void* allocate(size_t bytes) override {
    void* ptr = nullptr;
    ok(cudaMalloc(&ptr, bytes > 0 ? bytes : 1), "cudaMalloc");
    return device_.emplace_back(ptr);
  }
  void* allocateHost(size_t bytes) override {
    void* ptr = nullptr;
    ok(cudaMallocHost(&ptr, bytes > 0 ? bytes : 1), "cudaMallocHost");
    return pinned_.emplace_back(ptr);
  }
  void toHost(void* host, const void* dev, size_t bytes) override {
    ok(cudaMemcpyAsync(host, dev, bytes, cudaMemcpyDeviceToHost, stream_), "copy");
    synchronize();
  }
  void toDevice(void* dev, const void* host, size_t bytes) override {
    toDeviceQueued(dev, host, bytes);
    synchronize();
  }
  void toDeviceQueued(void* dev, const void* host, size_t bytes) override {
    ok(cudaMemcpyAsync(dev, host, bytes, cudaMemcpyHostToDevice, stream_), "copy");
  }
  void synchronize() override { ok(cudaStreamSynchronize(stream_), "cudaStreamSynchronize"); }
  loomStream_t stream() override { return stream_; }
  std::string device() const override { return "cuda:" + std::to_string(ordinal_); }

 private:
  void ok(cudaError_t e, const char* what) const {
    if (e != cudaSuccess) die(tool_, std::string(what) + ": " + cudaGetErrorString(e));
  }

  const char* tool_;
  int ordinal_ = 0;
  cudaStream_t stream_ = nullptr;
  std::vector<void*> device_, pinned_;
};

}  // namespace

std::unique_ptr<Memory> makeCudaMemory(const char* tool, int ordinal) {
  return std::make_unique<CudaMemory>(tool, ordinal);
}
#else
std::unique_ptr<Memory> makeCudaMemory(const char* tool, int) {
  die(tool, "CUDA ranks need a build with CUDA");
}
#endif

std::unique_ptr<Memory> memoryForDevice(const char* tool, const std::string& spec) {
  const size_t colon = spec.find(':');
  const std::string kind = spec.substr(0, colon);
  int ordinal = -1;
  if (colon != std::string::npos) {
    char* end = nullptr;
    const long n = std::strtol(spec.c_str() + colon + 1, &end, 10);
    if (end == spec.c_str() + colon + 1 || *end != '\0' || n < 0 || n > (1 << 20))
      die(tool, "device '" + spec + "': expected KIND or KIND:N");
    ordinal = static_cast<int>(n);
  }
  if (kind == "cpu") return std::make_unique<HostMemory>();
#if LOOM_HAVE_CUDA
  if (kind == "cuda") {
    int count = 0;
    if (cudaGetDeviceCount(&count) != cudaSuccess || count < 1)
      die(tool, "device '" + spec + "': no CUDA device is visible");
    return makeCudaMemory(tool, ordinal >= 0 ? ordinal : launcherLocalRank() % count);
  }
#endif
  if (kind == "cuda") return makeCudaMemory(tool, ordinal);
  return std::make_unique<PluginMemory>(tool, kind, ordinal);
}

}  // namespace loom::tool
