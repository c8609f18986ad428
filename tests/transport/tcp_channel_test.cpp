// TcpChannel over loopback: small and large transfers, striping over several connections, the
// direct receive path and the staged (peek) path, and a peer that goes away.
#include "transport/tcp/tcp_channel.hpp"

#include <gtest/gtest.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>

#include <chrono>
#include <memory>
#include <numeric>
#include <thread>
#include <vector>

#include "base/error.hpp"
#include "base/wait.hpp"
#include "bootstrap/socket.hpp"
#include "transport/tcp/interfaces.hpp"

namespace loom {
namespace {

struct Pair {
  std::unique_ptr<TcpChannel> a, b;
};

Pair connectedPair(int streams, size_t staging = 64 * 1024) {
  Listener listener = listenTcp("127.0.0.1", 0);
  Deadline deadline = deadlineAfterMs(10000);
  std::vector<Socket> mine, theirs;
  for (int i = 0; i < streams; ++i) {
    mine.push_back(connectWithRetry("127.0.0.1", listener.port, deadline, nullptr));
    mine.back().setPeer("rank 1 on test");
    Socket accepted;
    for (int tries = 0; tries < 10000 && !accepted.valid(); ++tries) {
      accepted = acceptSome(listener.fd.get());
      if (!accepted.valid()) std::this_thread::sleep_for(std::chrono::microseconds(100));
    }
    EXPECT_TRUE(accepted.valid());
    accepted.setPeer("rank 0 on test");
    theirs.push_back(std::move(accepted));
  }
  return {std::make_unique<TcpChannel>(1, std::move(mine), staging),
          std::make_unique<TcpChannel>(0, std::move(theirs), staging)};
}

std::vector<char> pattern(size_t n, int seed) {
  std::vector<char> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<char>((i * 131 + seed * 7) >> 3);
  return v;
}

// Moves one transfer from `from` to `to` in one thread, both sides non-blocking; direct: the
// receiver uses tryReceive, else peek/consume. Bounded: fails after too many idle rounds.
void transfer(TcpChannel& from, TcpChannel& to, const std::vector<char>& data,
              std::vector<char>& out, bool direct) {
  size_t sent = 0, got = 0;
  int idle = 0;
  while ((sent < data.size() || got < out.size()) && idle < 200000) {
    size_t moved = 0;
    if (sent < data.size()) {
      size_t n = from.trySend(data.data() + sent, data.size() - sent);
      sent += n, moved += n;
    }
    if (got < out.size()) {
      size_t n = 0;
      if (direct) {
        n = to.tryReceive(out.data() + got, out.size() - got);
      } else {
        std::span<const char> span = to.peek(out.size() - got);
        n = std::min(span.size(), out.size() - got);
        std::copy(span.begin(), span.begin() + static_cast<long>(n), out.begin() + got);
        if (n > 0) to.consume(n);
      }
      got += n, moved += n;
    }
    if (moved == 0) {
      ++idle;
      std::this_thread::sleep_for(std::chrono::microseconds(20));
    } else {
      idle = 0;
    }
  }
  ASSERT_EQ(sent, data.size());
  ASSERT_EQ(got, out.size());
}

TEST(TcpChannel, SmallTransfersKeepTheirBoundaries) {
  Pair p = connectedPair(1);
  for (size_t n : {1u, 7u, 8u, 13u, 16u, 100u}) {
    for (bool direct : {false, true}) {
      std::vector<char> data = pattern(n, static_cast<int>(n)), out(n);
      transfer(*p.a, *p.b, data, out, direct);
      EXPECT_EQ(out, data) << n << " bytes, direct " << direct;
    }
  }
}

TEST(TcpChannel, LargeStripedTransfersBothWays) {
  for (int streams : {1, 3}) {
    Pair p = connectedPair(streams);
    EXPECT_EQ(p.a->streams(), static_cast<size_t>(streams));
    // Several stripes, an odd size, and a staging buffer far smaller than the transfer.
    size_t n = 5 * TcpChannel::kStripeBytes + 3;
    for (bool direct : {true, false}) {
      std::vector<char> data = pattern(n, streams), out(n), back(n);
      transfer(*p.a, *p.b, data, out, direct);
      EXPECT_EQ(out, data) << streams << " streams, direct " << direct;
      transfer(*p.b, *p.a, data, back, !direct);
      EXPECT_EQ(back, data) << streams << " streams back, direct " << !direct;
    }
  }
}

TEST(TcpChannel, PeerThatGoesAwayIsAnErrorNamingIt) {
  Pair p = connectedPair(2);
  std::vector<char> data = pattern(24, 1), out(48);
  p.a->trySend(data.data(), data.size());
  p.a.reset();  // closes every connection after 24 of the 48 bytes the receiver expects
  size_t got = 0;
  try {
    for (int i = 0; i < 100000 && got < out.size(); ++i) {
      got += p.b->tryReceive(out.data() + got, out.size() - got);
      std::this_thread::sleep_for(std::chrono::microseconds(20));
    }
    FAIL() << "no error after the peer closed";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), loomRemoteError);
    EXPECT_NE(std::string(e.what()).find("rank 0 on test"), std::string::npos) << e.what();
    EXPECT_EQ(got, 24u);
  }
}

TEST(TcpChannel, SendToAShutDownPeerFails) {
  Pair p = connectedPair(1);
  p.b->shutdown();
  p.b.reset();
  std::vector<char> data = pattern(1 << 20, 2);
  EXPECT_THROW(
      {
        for (int i = 0; i < 100000; ++i) {
          p.a->trySend(data.data(), data.size());
          std::this_thread::sleep_for(std::chrono::microseconds(20));
        }
      },
      Error);
}

