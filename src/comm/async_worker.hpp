// The progress thread of a non-blocking communicator: runs queued work in order and remembers the
// first failure. loomCommGetAsyncError reports loomInProgress while work is queued or running.
#pragma once

#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>

#include "base/error.hpp"

namespace loom {

class AsyncWorker {
 public:
  AsyncWorker() : thread_([this] { loop(); }) {}
  ~AsyncWorker() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stopping_ = true;
    }
    wake_.notify_all();
    thread_.join();
  }
  void enqueue(std::function<void()> work) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      queue_.push_back(std::move(work));
      ++pending_;
    }
    wake_.notify_all();
  }
  bool busy() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return pending_ > 0;
  }
  // Blocks until the queue is empty (each item is bounded by the communicator's timeout).
  void drain() {
    std::unique_lock<std::mutex> lock(mutex_);
    idle_.wait(lock, [this] { return pending_ == 0; });
  }
  loomResult_t error(std::string* message) const {
    std::lock_guard<std::mutex> lock(mutex_);
    if (message != nullptr) *message = errorMessage_;
    return error_;
  }

 private:
  void loop() {
    std::unique_lock<std::mutex> lock(mutex_);
    for (;;) {
      wake_.wait(lock, [this] { return stopping_ || !queue_.empty(); });
      if (queue_.empty()) return;
      std::function<void()> work = std::move(queue_.front());
      queue_.pop_front();
      bool skip = error_ != loomSuccess;  // after a failure the communicator is aborted
      lock.unlock();
      loomResult_t code = loomSuccess;
      std::string message;
      if (!skip) {
        try {
          work();
        } catch (const Error& e) {
          code = e.code(), message = e.what();
        } catch (const std::exception& e) {
          code = loomInternalError, message = e.what();
        }
      }
      lock.lock();
      if (code != loomSuccess && error_ == loomSuccess) error_ = code, errorMessage_ = message;
      if (--pending_ == 0) idle_.notify_all();
    }
  }

  mutable std::mutex mutex_;
  std::condition_variable wake_, idle_;
  std::deque<std::function<void()>> queue_;
  size_t pending_ = 0;
  bool stopping_ = false;
  loomResult_t error_ = loomSuccess;
  std::string errorMessage_;
  std::thread thread_;  // last: starts after the members it uses exist
};

}  // namespace loom
