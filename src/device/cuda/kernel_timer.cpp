#include "device/cuda/kernel_timer.hpp"

#include "base/wait.hpp"
#include "device/cuda/cuda_check.hpp"

namespace loom {

namespace {

// A reference older than this is renewed when nothing is pending: cudaEventElapsedTime's float of
// milliseconds loses sub-microsecond resolution after some seconds.
constexpr int64_t kReanchorNs = 2'000'000'000;

}  // namespace

KernelTimer::~KernelTimer() {
  for (Span& s : spans_) {
    if (s.start != nullptr) cudaEventDestroy(s.start);
    if (s.stop != nullptr) cudaEventDestroy(s.stop);
  }
  for (cudaEvent_t e : free_) cudaEventDestroy(e);
  if (reference_ != nullptr) cudaEventDestroy(reference_);
  if (anchorStream_ != nullptr) cudaStreamDestroy(anchorStream_);
}

void KernelTimer::abandon() {
  std::lock_guard<std::mutex> lock(mutex_);
  spans_.clear();
  free_.clear();
  pending_.clear();
  freeHandles_.clear();
  reference_ = nullptr;
  anchorStream_ = nullptr;
  timeline_ = nullptr;
}

void KernelTimer::setTimeline(DeviceTimeline* timeline) {
  std::lock_guard<std::mutex> lock(mutex_);
  timeline_ = timeline;
  if (timeline_ != nullptr && reference_ == nullptr) {
    LOOM_CUDA_CHECK(cudaEventCreate(&reference_));
    LOOM_CUDA_CHECK(cudaStreamCreateWithFlags(&anchorStream_, cudaStreamNonBlocking));
    anchor();
  }
}

void KernelTimer::anchor() {
  LOOM_CUDA_CHECK(cudaEventRecord(reference_, anchorStream_));
  LOOM_CUDA_CHECK(cudaEventSynchronize(reference_));
  referenceNs_ = static_cast<int64_t>(steadyNowNs());
}

cudaEvent_t KernelTimer::takeEvent() {
  if (!free_.empty()) {
    cudaEvent_t e = free_.back();
    free_.pop_back();
    return e;
  }
  cudaEvent_t e = nullptr;
  LOOM_CUDA_CHECK(cudaEventCreate(&e));  // with timing: these are measured
  return e;
}

int KernelTimer::begin(cudaStream_t stream) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (timeline_ == nullptr) return -1;
  int handle;
  if (!freeHandles_.empty()) {
    handle = freeHandles_.back();
    freeHandles_.pop_back();
  } else {
    handle = static_cast<int>(spans_.size());
    spans_.emplace_back();
  }
  Span& s = spans_[handle];
  s.start = takeEvent();
  s.stop = takeEvent();
  s.ended = false;
  LOOM_CUDA_CHECK(cudaEventRecord(s.start, stream));
  return handle;
}

void KernelTimer::end(int handle, const char* name, uint64_t call, cudaStream_t stream) {
  if (handle < 0) return;
  std::lock_guard<std::mutex> lock(mutex_);
  Span& s = spans_[handle];
  s.name = name;
  s.call = call;
  s.ended = true;
  LOOM_CUDA_CHECK(cudaEventRecord(s.stop, stream));
  pending_.push_back(handle);
}

void KernelTimer::poll() {
  std::lock_guard<std::mutex> lock(mutex_);
  if (timeline_ == nullptr) return;
  // In end order: a stream's events complete in order, and a later stream's need not wait long.
  while (!pending_.empty()) {
    Span& s = spans_[pending_.front()];
    if (cudaEventQuery(s.stop) != cudaSuccess) break;
    float startMs = 0, stopMs = 0;
    if (cudaEventElapsedTime(&startMs, reference_, s.start) == cudaSuccess &&
        cudaEventElapsedTime(&stopMs, reference_, s.stop) == cudaSuccess)
      timeline_->deviceSpan(s.name, s.call, referenceNs_ + static_cast<int64_t>(startMs * 1e6),
                            referenceNs_ + static_cast<int64_t>(stopMs * 1e6));
    free_.push_back(s.start);
    free_.push_back(s.stop);
    s.start = s.stop = nullptr;
    freeHandles_.push_back(pending_.front());
    pending_.pop_front();
  }
  if (pending_.empty() && static_cast<int64_t>(steadyNowNs()) - referenceNs_ > kReanchorNs) {
    anchor();
  }
}

}  // namespace loom
