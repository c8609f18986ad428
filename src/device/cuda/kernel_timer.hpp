// Device-side spans of a CUDA communicator's calls for LOOM_TRACE (device/native.hpp's
// DeviceTimeline): an event recorded on the call's stream before its kernels and one after, and,
// once the second has happened (the engine's watchdog polls), the span on the host's steady clock:
// the events' distance from a reference event whose host time was taken when it completed.
// Captured calls (CUDA graphs) are not timed: their kernels run at the graph's launch.
// Nothing is allocated per call once warm: events come from a pool.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <deque>
#include <mutex>
#include <vector>

#include "device/native.hpp"

namespace loom {

class KernelTimer {
 public:
  KernelTimer() = default;
  ~KernelTimer();
  KernelTimer(const KernelTimer&) = delete;
  KernelTimer& operator=(const KernelTimer&) = delete;

  // From now on calls are timed and reported to `timeline` (null: no longer). The caller runs on
  // the communicator's device.
  void setTimeline(DeviceTimeline* timeline);
  bool active() const { return timeline_ != nullptr; }
  // Before a call's kernels on `stream`: the handle to end() with (-1: not timed).
  int begin(cudaStream_t stream);
  // After them: `name` (static) and the call's number.
  void end(int handle, const char* name, uint64_t call, cudaStream_t stream);
  // Reports the spans whose end has happened (the watchdog, every tick).
  void poll();
  // The CUDA context is gone (cudaDeviceReset): its events are forgotten, not destroyed.
  void abandon();

 private:
  struct Span {
    cudaEvent_t start = nullptr, stop = nullptr;
    const char* name = nullptr;
    uint64_t call = 0;
    bool ended = false;
  };
  cudaEvent_t takeEvent();
  void anchor();  // a new reference event and its host time

  std::mutex mutex_;
  DeviceTimeline* timeline_ = nullptr;
  cudaEvent_t reference_ = nullptr;
  cudaStream_t anchorStream_ = nullptr;  // empty and non-blocking: an anchor never waits
  int64_t referenceNs_ = 0;
  std::vector<cudaEvent_t> free_;
  std::vector<Span> spans_;  // by handle
  std::vector<int> freeHandles_;
  std::deque<int> pending_;  // handles in end order
};

}  // namespace loom
