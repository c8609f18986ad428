// A stepwise run driven on a thread of its own (ThreadedRun): the caller's gates reach the run,
// the operations it waits for are reported back, the run's failure reaches the caller, and a
// run that cannot end is abandoned without a hang; the thread serves run after run.
#include "exec/threaded_run.hpp"

#include <gtest/gtest.h>

#include <chrono>
#include <string>
#include <thread>

#include "base/error.hpp"
#include "device/cpu/cpu_device.hpp"
#include "memory_channel.hpp"

namespace loom {
namespace {

struct Side {
  Schedule schedule;
  Executor executor;
  std::vector<Channel*> channels;
  std::function<void(int)> check = [](int) {};
  PollSet pollSet;
  ExecEnv env;
};

std::vector<Side> makeSides(std::vector<std::vector<std::unique_ptr<Channel>>>& owned,
                            Device& device) {
  std::vector<Side> sides(owned.size());
  for (size_t r = 0; r < owned.size(); ++r) {
    for (auto& c : owned[r]) sides[r].channels.push_back(c.get());
    sides[r].env.device = &device;
    sides[r].env.channels = sides[r].channels;
    sides[r].env.check = &sides[r].check;
    sides[r].env.pollSet = &sides[r].pollSet;
  }
  return sides;
}

// A next run on the same thread: a local copy of `mem`'s first byte, waited for twice (the
// second time already reached) and to its end.
void expectACopyRuns(ThreadedRun& thread, Side& side, std::vector<char>& mem,
                     std::vector<char*>& bufs, char fill) {
  Schedule& s = side.schedule;
  s.clear(2);
  s.setExtents(32, 32);
  const uint32_t copied = s.copy(s.output(), s.input(), 16);
  s.finish();
  mem[0] = fill;
  side.executor.begin(s, bufs, side.env);
  thread.start(side.executor, s.ops().size(), side.pollSet);
  thread.waitFor(copied, CoreSharing());
  thread.waitFor(copied, CoreSharing());
  thread.finish(CoreSharing());
  EXPECT_NO_THROW(thread.throwIfFailed());
  EXPECT_EQ(mem[32], fill);
}

TEST(ThreadedRun, GatesReachTheRunAndItsOperationsReachTheCaller) {
  // Rank 0's send and local copy wait for a gate that the caller opens while the run is on the
  // thread; the caller then waits for the copy and for the whole run. Twice on one thread.
  std::unique_ptr<Device> cpu = createCpuDevice();
  auto owned = test::memoryChannels(2, 64);
  std::vector<Side> sides = makeSides(owned, *cpu);
  ThreadedRun thread;
  for (int round = 0; round < 2; ++round) {
    const char fill = static_cast<char>('a' + round);
    std::vector<char> in(256, fill), out(512, 0), got(256, 0);
    std::vector<char*> bufs0 = {in.data(), out.data()}, bufs1 = {nullptr, got.data()};
    Schedule& s = sides[0].schedule;
    s.clear(2);
    s.setExtents(256, 512);
    const uint32_t gate = s.gate(1);
    s.after(s.send(1, s.input(), 256), gate);
    const uint32_t copied = s.copy(s.output(256), s.input(), 256);
    s.after(copied, gate);
    s.finish();
    Schedule& r = sides[1].schedule;
    r.clear(2);
    r.setExtents(0, 256);
    r.recv(0, r.output(), 256, true);
    r.finish();
    sides[0].executor.begin(s, bufs0, sides[0].env);
    thread.start(sides[0].executor, s.ops().size(), sides[0].pollSet);
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
    EXPECT_EQ(out[256], 0) << "the copy ran before its gate opened";
    std::thread receiver([&] { sides[1].executor.run(r, bufs1, sides[1].env); });
    thread.open(gate);
    thread.waitFor(copied, CoreSharing());
    EXPECT_EQ(out[256], fill);
    thread.finish(CoreSharing());
    receiver.join();
    EXPECT_EQ(std::string(got.data(), 256), std::string(256, fill));
  }
}

TEST(ThreadedRun, TheRunsFailureReachesTheCaller) {
  // Rank 1 never sends: the receive on the thread waits until its check throws; the caller's
  // wait for it, and for the run, throws that error.
  std::unique_ptr<Device> cpu = createCpuDevice();
  auto owned = test::memoryChannels(2, 64);
  std::vector<Side> sides = makeSides(owned, *cpu);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(100);
  sides[0].check = [&](int peer) {
    if (std::chrono::steady_clock::now() > deadline) LOOM_THROW(loomTimeout, "waited for ", peer);
  };
  std::vector<char> mem(64);
  std::vector<char*> bufs = {mem.data(), mem.data() + 32};
  Schedule& s = sides[0].schedule;
  s.clear(2);
  s.setExtents(32, 32);
  const uint32_t received = s.recv(1, s.output(), 16, true);
  s.finish();
  sides[0].executor.begin(s, bufs, sides[0].env);
  ThreadedRun thread;
  thread.start(sides[0].executor, s.ops().size(), sides[0].pollSet);
  try {
    thread.waitFor(received, CoreSharing());
    ADD_FAILURE() << "the wait returned without the receive";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), loomTimeout);
    EXPECT_EQ(std::string(e.what()), "waited for 1");
  }
  EXPECT_THROW(thread.finish(CoreSharing()), Error);
  EXPECT_THROW(thread.throwIfFailed(), Error);
  // The thread serves the next run.
  sides[0].check = [](int) {};
  expectACopyRuns(thread, sides[0], mem, bufs, 'y');
}

TEST(ThreadedRun, ARunThatCannotEndIsAbandoned) {
  // Nothing will arrive and nothing checks a deadline: abandon() takes the run off the thread,
  // and the thread then runs the next one.
  std::unique_ptr<Device> cpu = createCpuDevice();
  auto owned = test::memoryChannels(2, 64);
  std::vector<Side> sides = makeSides(owned, *cpu);
  std::vector<char> mem(64);
  std::vector<char*> bufs = {mem.data(), mem.data() + 32};
  ThreadedRun thread;
  Schedule& s = sides[0].schedule;
  s.clear(2);
  s.setExtents(32, 32);
  s.recv(1, s.output(), 16, true);
  s.finish();
  sides[0].executor.begin(s, bufs, sides[0].env);
  thread.start(sides[0].executor, s.ops().size(), sides[0].pollSet);
  std::this_thread::sleep_for(std::chrono::milliseconds(5));
  thread.abandon();
  EXPECT_NO_THROW(thread.throwIfFailed());
  expectACopyRuns(thread, sides[0], mem, bufs, 'x');
}

}  // namespace
}  // namespace loom
