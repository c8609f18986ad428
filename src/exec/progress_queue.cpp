#include "exec/progress_queue.hpp"

#include <algorithm>
#include <optional>

namespace loom {

ProgressQueue::ProgressQueue(std::function<void(const Error&)> fail) : fail_(std::move(fail)) {}

ProgressQueue::~ProgressQueue() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
    interrupt_.store(true);
  }
  changed_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void ProgressQueue::setFailHook(std::function<void(const Error&)> fail) {
  std::lock_guard<std::mutex> lock(mutex_);
  fail_ = std::move(fail);
}

void ProgressQueue::startLocked() {
  if (!thread_.joinable() && !stopping_) thread_ = std::thread([this] { loop(); });
}

void ProgressQueue::submit(Task task) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (count_ == tasks_.size()) {
      // Full: grow, keeping the order (only until the most tasks ever queued at once).
      std::vector<Task> bigger(std::max<size_t>(8, 2 * tasks_.size()));
      for (size_t i = 0; i < count_; ++i)
        bigger[i] = std::move(tasks_[(head_ + i) % tasks_.size()]);
      tasks_.swap(bigger);
      head_ = 0;
    }
    tasks_[(head_ + count_) % tasks_.size()] = std::move(task);
    ++count_;
    interrupt_.store(true);
    startLocked();
  }
  changed_.notify_all();
}

bool ProgressQueue::busy() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return count_ > 0 || running_;
}

void ProgressQueue::drain() {
  std::unique_lock<std::mutex> lock(mutex_);
  changed_.wait(lock, [&] { return count_ == 0 && !running_; });
}

loomResult_t ProgressQueue::error(std::string* message) const {
  std::lock_guard<std::mutex> lock(mutex_);
  if (message != nullptr) *message = errorMessage_;
  return error_;
}

void ProgressQueue::attach(Background& work) {
  std::lock_guard<std::mutex> lock(mutex_);
  background_.push_back(&work);
}

void ProgressQueue::detach(Background& work) {
  std::unique_lock<std::mutex> lock(mutex_);
  std::erase(background_, &work);
  changed_.wait(lock, [&] { return driving_ != &work; });
}

void ProgressQueue::wake() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    ++wakeups_;
    startLocked();
  }
  changed_.notify_all();
}

bool ProgressQueue::backgroundWantsLocked() const {
  return std::any_of(background_.begin(), background_.end(),
                     [](Background* b) { return b->wantsDriving(); });
}

void ProgressQueue::runTask(std::unique_lock<std::mutex>& lock) {
  Task task = std::move(tasks_[head_]);
  tasks_[head_] = nullptr;
  head_ = (head_ + 1) % tasks_.size();
  --count_;
  interrupt_.store(count_ > 0 || stopping_);
  running_ = true;
  const bool skip = error_ != loomSuccess;
  std::function<void(const Error&)> fail = fail_;
  lock.unlock();
  std::optional<Error> failure;
  try {
    task(skip);
  } catch (const Error& e) {
    failure = e;
  } catch (const std::exception& e) {
    failure = Error(loomInternalError, e.what());
  }
  task = nullptr;  // what it captured goes now, not at the slot's reuse
  if (failure && failure->code() != loomInvalidArgument && fail) {
    try {
      fail(*failure);
    } catch (...) {  // reporting failed too: the error below still stands
    }
  }
  lock.lock();
  if (failure && error_ == loomSuccess) error_ = failure->code(), errorMessage_ = failure->what();
  running_ = false;
  changed_.notify_all();
}

void ProgressQueue::driveBackground(std::unique_lock<std::mutex>& lock) {
  for (Background* work : background_) {
    if (!work->wantsDriving()) continue;
    driving_ = work;
    lock.unlock();
    // Until a task arrives (it runs first) or the queue stops.
    work->driveWhile([this] { return interrupt_.load(std::memory_order_relaxed); });
    lock.lock();
    driving_ = nullptr;
    changed_.notify_all();
    return;
  }
}

void ProgressQueue::loop() {
  std::unique_lock<std::mutex> lock(mutex_);
  for (;;) {
    uint64_t seen = wakeups_;
    changed_.wait(lock, [&] {
      return count_ > 0 || stopping_ || wakeups_ != seen || backgroundWantsLocked();
    });
    if (count_ > 0) {
      runTask(lock);
      continue;
    }
    if (stopping_) return;
    driveBackground(lock);
  }
}

}  // namespace loom
