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

using std::chrono::microseconds;
using std::chrono::milliseconds;

// The situations of the rule's table (nextWaitAction's comment), by name.
WaitSituation withPeers(bool peerHere, bool crowded = false, bool preempted = false,
                        bool strangerHere = false) {
  return {.knowsPeers = true,
          .peerHere = peerHere,
          .crowded = crowded,
          .preempted = preempted,
          .strangerHere = strangerHere};
}
WaitSituation oversubscribed() {
  return {.knowsPeers = true, .crowded = true, .oversubscribed = true};
}
WaitSituation alone(bool preempted = false) { return {.preempted = preempted}; }

// Issue 19: a yield hands the core to whatever else is runnable there; when that is a stranger
// (a busy process beside the job) it is a whole time slice, so with the host's ranks known a wait
// yields only for a peer rank on its own core, and spins otherwise until it sleeps.
TEST(NextWaitAction, YieldsOnlyForAPeerOnItsCoreWhenItKnowsThePeers) {
  EXPECT_EQ(nextWaitAction(microseconds(100), withPeers(false)), WaitAction::kSpin);
  EXPECT_EQ(nextWaitAction(microseconds(1900), withPeers(false)), WaitAction::kSpin);
  for (bool crowded : {false, true}) {
    EXPECT_EQ(nextWaitAction(microseconds(100), withPeers(true, crowded)), WaitAction::kYield);
    // Past 2 ms a peer on this core still gets the core; with none the wait sleeps.
    EXPECT_EQ(nextWaitAction(milliseconds(5), withPeers(true, crowded, true)), WaitAction::kYield);
    EXPECT_EQ(nextWaitAction(milliseconds(5), withPeers(false, crowded)), WaitAction::kSleep);
  }
}

TEST(NextWaitAction, YieldsAtOnceToAPeerOnItsCoreOnlyWhenCrowded) {
  EXPECT_EQ(nextWaitAction(microseconds(3), withPeers(true, true)), WaitAction::kYield);
  // Not crowded: two ranks on one core is a placement the scheduler undoes; spin first.
  EXPECT_EQ(nextWaitAction(microseconds(3), withPeers(true, false)), WaitAction::kSpin);
  EXPECT_EQ(nextWaitAction(microseconds(3), withPeers(false, true)), WaitAction::kSpin);
}

// A wait that lost its core while spinning shares it with a stranger: it sleeps after the first
// spin rather than spin on (a peer on its core still gets a yield).
TEST(NextWaitAction, SleepsOnceAStrangerTookItsCore) {
  EXPECT_EQ(nextWaitAction(microseconds(3), withPeers(false, false, true)), WaitAction::kSpin);
  EXPECT_EQ(nextWaitAction(microseconds(100), withPeers(false, false, true)), WaitAction::kSleep);
  EXPECT_EQ(nextWaitAction(microseconds(100), withPeers(true, false, true)), WaitAction::kYield);
}

// On an oversubscribed host a wait past its first spin sleeps even where no stranger took its core
// yet:
// the rank it waits for may be waiting for a core (4 ranks and 2 busy processes on 2 cores:
// spinning on made allreduce 4 MiB ten times slower).
TEST(NextWaitAction, SleepsPastTheFirstSpinOnAnOversubscribedHost) {
  EXPECT_EQ(nextWaitAction(microseconds(3), oversubscribed()), WaitAction::kSpin);
  EXPECT_EQ(nextWaitAction(microseconds(100), oversubscribed()), WaitAction::kSleep);
  // Crowded alone (a thread or two over, or ranks sharing cores): spin on.
  EXPECT_EQ(nextWaitAction(microseconds(100), withPeers(false, true)), WaitAction::kSpin);
}

