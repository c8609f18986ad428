#include "exec/threaded_run.hpp"

#include "base/error.hpp"

namespace loom {

ThreadedRun::ThreadedRun() : wake_("the wake-up of a threaded schedule run") {
  // The queue's thread now, so that start() cannot fail to make it with a run queued.
  queue_.submit([](bool) {});
  queue_.drain();
}

ThreadedRun::~ThreadedRun() { abandon(); }

void ThreadedRun::start(Executor& executor, size_t gates, PollSet& set) {
  LOOM_CHECK_INTERNAL(state_.load(std::memory_order_acquire) != kRunning,
                      "a threaded run started while one runs");
  executor_ = &executor;
  pollSet_ = &set;
  if (gates_.size() < gates) gates_.resize(gates);  // grows once to the largest run
  opened_ = applied_ = 0;
  gatesOpened_.store(0, std::memory_order_relaxed);
  awaited_.store(kNone, std::memory_order_relaxed);
  reached_.store(kNone, std::memory_order_relaxed);
  abandon_.store(false, std::memory_order_relaxed);
  failure_ = nullptr;
  state_.store(kRunning, std::memory_order_relaxed);
  // The queue's lock orders everything above before the thread's first look. The thread exists
  // (the constructor): a throw here (no memory for the queue to grow) queued nothing.
  try {
    queue_.submit([this](bool) { run(); });
  } catch (...) {
    state_.store(kIdle, std::memory_order_relaxed);
    throw;
  }
}

void ThreadedRun::open(uint32_t gate) {
  LOOM_CHECK_INTERNAL(opened_ < gates_.size(), "more gates opened than the run has");
  gates_[opened_++] = gate;
  gatesOpened_.store(opened_, std::memory_order_release);
  wake_.signal();
}

void ThreadedRun::waitFor(uint32_t op, const CoreSharing& peers) {
  awaited_.store(op, std::memory_order_release);
  wake_.signal();
  waitUntil(
      [&] {
        const int state = state_.load(std::memory_order_acquire);
        return reached_.load(std::memory_order_acquire) == op || state == kFinished ||
               state == kFailed;
      },
      [] {}, peers);
  throwIfFailed();
}

void ThreadedRun::finish(const CoreSharing& peers) {
  waitUntil([&] { return state_.load(std::memory_order_acquire) != kRunning; }, [] {}, peers);
  throwIfFailed();
}

void ThreadedRun::abandon() noexcept {
  if (state_.load(std::memory_order_acquire) != kRunning) return;
  abandon_.store(true, std::memory_order_release);
  wake_.signal();
  // The thread leaves at its next look (a pass, or a wake-up from the signal): soon.
  waitUntil([&] { return state_.load(std::memory_order_acquire) != kRunning; }, [] {});
}

void ThreadedRun::throwIfFailed() const {
  if (state_.load(std::memory_order_acquire) == kFailed) std::rethrow_exception(failure_);
}

void ThreadedRun::run() noexcept {
  try {
    // No CoreSharing: this thread is not one of the host's ranks, and yields to none of them.
    executor_->driveWith(
        *this, [this] { return executor_->finished() || abandon_.load(std::memory_order_acquire); },
        *pollSet_, CoreSharing());
    state_.store(executor_->finished() ? kFinished : kIdle, std::memory_order_release);
  } catch (...) {
    failure_ = std::current_exception();
    state_.store(kFailed, std::memory_order_release);
  }
}

bool ThreadedRun::pass() {
  const bool opened = openGates();
  const bool moved = executor_->progress().pass();
  publish();
  return opened || moved;
}

void ThreadedRun::check() { executor_->progress().check(); }

void ThreadedRun::gather(PollSet& set) {
  // The loop passes again before it blocks (waitUntil), so a change the consumed signal stood
  // for is seen then.
  wake_.consume();
  executor_->progress().gather(set);
  // A run on shared-memory channels only (a one-host composed exchange forced onto the ring):
  // no socket to block on, so the wait spins, yields and sleeps as an arena wait does (waitUntil),
  // seeing the caller's gates at each look; the wake-up descriptor would put it on poll, in
  // slices of 20-200 us that nothing of the run can cut short. A run on the network blocks on
  // the wake-up too once its sockets are done (what is left waits for the caller's gates): a
  // spinning thread would take a core from the caller's arena work (2x4 hierarchical
  // reduce-scatter of 2-8 MiB: 1.3-1.4x the time).
  if (set.empty() && !executor_->onNetwork()) return;
  set.add(wake_.get(), POLLIN);
}

bool ThreadedRun::openGates() {
  const size_t opened = gatesOpened_.load(std::memory_order_acquire);
  if (applied_ == opened) return false;
  for (; applied_ < opened; ++applied_) executor_->open(gates_[applied_]);
  return true;
}

void ThreadedRun::publish() {
  const uint32_t op = awaited_.load(std::memory_order_acquire);
  if (op != kNone && reached_.load(std::memory_order_relaxed) != op && executor_->isDone(op))
    reached_.store(op, std::memory_order_release);
}

}  // namespace loom
