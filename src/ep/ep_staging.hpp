// A device rank's arrays in host memory, for the host paths (a device the host cannot address,
// without expert-parallel kernels of its own: the emulated accelerator, a plug-in, a CUDA rank
// of a heterogeneous communicator). A call's inputs are copied into pinned host memory on the
// caller's stream, the host work runs on the copies, and the outputs are copied back; the call
// then waits for its stream (it blocks, as the device's staged collectives without host tasks
// do). The pinned memory grows to the largest call and is reused.
//
// Staging a call takes two passes over its arrays: measure (every array returns null and counts
// its bytes), then stage (every array gets its place); ep/expert_parallel.cpp lists the arrays.
#pragma once

#include <cstddef>
#include <vector>

#include "device/device.hpp"

namespace loom::ep {

class Staging {
 public:
  explicit Staging(Device& device) : device_(device) {}
  ~Staging();
  Staging(const Staging&) = delete;
  Staging& operator=(const Staging&) = delete;

  void measure();                   // pass 1
  void stage(loomStream_t stream);  // pass 2: the memory for what pass 1 counted
  // An array of `count` elements: copied to the host now (input), back at finish (output), or
  // both. Null stays null.
  template <typename T>
  T* input(const T* device, size_t count) {
    return static_cast<T*>(place(const_cast<T*>(device), count * sizeof(T), true, false));
  }
  template <typename T>
  T* output(T* device, size_t count) {
    return static_cast<T*>(place(device, count * sizeof(T), false, true));
  }
  template <typename T>
  T* inout(T* device, size_t count) {
    return static_cast<T*>(place(device, count * sizeof(T), true, true));
  }
  void arrived();  // the inputs are on the host
  void finish();   // the outputs are back on the device

 private:
  void* place(void* device, size_t bytes, bool in, bool out);

  struct Back {
    void* device;
    const char* host;
    size_t bytes;
  };
  Device& device_;
  bool measuring_ = true;
  char* host_ = nullptr;
  size_t capacity_ = 0, used_ = 0;
  loomStream_t stream_ = nullptr;
  std::vector<Back> back_;
};

}  // namespace loom::ep