// A yield that came back only after a time slice gave the core to a stranger; while that is
// recent and the host is oversubscribed, a peer on the core gets it by a sleep instead (EEVDF
// runs the stranger first after every yield), at once on a crowded host. On a host with cores to
// spare the stranger is a passing guest: the peer gets its yield.
TEST(NextWaitAction, SleepsInsteadOfYieldingWhereAStrangerSharesTheCore) {
  WaitSituation busy = withPeers(true, true, false, true);
  busy.oversubscribed = true;
  EXPECT_EQ(nextWaitAction(microseconds(3), busy), WaitAction::kSleep);
  EXPECT_EQ(nextWaitAction(milliseconds(5), busy), WaitAction::kSleep);
  EXPECT_EQ(nextWaitAction(microseconds(3), withPeers(true, true, false, true)),
            WaitAction::kYield);
  EXPECT_EQ(nextWaitAction(microseconds(100), withPeers(true, false, false, true)),
            WaitAction::kYield);
  EXPECT_EQ(nextWaitAction(microseconds(3), withPeers(true, false, false, true)),
            WaitAction::kSpin);
}

TEST(NextWaitAction, WithoutPeersSpinsThenYieldsThenSleeps) {
  for (bool preempted : {false, true}) {
    EXPECT_EQ(nextWaitAction(microseconds(3), alone(preempted)), WaitAction::kSpin);
    EXPECT_EQ(nextWaitAction(microseconds(100), alone(preempted)), WaitAction::kYield);
    EXPECT_EQ(nextWaitAction(milliseconds(5), alone(preempted)), WaitAction::kSleep);
  }
}

// A rank remembers, in its own line, that a yield lost its core to a stranger, for a while.
TEST(CoreSharing, RemembersAStrangerOnItsCore) {
  WaitPresence lines[2];
  CoreSharing mine(lines, 2, 0, 2);
  EXPECT_FALSE(mine.strangerSeenLately());
  mine.noteStranger();
  EXPECT_TRUE(mine.strangerSeenLately());
  EXPECT_FALSE(CoreSharing(lines, 2, 1, 2).strangerSeenLately());             // the peer's own line
  lines[0].strangerAtNs = lines[0].strangerAtNs.load() - 1000 * 1000 * 1000;  // a second ago
  EXPECT_FALSE(mine.strangerSeenLately());
}

TEST(CoreSharing, APeerIsRunnableOnACoreWhileItsLineNamesThatCoreAndItIsAwake) {
  WaitPresence lines[3];
  CoreSharing mine(lines, 3, 0, 2), peer1(lines, 3, 1, 2), peer2(lines, 3, 2, 2);
  ASSERT_TRUE(mine);
  EXPECT_TRUE(mine.crowded());           // 3 ranks, 2 cores
  EXPECT_FALSE(mine.peerRunnableOn(0));  // nobody has waited yet
  lines[1].cpu = 5;
  lines[2].cpu = 7;
  EXPECT_TRUE(mine.peerRunnableOn(5));
  EXPECT_TRUE(mine.peerRunnableOn(7));
  EXPECT_FALSE(mine.peerRunnableOn(6));
  peer1.markSleeping(true);
  EXPECT_FALSE(mine.peerRunnableOn(5));
  peer1.markSleeping(false);
  EXPECT_TRUE(mine.peerRunnableOn(5));
  // Its own line never counts.
  int here = mine.publishCpu();
  EXPECT_EQ(lines[0].cpu.load(), here);
  lines[1].cpu = -1;
  lines[2].cpu = -1;
  EXPECT_FALSE(mine.peerRunnableOn(here));
  EXPECT_FALSE(CoreSharing(lines, 1, 0, 2));  // alone on the host: nobody to yield to
  (void)peer2;
}

