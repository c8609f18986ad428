// The executor over bounded in-process channels, ranks as threads: streaming dependencies carry a
// ring's blocks through channels much smaller than a block, reductions and local work follow
// their dependencies, and a wait gives up through the health check.
#include "exec/executor.hpp"

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cstring>
#include <thread>

#include "base/error.hpp"
#include "device/cpu/cpu_device.hpp"
#include "memory_channel.hpp"

namespace loom {
namespace {

int wrap(int i, int n) { return ((i % n) + n) % n; }

struct Rank {
  Schedule schedule;
  Executor executor;
  std::vector<Channel*> channels;
  std::function<void(int)> check = [](int) {};
  PollSet pollSet;
};

// The environment a rank's run gets: the CPU device, its channels, check and poll set.
ExecEnv envOf(Rank& rank, Device& device) {
  ExecEnv env;
  env.device = &device;
  env.channels = rank.channels;
  env.check = &rank.check;
  env.pollSet = &rank.pollSet;
  return env;
}

// Runs every rank's schedule on its own thread; returns what each run threw ("" if nothing).
std::vector<std::string> runAll(std::vector<Rank>& ranks, std::vector<std::vector<char*>>& bufs) {
  std::unique_ptr<Device> cpu = createCpuDevice();
  std::vector<std::string> errors(ranks.size());
  std::vector<std::thread> threads;
  for (size_t r = 0; r < ranks.size(); ++r)
    threads.emplace_back([&, r] {
      ExecEnv env = envOf(ranks[r], *cpu);
      try {
        ranks[r].executor.run(ranks[r].schedule, bufs[r], env);
      } catch (const Error& e) {
        errors[r] = e.what();
      }
    });
  for (auto& t : threads) t.join();
  return errors;
}

std::vector<Rank> makeRanks(int n, std::vector<std::vector<std::unique_ptr<Channel>>>& owned) {
  std::vector<Rank> ranks(n);
  for (int r = 0; r < n; ++r)
    for (auto& c : owned[r]) ranks[r].channels.push_back(c.get());
  return ranks;
}

TEST(Executor, RingAllGatherStreamsBlocksThroughSmallChannels) {
  for (int n : {2, 3, 5}) {
    auto owned = test::memoryChannels(n, 64);
    std::vector<Rank> ranks = makeRanks(n, owned);
    const uint64_t block = 1000;
    std::vector<std::vector<char>> in(n), out(n);
    std::vector<std::vector<char*>> bufs(n);
    for (int r = 0; r < n; ++r) {
      in[r].assign(block, static_cast<char>('A' + r));
      out[r].assign(block * n, 0);
      bufs[r] = {in[r].data(), out[r].data()};
      Schedule& s = ranks[r].schedule;
      s.clear(n);
      s.setExtents(block, block * n);
      s.copy(s.output(r * block), s.input(), block, true);
      uint32_t previous = ~0u;
      for (int k = 0; k < n - 1; ++k) {
        const uint32_t send =
            s.send(wrap(r + 1, n), k == 0 ? s.input() : s.output(wrap(r - k, n) * block), block);
        if (k > 0) s.streamAfter(send, previous);
        previous = s.recv(wrap(r - 1, n), s.output(wrap(r - k - 1, n) * block), block, true);
      }
      s.finish();
    }
    std::vector<std::string> errors = runAll(ranks, bufs);
    for (int r = 0; r < n; ++r) {
      ASSERT_EQ(errors[r], "");
      for (int b = 0; b < n; ++b)
        EXPECT_EQ(out[r][b * block + 7], 'A' + b) << "n " << n << " rank " << r << " block " << b;
    }
  }
}

TEST(Executor, ReductionsAndLocalWorkFollowTheirDependencies) {
  // Two ranks: each receives the other's vector and adds it to its own (recvReduce, streaming
  // behind nothing), then a local reduce doubles the sum into scratch and a copy moves it out,
  // each streaming behind the one before.
  auto owned = test::memoryChannels(2, 32);
  std::vector<Rank> ranks = makeRanks(2, owned);
  const int count = 300;
  std::vector<std::vector<int32_t>> in(2), out(2);
  std::vector<std::vector<char>> scratch(2);
  std::vector<std::vector<char*>> bufs(2);
  for (int r = 0; r < 2; ++r) {
    in[r].resize(count);
    for (int i = 0; i < count; ++i) in[r][i] = (r + 1) * i;
    out[r].assign(2 * count, 0);
    scratch[r].assign(count * 4, 0);
    bufs[r] = {reinterpret_cast<char*>(in[r].data()), reinterpret_cast<char*>(out[r].data()),
               scratch[r].data()};
    Schedule& s = ranks[r].schedule;
    s.clear(2);
    s.setExtents(count * 4, 2 * count * 4);
    const uint16_t tmp = s.addScratch("doubled", count * 4);
    const Reduction sum{loomInt32, loomSum, -1, 1};
    s.send(1 - r, s.input(), count * 4);
    const uint32_t added = s.recvReduce(1 - r, s.output(), s.input(), count * 4, sum, true);
    const BufferRef twice[2] = {s.output(), s.output()};
    const uint32_t doubled = s.reduce(s.scratch(tmp), twice, 2, count * 4, sum);
    s.streamAfter(doubled, added);
    s.streamAfter(s.copy(s.output(count * 4), s.scratch(tmp), count * 4, true), doubled);
    s.finish();
  }
  std::vector<std::string> errors = runAll(ranks, bufs);
  for (int r = 0; r < 2; ++r) {
    ASSERT_EQ(errors[r], "");
    for (int i = 0; i < count; ++i) {
      ASSERT_EQ(out[r][i], 3 * i);
      ASSERT_EQ(out[r][count + i], 6 * i);
    }
  }
}

TEST(Executor, AWaitGivesUpThroughTheHealthCheck) {
  // Rank 1 never sends: rank 0's receive waits until its check throws, naming the peer it waits
  // for.
  auto owned = test::memoryChannels(2, 64);
  std::vector<Rank> ranks = makeRanks(2, owned);
  std::vector<std::vector<char>> mem(2, std::vector<char>(64));
  std::vector<std::vector<char*>> bufs = {{mem[0].data(), mem[0].data() + 32},
                                          {mem[1].data(), mem[1].data() + 32}};
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(100);
  std::atomic<int> checkedPeer{-2};
  ranks[0].check = [&](int peer) {
    checkedPeer = peer;
    if (std::chrono::steady_clock::now() > deadline) LOOM_THROW(loomTimeout, "waited for ", peer);
  };
  ranks[0].schedule.clear(2);
  ranks[0].schedule.setExtents(32, 32);
  ranks[0].schedule.recv(1, ranks[0].schedule.output(), 16, true);
  ranks[0].schedule.finish();
  ranks[1].schedule.clear(2);
  ranks[1].schedule.finish();
  std::vector<std::string> errors = runAll(ranks, bufs);
  EXPECT_EQ(errors[0], "waited for 1");
  EXPECT_EQ(errors[1], "");
  EXPECT_EQ(checkedPeer.load(), 1);
}

TEST(Executor, GatesHoldWhatWaitsForThemUntilTheDriverOpensThem) {
  // Rank 0 drives step by step (as a hierarchical call does beside its node phases): its send
  // and a local copy wait for a gate. Passes before the gate opens move nothing behind it; once
  // opened, the copy and the exchange finish.
  auto owned = test::memoryChannels(2, 64);
  std::vector<Rank> ranks = makeRanks(2, owned);
  std::unique_ptr<Device> cpu = createCpuDevice();
  std::vector<std::vector<char>> in(2, std::vector<char>(256)), out(2, std::vector<char>(512, 0));
  std::vector<std::vector<char*>> bufs(2);
  uint32_t gate = 0, copied = 0;
  for (int r = 0; r < 2; ++r) {
    std::fill(in[r].begin(), in[r].end(), static_cast<char>('a' + r));
    bufs[r] = {in[r].data(), out[r].data()};
    Schedule& s = ranks[r].schedule;
    s.clear(2);
    s.setExtents(256, 512);
    if (r == 0) {
      gate = s.gate(1);
      s.after(s.send(1, s.input(), 256), gate);
      copied = s.copy(s.output(256), s.input(), 256);
      s.after(copied, gate);
    } else {
      s.recv(0, s.output(), 256, true);
    }
    s.finish();
  }
  ExecEnv env = envOf(ranks[0], *cpu);
  Executor& driver = ranks[0].executor;
  driver.begin(ranks[0].schedule, bufs[0], env);
  for (int i = 0; i < 10; ++i) driver.progress().pass();
  EXPECT_EQ(out[0][256], 0) << "the copy ran before its gate opened";
  std::thread receiver(
      [&] { ranks[1].executor.run(ranks[1].schedule, bufs[1], envOf(ranks[1], *cpu)); });
  driver.open(gate);
  driver.driveUntilDone(copied);
  EXPECT_EQ(out[0][256], 'a');
  driver.finish();
  receiver.join();
  EXPECT_EQ(std::string(out[1].data(), 256), std::string(256, 'a'));
  EXPECT_THROW(driver.open(copied), Error) << "only a gate opens";
}

TEST(Executor, EachPassTakesOneStepPerChannelLane) {
  // Rank 0 of three, driven pass by pass: it reduces a block arriving from rank 1 and forwards the
  // sums to rank 2 as they land (the ring's step), then receives another block from rank 1. The
  // block wraps around the channel's ring, so the receive sees it in two pieces. Every pass takes
  // one piece at most per channel lane, so the send forwards each piece before the receive takes
  // more; taking all that has arrived in one pass held the next ring step back (issue 39).
  auto owned = test::memoryChannels(3, 96);
  std::vector<Rank> ranks = makeRanks(3, owned);
  std::unique_ptr<Device> cpu = createCpuDevice();
  std::vector<int32_t> in(16), out(24, 0), arriving(24);
  for (int i = 0; i < 16; ++i) in[i] = i + 1;
  for (int i = 0; i < 24; ++i) arriving[i] = 100 + i;
  const std::vector<char> junk(64);
  ASSERT_EQ(owned[1][0]->trySend(junk.data(), 64), 64u);  // moves the ring's position to 64
  owned[0][1]->consume(64);
  ASSERT_EQ(owned[1][0]->trySend(arriving.data(), 96), 96u);  // the block, then the next one
  Schedule& s = ranks[0].schedule;
  s.clear(3);
  s.setExtents(64, 96);
  const uint32_t forward = s.send(2, s.output(), 64);
  const uint32_t reduced =
      s.recvReduce(1, s.output(), s.input(), 64, {loomInt32, loomSum, -1, 1}, true);
  s.streamAfter(forward, reduced);
  s.recv(1, s.output(64), 32, true);
  s.finish();
  std::vector<char*> bufs = {reinterpret_cast<char*>(in.data()),
                             reinterpret_cast<char*>(out.data())};
  ExecEnv env = envOf(ranks[0], *cpu);
  Executor& driver = ranks[0].executor;
  driver.begin(s, bufs, env);
  auto forwarded = [&] { return owned[2][0]->peek(96).size(); };
  ASSERT_TRUE(driver.progress().pass());
  EXPECT_EQ(out[7], 115) << "the first piece is reduced";
  EXPECT_EQ(out[8], 0) << "the second piece was taken in the same pass";
  EXPECT_EQ(forwarded(), 0u);
  ASSERT_TRUE(driver.progress().pass());
  EXPECT_EQ(forwarded(), 32u) << "the first piece's sums leave before the receive goes on";
  EXPECT_EQ(out[15], 131);
  EXPECT_EQ(out[16], 0) << "the next block was taken in the pass that finished this one";
  ASSERT_TRUE(driver.progress().pass());
  EXPECT_EQ(forwarded(), 64u);
  EXPECT_EQ(out[16], 116);
  EXPECT_TRUE(driver.finished());
  std::vector<int32_t> sent(16);
  std::memcpy(sent.data(), owned[2][0]->peek(64).data(), 64);
  for (int i = 0; i < 16; ++i) EXPECT_EQ(sent[i], 101 + 2 * i);
}

// A memory channel that says it is a network one: it names a descriptor for waits to poll.
class SocketLikeChannel final : public Channel {
 public:
  SocketLikeChannel(Channel& inner, int fd) : inner_(inner), fd_(fd) {}
  int peer() const override { return inner_.peer(); }
  size_t trySend(const void* data, size_t bytes) override { return inner_.trySend(data, bytes); }
  std::span<const char> peek(size_t maxBytes) override { return inner_.peek(maxBytes); }
  void consume(size_t bytes) override { inner_.consume(bytes); }
  int pollFd(bool) const override { return fd_; }

