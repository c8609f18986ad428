// StreamJobs' failure order (comm/stream_jobs.hpp): a stream-ordered call whose host part fails
// has its failure recorded before the stream's gate opens.
#include "comm/stream_jobs.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <thread>

#include "device/cpu/cpu_device.hpp"

namespace loom {
namespace {

// Holds the progress queue's thread inside its failure hook until let go: the moment between a
// job's throw and the queue's own record, where the soak once caught a wrong result (seed 54).
class Latch {
 public:
  void wait() {
    std::unique_lock<std::mutex> lock(mutex_);
    changed_.wait(lock, [&] { return open_; });
  }
  void open() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      open_ = true;
    }
    changed_.notify_all();
  }

 private:
  std::mutex mutex_;
  std::condition_variable changed_;
  bool open_ = false;
};

// The stream passes the gate (the failure opened it) while the queue has not yet recorded the
// failure: by then the communicator's fail hook must have run, so a caller that synced its stream
// and asks for the asynchronous error sees it. Before 0771f0b the gate opened first: a caller in
// that gap saw success with an output nobody wrote.
TEST(StreamJobs, AFailedHostPartIsRecordedBeforeTheStreamPassesItsGate) {
  Latch queueRecords;  // outlives the queue, whose thread waits on it
  std::atomic<int> queueFailures{0};
  ProgressQueue queue([&](const Error&) {
    queueRecords.wait();
    ++queueFailures;
  });
  std::atomic<bool> recorded{false};
  StreamJobs::Hooks hooks;
  hooks.run = [](StreamJob&) { LOOM_THROW(loomRemoteError, "rank 1 died"); };
  hooks.fail = [&](const Error& e) {
    EXPECT_EQ(e.code(), loomRemoteError);
    recorded = true;
  };
  std::unique_ptr<Device> device = createCpuDevice();
  StreamJobs jobs(*device, hooks, queue);

  jobs.begin(nullptr);
  jobs.submitEarly();
  bool recordedWhenPassed = false;
  std::thread stream([&] {  // what a stream's worker does with the call's gate task
    jobs.gate().run();
    recordedWhenPassed = recorded.load();
  });
  stream.join();  // the gate opens only when the host part failed
  EXPECT_TRUE(recordedWhenPassed);
  EXPECT_EQ(queueFailures.load(), 0);  // still held: the order did not depend on it
  jobs.enqueued(nullptr);
  queueRecords.open();
  EXPECT_TRUE(jobs.stop());
  queue.drain();
  EXPECT_EQ(queueFailures.load(), 1);
}

// A communicator destroyed as soon as its last stream-ordered job ran: drain() sees the job done
// and the StreamJobs go while the progress thread may still be finishing that job. Before the
// job's notify moved under the lock, TSan saw the condition variable destroyed under the notify
// (the comm tests run under TSan in a sanitizer slot); here every job must run, and exactly once.
TEST(StreamJobs, DestroyedRightAfterItsLastJobRan) {
  ProgressQueue queue([](const Error&) {});
  std::unique_ptr<Device> device = createCpuDevice();
  std::atomic<int> ran{0};
  constexpr int kRounds = 200;
  for (int round = 0; round < kRounds; ++round) {
    StreamJobs::Hooks hooks;
    hooks.run = [&](StreamJob&) { ++ran; };
    auto jobs = std::make_unique<StreamJobs>(*device, hooks, queue);
    jobs->begin(nullptr);
    jobs->submitEarly();
    jobs->enqueued(nullptr);
    jobs.reset();  // drains, then frees the job's mutex and condition variable
  }
  queue.drain();
  EXPECT_EQ(ran.load(), kRounds);
}

}  // namespace
}  // namespace loom
