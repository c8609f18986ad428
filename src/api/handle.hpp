// The C handle behind loomComm_t and the guard every C entry point runs under.
//
// A destroyed handle stays allocated as a small tombstone (the Comm inside is freed), so a call on
// a destroyed communicator reports loomInvalidUsage instead of touching freed memory. Calls count
// themselves in `inflight`; destroy waits for running calls and refuses new ones.
#pragma once

#include <atomic>
#include <memory>
#include <string>
#include <utility>

#include "base/error.hpp"
#include "comm/comm.hpp"
#include "exec/progress_queue.hpp"

enum class HandleState : int { kInitializing, kLive, kDestroying, kDestroyed };

struct loomComm {
  static constexpr uint64_t kMagic = 0x4c4f4f4d434f4d4dull;  // "LOOMCOMM"
  uint64_t magic = kMagic;
  std::atomic<HandleState> state{HandleState::kInitializing};
  std::atomic<int> inflight{0};
  std::atomic<bool> ready{false};
  std::atomic<bool> abortFlag{false};  // the Comm's abort flag (CommConfig::abortFlag)  // comm is
                                       // set (published after it, for non-blocking init)
  bool blocking = true;
  int nranks = 0;
  int rank = 0;
  // Non-blocking communicators only: the progress queue their initialization and calls run on
  // (the communicator's tree uses it too). Declared before comm: it outlives it.
  std::unique_ptr<loom::ProgressQueue> queue;
  std::unique_ptr<loom::Comm> comm;  // set once initialization succeeded
};

namespace loom {

void setLastError(const std::string& message);
const std::string& lastError();

// Runs body; turns every exception into a loomResult_t and keeps its message for loomGetLastError.
template <typename Body>
loomResult_t guarded(const char* function, Body&& body) noexcept {
  try {
    return body();
  } catch (const Error& e) {
    setLastError(std::string(function) + ": " + e.what());
    return e.code();
  } catch (const std::bad_alloc&) {
    setLastError(std::string(function) + ": out of memory");
    return loomSystemError;
  } catch (const std::exception& e) {
    setLastError(std::string(function) + ": internal error: " + e.what());
    return loomInternalError;
  } catch (...) {
    setLastError(std::string(function) + ": unknown internal error");
    return loomInternalError;
  }
}

// Pins a handle for the length of one call.
class HandleUse {
 public:
  explicit HandleUse(loomComm_t handle);
  ~HandleUse() {
    if (handle_ != nullptr) handle_->inflight.fetch_sub(1);
  }
  HandleUse(const HandleUse&) = delete;
  HandleUse& operator=(const HandleUse&) = delete;
  loomComm* operator->() const { return handle_; }
  loomComm* get() const { return handle_; }
  // Keeps the pin past this object's life; the caller must decrement `inflight` itself.
  loomComm* release() { return std::exchange(handle_, nullptr); }
  // The ready communicator; a non-blocking one still initializing is loomInProgress.
  Comm& comm() const;

 private:
  loomComm* handle_ = nullptr;
};

// Runs work now (blocking communicator) or queues it on the progress thread (non-blocking), in
// which case the call answers loomInProgress.
template <typename Work>
loomResult_t runOrQueue(loomComm* handle, Work&& work) {
  if (handle->blocking) {
    work();
    return loomSuccess;
  }
  handle->queue->submit([work = std::forward<Work>(work)](bool skip) mutable {
    if (!skip) work();  // after a failure the communicator is aborted: the rest is skipped
  });
  return loomInProgress;
}

}  // namespace loom
