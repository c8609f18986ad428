// One rank's memory for the benchmarks that place ranks on devices of any kind (loom-bench
// --device KIND and --placement, loom-hetero-bench): buffers on the host, on a CUDA GPU, or on a
// device plug-in's device, with copies to and from the host and the stream the rank's Loom calls
// take. Each memory owns what it hands out.
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "loom/loom.h"
#include "loom/loom_device_plugin.h"

namespace loom::tool {

class Memory {
 public:
  virtual ~Memory();
  virtual void* allocate(size_t bytes) = 0;
  // Host memory for staging (pinned where the device has it).
  virtual void* allocateHost(size_t bytes) { return mallocd(bytes); }
  virtual void toHost(void* host, const void* dev, size_t bytes);
  virtual void toDevice(void* dev, const void* host, size_t bytes);
  // The same, only enqueued on stream() (the host does not wait): a check's upload, so that the
  // collective must order itself after user work still running on the stream.
  virtual void toDeviceQueued(void* dev, const void* host, size_t bytes) {
    toDevice(dev, host, bytes);
  }
  virtual void synchronize() {}
  virtual loomStream_t stream() { return nullptr; }
  // The device spec a communicator of this rank names: "cpu", "cuda", "loom-emu:1".
  virtual std::string device() const = 0;
  // For the rank lines: "cpu", "loom-emu:1 (emulated accelerator)".
  virtual std::string description() const { return device(); }

 protected:
  void* mallocd(size_t bytes);

 private:
  std::vector<void*> mallocd_;
};

class HostMemory : public Memory {
 public:
  void* allocate(size_t bytes) override { return mallocd(bytes); }
  std::string device() const override { return "cpu"; }
};

// The device plug-in of `kind` (LOOM_DEVICE_PLUGIN's file of that kind, else where this build or
// installation puts Loom's own plug-ins), loaded into Loom too (loomDevicePluginLoad). `ordinal`
// < 0: the launcher's local rank modulo the plug-in's device count.
class PluginMemory : public Memory {
 public:
  PluginMemory(const char* tool, const std::string& kind, int ordinal);
  ~PluginMemory() override;
  void* allocate(size_t bytes) override;
  void* allocateHost(size_t bytes) override;
  void toHost(void* host, const void* dev, size_t bytes) override;
  void toDevice(void* dev, const void* host, size_t bytes) override;
  void toDeviceQueued(void* dev, const void* host, size_t bytes) override;
  void synchronize() override;
  loomStream_t stream() override { return stream_; }
  std::string device() const override;
  std::string description() const override;

 private:
  void ok(loomResult_t r, const char* what) const;

  const char* tool_;
  const loomDevicePlugin_v1* plugin_ = nullptr;
  std::string kind_;
  std::string model_;
  int dev_ = 0;
  loomStream_t stream_ = nullptr;
  std::vector<void*> device_, pinned_;
};

// A CUDA GPU (builds with CUDA only): `ordinal` < 0 keeps the thread's current device.
std::unique_ptr<Memory> makeCudaMemory(const char* tool, int ordinal);

// The memory of one device spec ("cpu", "cuda", "cuda:1", a plug-in's "kind[:N]"); exits the
// tool with a message where this build or host cannot provide it.
std::unique_ptr<Memory> memoryForDevice(const char* tool, const std::string& spec);

// The file of the device plug-in of `kind`: among LOOM_DEVICE_PLUGIN's files the one whose
// table names that kind, else Loom's own plug-in of that name ("loom-emu": libloom-device-emu.so)
// where the build tree (BUILD/plugins/device/emu/) or an installation (PREFIX/lib/loom/) puts it,
// found from this executable's place. "" with *why set when there is none.
std::string findDevicePlugin(const std::string& kind, std::string* why);

// The launcher's local rank (LOCAL_RANK, OMPI_COMM_WORLD_LOCAL_RANK, SLURM_LOCALID), else 0.
int launcherLocalRank();

}  // namespace loom::tool