bool quickAckMode(int fd) {
  int on = -1;
  socklen_t len = sizeof(on);
  EXPECT_EQ(getsockopt(fd, IPPROTO_TCP, TCP_QUICKACK, &on, &len), 0);
  return on != 0;
}

// A socket that answers what it receives falls into Linux's delayed-ACK mode; a bulk read leaves
// it acknowledging at once, so that a sender out of window never waits for its loss probe.
TEST(TcpChannel, BulkReadsAcknowledgeAtOnce) {
  Pair p = connectedPair(1);
  std::vector<char> data = pattern(256 * 1024, 5), out(data.size());
  const int fd = p.b->pollFd(false);
  bool delaying = false;
  for (int i = 0; i < 50 && !delaying; ++i) {  // request and answer until b delays its ACKs
    transfer(*p.a, *p.b, data, out, i % 2 == 0);
    transfer(*p.b, *p.a, data, out, i % 2 == 0);
    delaying = !quickAckMode(fd);
  }
  ASSERT_TRUE(delaying) << "the kernel never delayed b's ACKs: nothing to test";
  for (bool direct : {true, false}) {
    transfer(*p.a, *p.b, data, out, direct);
    EXPECT_TRUE(quickAckMode(fd)) << "direct " << direct;
    transfer(*p.b, *p.a, data, out, direct);  // b answers: delayed again
  }
}

// A wait on a TCP channel blocks in poll on the connection that carries the next byte, wakes when
// data arrives there, and moves to the next connection with the stripe.
TEST(TcpChannel, WaitsBlockInPollOnTheStreamOfTheNextByte) {
  Pair p = connectedPair(2);
  const int firstRecv = p.b->pollFd(false);
  const int firstSend = p.a->pollFd(true);
  ASSERT_GE(firstRecv, 0);
  ASSERT_GE(firstSend, 0);
  // One whole stripe, received through waits that can only progress when poll reports data.
  std::vector<char> data = pattern(TcpChannel::kStripeBytes, 3), out(data.size());
  std::thread sender([&] {
    size_t sent = 0;
    for (int rounds = 0; sent < data.size() && rounds < 1000000; ++rounds) {
      size_t n = p.a->trySend(data.data() + sent, data.size() - sent);
      sent += n;
      if (n == 0) std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
  });
  Deadline deadline = deadlineAfterMs(20000);
  size_t got = 0;
  PollSet set;
  auto ready = [&] {
    size_t n = p.b->tryReceive(out.data() + got, out.size() - got);
    got += n;
    return n > 0;
  };
  auto check = [&] {
    if (std::chrono::steady_clock::now() > deadline) throw std::runtime_error("no data in 20 s");
  };
  auto gather = [&](PollSet& s) { s.add(p.b->pollFd(false), POLLIN); };
  for (int waits = 0; got < out.size() && waits < 1000000; ++waits)
    waitUntil(ready, check, gather, set);
  sender.join();
  EXPECT_EQ(out, data);
  // The next stripe travels on the other connection, in both directions' bookkeeping.
  EXPECT_NE(p.b->pollFd(false), firstRecv);
  EXPECT_NE(p.a->pollFd(true), firstSend);
}

// A wait whose socket never becomes ready still runs the health check between poll slices (20
// checks outlast the short spin phase) and gives up through it.
TEST(TcpChannel, PollingWaitEndsThroughTheCheck) {
  Pair p = connectedPair(1);
  PollSet set;
  int checks = 0;
  auto never = [] { return false; };
  auto check = [&] {
    if (++checks == 20) throw std::runtime_error("given up");
  };
  auto gather = [&](PollSet& s) { s.add(p.b->pollFd(false), POLLIN); };
  EXPECT_THROW(waitUntil(never, check, gather, set), std::runtime_error);
  EXPECT_EQ(checks, 20);
}

TEST(SocketInterfaces, FilterSyntax) {
  InterfaceFilter prefix("eth,ib");
  EXPECT_TRUE(prefix.matches("eth0"));
  EXPECT_TRUE(prefix.matches("ib1"));
  EXPECT_FALSE(prefix.matches("lo"));
  InterfaceFilter exclude("^docker,lo");
  EXPECT_FALSE(exclude.matches("docker0"));
  EXPECT_FALSE(exclude.matches("lo"));
  EXPECT_TRUE(exclude.matches("eth0"));
  InterfaceFilter exact("=eth0");
  EXPECT_TRUE(exact.matches("eth0"));
  EXPECT_FALSE(exact.matches("eth01"));
  InterfaceFilter notExact("^=eth0");
  EXPECT_FALSE(notExact.matches("eth0"));
  EXPECT_TRUE(notExact.matches("eth01"));
  EXPECT_THROW(InterfaceFilter("^"), Error);
}

TEST(SocketInterfaces, DefaultRuleSkipsLoopbackAcrossHosts) {
  std::vector<NetInterface> all = {{"lo", "127.0.0.1", false, true},
                                   {"docker0", "172.17.0.1", false, false},
                                   {"eth0", "fd00::2", true, false},
                                   {"eth1", "10.0.0.2", false, false}};
  EXPECT_EQ(chooseInterface(all, "", false).name, "eth1");  // IPv4 first
  EXPECT_EQ(chooseInterface(all, "", true).name, "lo");     // one host: loopback
  EXPECT_EQ(chooseInterface(all, "docker", false).name, "docker0");
  EXPECT_EQ(chooseInterface(all, "=eth0", false).address, "fd00::2");
  try {
    chooseInterface(all, "ib", false);
    FAIL() << "no error for an interface that does not exist";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), loomInvalidArgument);
    EXPECT_NE(std::string(e.what()).find("lo, docker0, eth0, eth1"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace loom
