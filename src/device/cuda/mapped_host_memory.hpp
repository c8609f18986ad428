// Host memory Loom owns, page-locked and mapped into the GPUs' address space (cudaHostRegister),
// for words that threads of Loom and kernels both read and write (a kernel's status, the import
// table of registered buffers). Unlike cudaHostAlloc's memory it outlives the CUDA context: after
// cudaDeviceReset, or the runtime's teardown at exit, a thread of Loom still reading it reads its
// own memory, not a page the context took with it.
#pragma once

#include <cstddef>

namespace loom {

class MappedHostMemory {
 public:
  MappedHostMemory() = default;
  // Zeroed, page-aligned, registered with the current device's context. Throws
  // loomUnhandledCudaError when CUDA refuses, loomSystemError without memory.
  explicit MappedHostMemory(size_t bytes);
  ~MappedHostMemory();
  MappedHostMemory(MappedHostMemory&& other) noexcept;
  MappedHostMemory& operator=(MappedHostMemory&& other) noexcept;
  MappedHostMemory(const MappedHostMemory&) = delete;
  MappedHostMemory& operator=(const MappedHostMemory&) = delete;

  void* host() const { return host_; }
  void* device() const { return device_; }  // as kernels address it
  // The context that held the registration is gone: free the memory without asking CUDA.
  void forgetRegistration() { registered_ = false; }

 private:
  void reset();

  void* host_ = nullptr;
  void* device_ = nullptr;
  bool registered_ = false;
};

}  // namespace loom
