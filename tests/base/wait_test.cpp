// waitUntil's contract with a ready() that does the work (moves data) and so reports true once,
// at the call that made the last progress.
#include "base/wait.hpp"

#include <gtest/gtest.h>

#include <stdexcept>

namespace loom {
namespace {

// A transfer whose last bytes move during the ready() call that follows a failed health check
// (a peer that sent everything, then exited): the wait must end there, not wait for a ready()
// that can no longer be true. This hung collectives on fake nodes under load (ring allreduce,
// all steps done, still waiting).
struct LastBytesMoveAfterPeerExit {
  bool peerGone = false;
  bool moved = false;
  int readyCalls = 0;
  bool ready() {
    ++readyCalls;
    if (peerGone && !moved) {
      moved = true;
      return true;  // progress made by this call
    }
    return false;  // nothing left to move
  }
  void check() {
    peerGone = true;
    throw std::runtime_error("peer exited");
  }
};

TEST(WaitUntil, EndsWhenReadyTurnsTrueInsideAFailedCheck) {
  LastBytesMoveAfterPeerExit t;
  EXPECT_NO_THROW(waitUntil([&] { return t.ready(); }, [&] { t.check(); }));
  EXPECT_TRUE(t.moved);
}

TEST(WaitUntil, PollingWaitEndsWhenReadyTurnsTrueInsideAFailedCheck) {
  LastBytesMoveAfterPeerExit t;
  PollSet set;
  EXPECT_NO_THROW(waitUntil([&] { return t.ready(); }, [&] { t.check(); },
                            [](PollSet& s) { s.markNetworked(); }, set));
  EXPECT_TRUE(t.moved);
}

TEST(WaitUntil, FailedCheckWithoutProgressThrows) {
  int checks = 0;
  EXPECT_THROW(waitUntil([] { return false; },
                         [&] {
                           if (++checks == 3) throw std::runtime_error("deadline");
                         }),
               std::runtime_error);
  EXPECT_EQ(checks, 3);
}

}  // namespace
}  // namespace loom
