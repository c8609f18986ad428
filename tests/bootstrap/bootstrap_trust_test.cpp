// Who may join a job and how a client's handshake recovers: strangers, wrong or missing secrets
// and fake roots are refused while the job completes; a client connects again when the server
// stays silent or closes before its verdict, a bounded number of times. (After bootstrap_test.cpp
// in the binary: its first test forks before any test starts a thread.)
#include <gtest/gtest.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <thread>
#include <vector>

#include "base/error.hpp"
#include "bootstrap/bootstrap.hpp"
#include "bootstrap/protocol.hpp"
#include "bootstrap/socket.hpp"
#include "group_helpers.hpp"

namespace loom {
namespace {

TEST(BootstrapSecurity, WrongSecretIsRefusedAndJobCompletes) {
  JobSecret secret = JobSecret::random();
  UniqueId id = localRoot(secret);
  UniqueId forged = id;
  forged.secret = JobSecret::random();
  Outcome stranger = capture([&] { Bootstrap b(forged, 1, 3, "evil", quickOptions(3000)); });
  EXPECT_EQ(stranger.code, loomInvalidArgument) << stranger.message;
  auto group = makeGroup(id, 3);
  expectGroupWorks(group);
}

TEST(BootstrapSecurity, ClientWithoutSecretIsRefused) {
  UniqueId id = localRoot(JobSecret::random());
  UniqueId noSecret = id;
  noSecret.secret = JobSecret();
  Outcome refused = capture([&] { Bootstrap b(noSecret, 0, 2, "", quickOptions(3000)); });
  EXPECT_EQ(refused.code, loomInvalidArgument) << refused.message;
  EXPECT_NE(refused.message.find("refused"), std::string::npos) << refused.message;
  auto group = makeGroup(id, 2);
  expectGroupWorks(group);
}

TEST(BootstrapSecurity, RootWithoutSecretCannotFoolAClientWithOne) {
  UniqueId id = localRoot(JobSecret());
  UniqueId withSecret = id;
  withSecret.secret = JobSecret::random();
  Outcome o = capture([&] { Bootstrap b(withSecret, 0, 1, "", quickOptions(3000)); });
  EXPECT_EQ(o.code, loomInvalidArgument) << o.message;
}

TEST(BootstrapSecurity, FakeRootThatAcceptsAnythingIsDetected) {
  Listener listener = listenTcp("127.0.0.1", 0);
  std::thread fake([&] {
    Deadline deadline = Clock::now() + std::chrono::seconds(5);
    waitReady(listener.fd.get(), POLLIN, deadline, nullptr, "a client");
    Socket sock = acceptSome(listener.fd.get());
    wire::Nonce nonce{};
    std::string challenge = wire::encodeChallenge(wire::Channel::kRendezvous, nonce);
    sock.sendAll(challenge.data(), challenge.size(), deadline, nullptr);
    uint8_t response[wire::kResponseBytes];
    sock.recvAll(response, sizeof(response), deadline, nullptr);
    uint8_t verdict[wire::kVerdictBytes];
    randomBytes(verdict, sizeof(verdict));
    verdict[0] = 0;  // "accepted", with a MAC it cannot have computed
    sock.sendAll(verdict, sizeof(verdict), deadline, nullptr);
    char byte;
    while (recv(sock.fd(), &byte, 1, 0) > 0) {
    }
  });
  UniqueId id{"127.0.0.1", listener.port, JobSecret::random(), 1};
  Outcome o = capture([&] { Bootstrap b(id, 0, 1, "", quickOptions(3000)); });
  fake.join();
  EXPECT_EQ(o.code, loomInvalidArgument) << o.message;
  EXPECT_NE(o.message.find("failed to prove"), std::string::npos) << o.message;
}

TEST(BootstrapSecurity, GarbageStrangerIsRefusedAndJobCompletes) {
  UniqueId id = localRoot(JobSecret::random());
  Fd garbage = rawConnect(id);
  std::string junk(300, '\x7f');
  ASSERT_EQ(send(garbage.get(), junk.data(), junk.size(), MSG_NOSIGNAL),
            static_cast<ssize_t>(junk.size()));
  Fd hangsUp = rawConnect(id);
  hangsUp.reset();
  auto start = Clock::now();
  auto group = makeGroup(id, 3);
  EXPECT_LT(secondsSince(start), 3.0);
  expectGroupWorks(group);
}

TEST(BootstrapSecurity, SilentStrangerDoesNotDelayTheJob) {
  UniqueId id = localRoot(JobSecret::random());
  Fd silent = rawConnect(id);  // connects first, then never says a word
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  auto start = Clock::now();
  auto group = makeGroup(id, 3);
  EXPECT_LT(secondsSince(start), 2.0);
  expectGroupWorks(group);
}

// A test server for connectAndHandshake: it does `first` with the first connection (holds it
// without a word, or closes it), then serves one client properly and keeps what it sent.
enum class FirstConnection { kHeldSilent, kClosed };
struct RetryingClientRun {
  Outcome client;
  wire::GatherResult served;
};
RetryingClientRun runClientAgainst(FirstConnection first, int64_t silenceMs) {
  Listener listener = listenTcp("127.0.0.1", 0);
  JobSecret secret = JobSecret::random();
  const Deadline deadline = Clock::now() + std::chrono::seconds(8);
  RetryingClientRun run;
  std::thread server([&] {
    waitReady(listener.fd.get(), POLLIN, deadline, nullptr, "a client");
    Socket firstSocket = acceptSome(listener.fd.get());
    if (first == FirstConnection::kClosed) firstSocket.close();
    wire::GatherSpec spec;
    spec.secret = secret;
    spec.maxPayload = 64;
    spec.deadline = deadline;
    spec.what = "test server";
    run.served = wire::gatherHellos(listener.fd.get(), spec);
  });
  run.client = capture([&] {
    Socket sock = wire::connectAndHandshake("127.0.0.1", listener.port, "test server",
                                            wire::Channel::kRendezvous, secret, deadline, nullptr,
                                            0, silenceMs);
    wire::sendFrame(sock, wire::FrameType::kHello, 0, 1, "hello", deadline, nullptr);
  });
  server.join();
  return run;
}

void expectServedOnce(const RetryingClientRun& run) {
  EXPECT_EQ(run.client.code, loomSuccess) << run.client.message;
  EXPECT_TRUE(run.served.complete);
  ASSERT_EQ(run.served.payloads.size(), 1u);
  EXPECT_EQ(run.served.payloads[0], "hello");
}

// A connection the server never got to know (its handshake's last ACK, or the reset that closed
// it, lost on the wire) is silent at our end: the client connects again instead of waiting for
// its deadline.
TEST(BootstrapFailure, ClientConnectsAgainWhenTheServerStaysSilent) {
  expectServedOnce(runClientAgainst(FirstConnection::kHeldSilent, /*silenceMs=*/300));
}

// A server that gave up on our response (its own bound, kHandshakeTimeoutMs, passed on a lossy
// link) closes the connection before its verdict: the client connects again, a bounded number of
// times.
TEST(BootstrapFailure, ClientConnectsAgainWhenTheServerClosesBeforeItsVerdict) {
  expectServedOnce(runClientAgainst(FirstConnection::kClosed, wire::kClientSilenceMs));
}

// ... but a server that closes every connection fails the client after those few tries, with the
// reason, not a timeout at its deadline.
TEST(BootstrapFailure, ServerThatClosesEveryConnectionFailsTheClientPromptly) {
  Listener listener = listenTcp("127.0.0.1", 0);
  const Deadline deadline = Clock::now() + std::chrono::seconds(20);
  std::atomic<bool> done{false};
  std::atomic<int> accepted{0};
  std::thread server([&] {
    while (!done.load()) {
      pollfd p{listener.fd.get(), POLLIN, 0};
      if (poll(&p, 1, 20) <= 0) continue;
      Socket closed = acceptSome(listener.fd.get());
      ++accepted;
    }
  });
  Outcome o = capture([&] {
    wire::connectAndHandshake("127.0.0.1", listener.port, "test server", wire::Channel::kRendezvous,
                              JobSecret::random(), deadline, nullptr, 0);
  });
  done = true;
  server.join();
  EXPECT_EQ(o.code, loomRemoteError) << o.message;
  EXPECT_NE(o.message.find("test server"), std::string::npos) << o.message;
  EXPECT_EQ(accepted.load(), 1 + wire::kHandshakeClosedRetries);
}

// ... and one that closes the connection and then stops listening (it died) fails the client
// with the close once connecting again finds nothing there, not at the client's deadline.
TEST(BootstrapFailure, ServerThatClosesThenDiesFailsTheClientWithTheClose) {
  auto listener = std::make_unique<Listener>(listenTcp("127.0.0.1", 0));
  const uint16_t port = listener->port;
  const Deadline deadline = Clock::now() + std::chrono::seconds(60);
  std::thread server([&] {
    waitReady(listener->fd.get(), POLLIN, deadline, nullptr, "a client");
    Socket closed = acceptSome(listener->fd.get());
    listener.reset();  // nothing listens any more when the client sees the close
  });
  Outcome o = capture([&] {
    wire::connectAndHandshake("127.0.0.1", port, "test server", wire::Channel::kRendezvous,
                              JobSecret::random(), deadline, nullptr, 0, /*silenceMs=*/300);
  });
  server.join();
  EXPECT_EQ(o.code, loomRemoteError) << o.message;
  EXPECT_NE(o.message.find("nothing listening"), std::string::npos) << o.message;
}

}  // namespace
}  // namespace loom