// Crowded: more ranks than cores, or more runnable threads on the host than cores (the kernel's
// count, read at most once a millisecond and kept in the rank's own line). Oversubscribed: the
// ranks and the runnable strangers, a quarter (at least 2) over the cores.
TEST(CoreSharing, IsCrowdedWithMoreRanksOrRunnableThreadsThanCores) {
  WaitPresence lines[2];
  CoreSharing squeezed(lines, 2, 0, 1);
  EXPECT_TRUE(squeezed.crowded());
  CoreSharing roomy(lines, 2, 0, 1 << 20);  // no host runs a million threads at once
  EXPECT_FALSE(roomy.crowded());
  EXPECT_FALSE(roomy.oversubscribed());
  EXPECT_GE(lines[0].runnable.load(), 1);  // the reader itself runs
  // Within the millisecond the last look stands.
  lines[0].runnable = 3;
  lines[0].runnableAtNs = lines[0].runnableAtNs.load() + 10LL * 1000 * 1000 * 1000;
  CoreSharing twoCores(lines, 2, 0, 2);
  EXPECT_TRUE(twoCores.crowded());
  EXPECT_FALSE(twoCores.oversubscribed());  // 3 threads: not 2 over 2 cores
  lines[0].runnable = 5;
  EXPECT_TRUE(twoCores.oversubscribed());
  // 2 ranks asleep, 3 strangers runnable: still 5 threads that want the 2 cores.
  lines[0].runnable = 3;
  lines[0].sleeping = 1;
  lines[1].sleeping = 1;
  EXPECT_TRUE(twoCores.oversubscribed());
  lines[0].sleeping = 0;
  lines[1].sleeping = 0;
  WaitPresence many[16];
  CoreSharing sixteen(many, 16, 0, 16);
  (void)sixteen.crowded();  // a first look at the host, then a made-up one in its place
  many[0].runnable = 18;    // 16 ranks on 16 cores, and a launcher or two
  many[0].runnableAtNs = many[0].runnableAtNs.load() + 10LL * 1000 * 1000 * 1000;
  EXPECT_TRUE(sixteen.crowded());
  EXPECT_FALSE(sixteen.oversubscribed());
  many[0].runnable = 21;
  EXPECT_TRUE(sixteen.oversubscribed());
}

// Room for a thread beside each rank (LOOM_BESIDE_WAIT=auto puts a hierarchical column on one):
// every rank of the host, awake or not, one thread each beside them and the runnable strangers
// fit the cores.
TEST(CoreSharing, HasRoomForAThreadPerRankOnlyWhenEverythingFitsTheCores) {
  WaitPresence lines[4];
  CoreSharing twelve(lines, 4, 0, 12);
  (void)twelve.roomForThreadPerRank();  // a first look at the host, then made-up ones instead
  lines[0].runnableAtNs = lines[0].runnableAtNs.load() + 10LL * 1000 * 1000 * 1000;
  lines[0].runnable = 4;  // the 4 ranks, awake: 4 + 4 threads of 12 cores
  EXPECT_TRUE(twelve.roomForThreadPerRank());
  lines[0].runnable = 8;  // and 4 strangers: 12 of 12
  EXPECT_TRUE(twelve.roomForThreadPerRank());
  lines[0].runnable = 9;  // and 5: one too many
  EXPECT_FALSE(twelve.roomForThreadPerRank());
  // Asleep, the ranks still count (their wake-up needs the core): 2 asleep, 7 strangers.
  lines[1].sleeping = 1;
  lines[2].sleeping = 1;
  EXPECT_FALSE(twelve.roomForThreadPerRank());
  lines[0].runnable = 6;  // 2 awake ranks, 4 strangers: 8 + 4 = 12
  EXPECT_TRUE(twelve.roomForThreadPerRank());
  CoreSharing seven(lines, 4, 0, 7);  // 4 ranks and their threads need 8 cores: never
  EXPECT_FALSE(seven.roomForThreadPerRank());
}

// A wait that sleeps marks its rank asleep (peers then do not yield to it) and clears the mark
// however it ends, here by its check throwing.
TEST(WaitUntil, ClearsItsSleepingMarkWhenItEnds) {
  WaitPresence lines[2];
  CoreSharing mine(lines, 2, 0, 2);
  const Clock::time_point start = Clock::now();
  bool sawAsleep = false;
  EXPECT_THROW(waitUntil([] { return false; },
                         [&] {
                           sawAsleep = sawAsleep || lines[0].sleeping.load() == 1;
                           if (Clock::now() - start > milliseconds(20))
                             throw std::runtime_error("deadline");
                         },
                         mine),
               std::runtime_error);
  EXPECT_TRUE(sawAsleep);
  EXPECT_EQ(lines[0].sleeping.load(), 0);
}

}  // namespace
}  // namespace loom