 private:
  Channel& inner_;
  int fd_;
};

// Rank 0 of three whose channel to rank 1 is a network one (a pipe's descriptor stands for the
// socket), the others shared memory; the pipe closes with it.
struct RankZeroWithANetworkPeer {
  std::vector<std::vector<std::unique_ptr<Channel>>> owned = test::memoryChannels(3, 64);
  std::vector<Rank> ranks = makeRanks(3, owned);
  std::array<int, 2> pipeFds = openPipe();
  SocketLikeChannel toRank1{*owned[0][1], pipeFds[0]};
  std::unique_ptr<Device> cpu = createCpuDevice();
  RankZeroWithANetworkPeer() { ranks[0].channels[1] = &toRank1; }
  ~RankZeroWithANetworkPeer() {
    for (int fd : pipeFds) close(fd);
  }
  static std::array<int, 2> openPipe() {
    std::array<int, 2> fds{-1, -1};
    EXPECT_EQ(pipe(fds.data()), 0);
    return fds;
  }
};

TEST(Executor, AWaitIsANetworkOneOnlyWhileANetworkLaneIsLeft) {
  // Rank 0 of three sends to rank 1 over a network channel and receives from rank 2 over shared
  // memory. While the send is left, its wait is a network one (it sleeps on poll); once the send
  // is done, what is left waits as shared memory does (an empty poll set: waitUntil spins and
  // yields). Marking every wait of a run with a network lane kept pairwise alltoall on 2x2 nodes
  // sleeping in poll slices on no descriptor for its shared-memory tail.
  RankZeroWithANetworkPeer job;
  auto& owned = job.owned;
  std::vector<Rank>& ranks = job.ranks;
  Device* cpu = job.cpu.get();
  std::vector<char> in(128, 'x'), out(8, 0);
  Schedule& s = ranks[0].schedule;
  s.clear(3);
  s.setExtents(128, 8);
  s.send(1, s.input(), 128);
  s.recv(2, s.output(), 8, true);
  s.finish();
  std::vector<char*> bufs = {in.data(), out.data()};
  ExecEnv env = envOf(ranks[0], *cpu);
  Executor& driver = ranks[0].executor;
  driver.begin(s, bufs, env);
  PollSet set;
  ASSERT_TRUE(driver.progress().pass());  // 64 of the 128 bytes fit the channel
  driver.progress().gather(set);
  EXPECT_FALSE(set.empty()) << "the send to rank 1 is left: a network wait";
  ASSERT_EQ(owned[1][0]->peek(64).size(), 64u);
  owned[1][0]->consume(64);
  ASSERT_TRUE(driver.progress().pass());
  set.clear();
  driver.progress().gather(set);
  EXPECT_TRUE(set.empty()) << "only shared memory is left: not a network wait";
  ASSERT_EQ(owned[2][0]->trySend("received", 8), 8u);
  driver.finish();
  EXPECT_EQ(std::string(out.data(), 8), "received");
}

TEST(Executor, ARelayingRunWaitsAsANetworkOneToItsEnd) {
  // Rank 0 of three passes on to rank 1 (network) what rank 2 sent it (shared memory), then
  // receives more from rank 2. Once the relayed send is done only shared memory is left, but
  // rank 2's bytes may wait on the network themselves (a ring): the wait stays a network one.
  // Spinning there took the CPU from the ranks it waited for (2x2 namespace nodes on 2 cores,
  // ring allgather of 8-64 KiB: 2.1-2.6x the time).
  RankZeroWithANetworkPeer job;
  auto& owned = job.owned;
  std::vector<Rank>& ranks = job.ranks;
  Device* cpu = job.cpu.get();
  std::vector<char> in(8, 0), out(16, 0);
  Schedule& s = ranks[0].schedule;
  s.clear(3);
  s.setExtents(8, 16);
  const uint32_t first = s.recv(2, s.output(), 8, true);
  s.after(s.send(1, s.output(), 8), first);
  s.recv(2, s.output(8), 8, true);
  s.finish();
  std::vector<char*> bufs = {in.data(), out.data()};
  ExecEnv env = envOf(ranks[0], *cpu);
  Executor& driver = ranks[0].executor;
  driver.begin(s, bufs, env);
  ASSERT_EQ(owned[2][0]->trySend("relayed.", 8), 8u);
  ASSERT_TRUE(driver.progress().pass());
  ASSERT_EQ(owned[1][0]->peek(8).size(), 8u) << "the relayed bytes went on to rank 1";
  PollSet set;
  driver.progress().gather(set);
  EXPECT_FALSE(set.empty()) << "only shared memory is left, but the run relays";
  ASSERT_EQ(owned[2][0]->trySend("received", 8), 8u);
  driver.finish();
  EXPECT_EQ(std::string(out.data(), 16), "relayed.received");
  // The same run over shared memory only (rank 1 not a network peer) stays a shared-memory wait.
  ranks[0].channels[1] = owned[0][1].get();
  env = envOf(ranks[0], *cpu);
  owned[1][0]->consume(8);
  driver.begin(s, bufs, env);
  ASSERT_EQ(owned[2][0]->trySend("relayed.", 8), 8u);
  ASSERT_TRUE(driver.progress().pass());
  set.clear();
  driver.progress().gather(set);
  EXPECT_TRUE(set.empty()) << "no network lane: a relaying run waits as shared memory does";
  ASSERT_EQ(owned[2][0]->trySend("received", 8), 8u);
  driver.finish();
}

}  // namespace
}  // namespace loom
