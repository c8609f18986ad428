// The rudp transport of one communicator: a few UDP sockets ("paths", LOOM_RUDP_PATHS) on the
// chosen interface carry every flow to every remote peer; a waiting caller or the progress thread
// reads them.
//
// Roles and steps:
//  - Setup: bind the sockets, publish "address port port ..." through the bootstrap's
//    all-gather, create one Flow per (remote peer, channel class), start the thread.
//  - Receiving (receivePass, under recvMu_): whoever holds it reads every path. A channel whose
//    caller finds nothing to read (or no room to send) reads them itself (receiveHere), and its
//    waits poll the sockets as well as the flow's own descriptor, so a datagram
//    wakes the caller directly: one wake-up per message instead of the thread's and then the
//    caller's (LOOM_RUDP_CALLER_RECEIVES; a 8 B message 60 -> 22-28 us between two namespace
//    nodes, TCP 12). While a channel was called within kCallerQuietNs, the thread leaves the
//    sockets to the callers (both would wake for every datagram) and reads them only when it
//    wakes for a timer; after that it polls them again, so nothing waits longer than that.
//  - Progress thread: blocks in poll on the sockets (see above) and a wake-up descriptor, with a
//    timeout at the earliest flow timer; receives in batches (recvmmsg; with UDP GRO one buffer
//    holds up to 64 KiB of datagrams of one sender), authenticates, hands each datagram to its
//    flow, wakes each flow's reader once per batch, then lets every flow emit ACKs,
//    retransmissions, new data and probes. A flow's datagrams leave in bursts: consecutive
//    datagrams to one peer are one system call (UDP GSO: the kernel cuts one buffer into equal
//    datagrams, as TCP's TSO does; without it, sendmmsg), on one path for a flowlet of bursts, then
//    on the next (the flow chooses: FlowConfig::flowletPackets), so a fabric that hashes on ports
//    spreads a flow over paths and one path's datagrams arrive in order. It also serves flows
//    nobody calls any more, so the last bytes of a collective still get retransmitted after the
//    caller moved on.
//  - Channels (rudp_channel.hpp) copy into and out of a flow's rings under its mutex; a send
//    leaves from the caller's thread when the thread is not sending (sendNow), which wakes the
//    thread only if it sleeps past the flow's timers; waits poll an eventfd (data arrived) or a
//    one-page pipe (room freed) that the thread makes ready, and the sockets (above).
//  - The thread pins itself to the CPU of the latest channel call (LOOM_RUDP_FOLLOW_CALLER).
//  - Destruction lingers, bounded, until what was sent is acknowledged, then logs the counters.
// A test-only fault layer (LOOM_RUDP_FAULTS) drops, duplicates and delays outgoing datagrams.
// Files: rudp_engine.cpp (set-up, lifetime, reset, counters), rudp_progress.cpp (the progress
// thread), rudp_send.cpp (the send path), rudp_receive.cpp (the receive path).
#pragma once

#include <poll.h>
#include <sched.h>
#include <sys/socket.h>

#include <atomic>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "base/wait.hpp"
#include "bootstrap/bootstrap.hpp"
#include "bootstrap/socket.hpp"
#include "transport/channel.hpp"
#include "transport/rudp/rudp_flow.hpp"
#include "transport/tcp/interfaces.hpp"

namespace loom {

struct RudpSetup {
  int rank = 0;
  int nranks = 1;
  std::vector<bool> remote;        // by rank: reached over rudp
  std::vector<std::string> names;  // by rank: "rank 3 on hostB"
  int classes = 2;
  int paths = 2;
  NetInterface itf;
  JobSecret secret;  // already derived for this communicator and transport
  rudp::FlowConfig flow;
  std::string faults;  // LOOM_RUDP_FAULTS: "drop=P,dup=P,delay=P" (tests only)
  int64_t lingerMs = 2000;
  bool gso = true;  // LOOM_RUDP_GSO: UDP segmentation offload and GRO where the kernel has them
  // LOOM_RUDP_FOLLOW_CALLER (comm resolves auto): the progress thread runs where its caller does.
  bool followCaller = true;
  bool callerReceives = true;  // LOOM_RUDP_CALLER_RECEIVES: a waiting caller reads the sockets
  std::function<std::vector<std::string>(const std::string&)> allGather;
};

// One flow plus what its channel and the progress thread share. Guarded by mu.
struct RudpFlowState {
  RudpFlowState(int peer, int cls, const rudp::FlowConfig& config);
  // With mu held: makes dataReady readable, unless it already is.
  void notifyData();
  // With mu held: drains dataReady if it was signalled.
  void takeWakeup();
  // With mu held: empties the room pipe, so that its write end polls POLLOUT again.
  void drainRoom();
  // With mu held: a writer blocked on a full ring goes on when room freed (or the flow failed).
  void unblockWriter() {
    if (sendBlocked && (flow.writable() > 0 || flow.failed())) {
      drainRoom();
      sendBlocked = false;
    }
  }
  int peer, cls;
  std::mutex mu;
  rudp::Flow flow;
  EventFd dataReady{"an rudp flow"};  // readable when bytes arrived (the channel drains it)
  bool dataSignalled = false;         // dataReady holds a count (both change only under mu)
  std::condition_variable placed;     // a train placed in the flow's space was processed
  Fd roomPipe[2];  // one-page pipe: the write end polls POLLOUT unless sendBlocked
  bool sendBlocked = false;
  bool touched = false;  // progress thread only: in touched_ this batch
  // Progress thread only: its last train came whole (consecutive packets from the peeked
  // offset), so the next one is received in place; one with holes (reordering inside trains)
  // turns that off until a train read into scratch would have fitted again.
  bool predictable = true;
};

class RudpEngine {
 public:
  explicit RudpEngine(const RudpSetup& setup);
  ~RudpEngine();
  RudpEngine(const RudpEngine&) = delete;
  RudpEngine& operator=(const RudpEngine&) = delete;

  // The channel to `peer` of class `cls` (each exactly once).
  std::unique_ptr<Channel> channel(int peer, int cls);
  // The communicator failed: every peer is told (best effort) and every flow fails.
  void reset(const std::string& why);
  // Wakes the progress thread.
  void wake();
  // Wakes it if it sleeps past steady time `due` (the thread publishes plannedWake_ before it
  // reads the timers, 0 meanwhile).
  void wakeIfAsleepPast(uint64_t due);
  // From a channel: sends what the flow has now, from the calling thread when it can.
  void sendNow(RudpFlowState& st);
  // From every channel call: the caller is active (the progress thread leaves the sockets to it
  // for a while) and its CPU is where the progress thread moves (when following its caller).
  void noteCaller() {
    if (callerReceives_) lastCall_.store(steadyNowNs(), std::memory_order_relaxed);
    if (!follow_) return;
    const int cpu = sched_getcpu();
    if (cpu >= 0 && cpu != callerCpu_.load(std::memory_order_relaxed))
      callerCpu_.store(cpu, std::memory_order_relaxed);
  }
  // From a channel that found nothing to read or no room: reads what the sockets hold now and
  // sends the ACKs and whatever else is due, unless another thread is reading them. `self` is
  // the caller's flow: it looks again itself, so it is not signalled.
  void receiveHere(RudpFlowState* self);
  bool callerReceives() const { return callerReceives_; }
  // The sockets, for a waiting caller's poll set (POLLIN).
  void addSockets(PollSet& set) const {
    for (const Fd& fd : sockets_) set.add(fd.get(), POLLIN);
  }

  // One line per remote peer: retransmissions, timeouts, RTT, duplicates, out-of-order, ...
  std::string describeCounters() const;
  int paths() const { return static_cast<int>(sockets_.size()); }
  size_t mss() const { return mss_; }
  const std::string& name(int peer) const { return names_[peer]; }

 private:
  struct Fault {
    double drop = 0, dup = 0, delay = 0;
  };
  struct Held {
    uint64_t due;
    int path;
    int peer;
    std::vector<char> bytes;
  };
  RudpFlowState* flowOf(int peer, int cls) const;
  // Set-up, in the constructor's order: the fault layer's LOOM_RUDP_FAULTS; mss_ from the
  // interface's MTU, and the flows' configuration with it; the sockets, bound, as the "address
  // port port ..." this rank publishes; the peers' published paths and a flow per (remote peer,
  // class).
  void parseFaults(const std::string& spec);
  rudp::FlowConfig configureFlows(const RudpSetup& s);
  std::string bindSockets(const RudpSetup& s);
  void addPeers(const RudpSetup& s, const std::vector<std::string>& endpoints,
                const rudp::FlowConfig& fc);
  // The progress thread (rudp_progress.cpp).
  void run();
  // One sleep of the progress thread: what it slept for and what ended it.
  struct Wakeup {
    uint64_t now = 0;           // when it woke
    uint64_t timersDue = 0;     // the earliest flow timer (or held datagram) when it went to sleep
    int ready = 0;              // ppoll's result
    bool busy = false;          // a flow had something to send at once
    bool callerActive = false;  // a channel was called within kCallerQuietNs: the sockets are its
    bool woken = false;         // the wake-up descriptor was signalled
  };
  // Publishes its planned wake-up, then sleeps in ppoll until the earliest timer (not before
  // deferUntil unless busy), a datagram (unless the caller is active) or a wake().
  Wakeup sleepUntilDue(std::vector<pollfd>& pfds, uint64_t now, uint64_t deferUntil);
  // The earliest timer of every flow and held datagram; busy: a flow wants to send now.
  uint64_t earliestTimer(bool& busy);
  // Empties the wake-up descriptor that wake() signals.
  void takeWake();
  // After reset(), on the progress thread: a RESET to every peer's flow; this rank's flows fail.
  void sendResets(uint64_t now);
  // Where the payloads of the message a path's peeked first header starts go: `slots` ring
  // slots of mss bytes from `ring` on, for stream offsets `offset` + j * mss of flow st (none:
  // the whole message goes to scratch).
  struct Placement {
    RudpFlowState* named = nullptr;  // the flow the peeked header names (unauthenticated)
    RudpFlowState* st = nullptr;     // where the slots are, when there are any
    uint64_t offset = 0;
    char* ring = nullptr;
    size_t slots = 0;
  };
  // A datagram of a train whose payload was not where it belongs, waiting in the stash.
  struct Stashed {
    rudp::Header h;
    RudpFlowState* st;
    size_t at;
  };
  // Reads a few messages of a path; true when it read them all (more may be waiting).
  bool receive(int path, uint64_t now);
  // Without GRO: one recvmmsg of datagrams into scratch.
  bool receiveBatch(int path, uint64_t now);
  // One GRO message, its payloads in place where the peeked header says; false when none.
  bool receiveOne(int path, uint64_t now);
  // A train read into scratch for a flow whose trains are not placed (Placement::named): whether
  // it would have fitted (consecutive packets of that flow from the peeked offset on).
  bool wouldHaveFitted(const Placement& pl, const char* scratch, size_t n, size_t seg) const;
  // A train of `seg`-byte datagrams that the scatter list did not expect: its n bytes gathered in
  // order into the stash, then delivered one by one.
  void deliverGathered(size_t n, size_t seg, uint64_t now);
  // A train read as placed: each datagram authenticated and checked, counted where the kernel put
  // it, or moved through the stash to where it belongs.
  void deliverPlaced(const Placement& pl, size_t n, size_t seg, uint64_t now);
  // The receive scratch past the message buffers: the headers of a placed train, then the stash.
  char* trainHeaders() { return recvBufs_.data() + kRecvBatch * kMessageBytes; }
  char* trainStash() { return trainHeaders() + kMaxTrain * rudp::kHeaderBytes; }
  Placement place(const char* first, size_t bytes);
  void noteTouched(RudpFlowState& st);
  // With recvMu_ held: reads every path until it is empty (or a bounded number of rounds);
  // true when a flow got packets.
  bool receivePass(uint64_t now, RudpFlowState* self);
  // Signals the readers (and blocked writers) of the flows that got packets, except self's reader:
  // that caller looks again itself (one thread at a time calls a flow's channel: class 0 the
  // collective caller, class 1 the point-to-point engine's).
  void wakeReaders(RudpFlowState* self);
  // With sendMu_ held: sends what the flow may send now, in rounds of at most kRoom datagrams.
  void sendFlow(RudpFlowState& st);
  size_t sendRound(RudpFlowState& st);
  static constexpr size_t kRoom = 256;  // datagrams a flow emits per round (the scratch's size)
  // Queues one datagram into the current burst (after the test-only fault layer).
  void transmit(int path, int peer, const char* header, std::span<const char> payload,
                uint64_t now);
  void append(int path, int peer, const char* header, std::span<const char> payload);
  // Sends the current burst: one GSO datagram train or one sendmmsg.
  void flush();
  void sendBurst(size_t first, size_t count, bool gso);
  void deliver(const char* data, size_t bytes, uint64_t now);
  void releaseHeld(uint64_t now, bool all);
  // Progress thread: pins itself to the CPU its caller last ran on, at most once a millisecond.
  void followCaller(uint64_t now);

  int rank_;
  int classes_;
  std::vector<std::string> names_;
  uint64_t commId_ = 0;
  rudp::PacketKeys keys_;
  size_t mss_ = 0;
  std::vector<Fd> sockets_;                            // one per path
  std::vector<std::vector<sockaddr_storage>> addr_;    // [peer][path]
  std::vector<socklen_t> addrLen_;                     // [peer]
  std::vector<std::unique_ptr<RudpFlowState>> flows_;  // [peer * classes + cls], null if local
  EventFd wakeFd_{"the rudp engine"};
  // Sending (the scratch below, the fault layer) belongs to one thread at a time: the progress
  // thread or a channel's caller (sendNow). So does receiving (the receive scratch, touched_):
  // the progress thread, or a caller whose channel found nothing (receiveHere), under recvMu_.
  std::mutex sendMu_;
  std::mutex recvMu_;
  // Callers receive (RudpSetup::callerReceives): while a channel was called within the last
  // kCallerQuietNs the progress thread does not poll the sockets (a datagram would wake both it
  // and the waiting caller); it wakes for timers and when that time has passed, then reads them.
  bool callerReceives_ = false;
  std::atomic<uint64_t> lastCall_{0};
  static constexpr uint64_t kCallerQuietNs = 200'000;
  // Following the caller (RudpSetup::followCaller, on a process allowed more than one CPU): the
  // CPU of the latest channel call, and the one the thread is pinned to (progress thread only).
  bool follow_ = false;
  std::atomic<int> callerCpu_{-1};
  int threadCpu_ = -1;
  uint64_t nextMove_ = 0;
  std::atomic<uint64_t> moves_{0};
  std::atomic<bool> sleeping_{false};
  std::atomic<uint64_t> plannedWake_{0};
  std::atomic<bool> stop_{false};
  std::atomic<bool> resetRequested_{false};
  std::string resetWhy_;
  int64_t lingerMs_;

  Fault fault_;
  bool faulty_ = false;  // the fault layer is on: held_ may hold datagrams
  std::mt19937_64 faultRng_;
  std::vector<Held> held_;

  // Progress-thread scratch, allocated once.
  std::vector<rudp::Outgoing> out_;
  // Receive scratch: the message buffer (kRecvBatch of them without GRO), the train's headers,
  // the stash.
  static constexpr size_t kRecvBatch = 8;
  static constexpr size_t kMessageBytes = 65536;  // a GRO train (IPv4's limit on one datagram)
  static constexpr size_t kMaxTrain = kMessageBytes / (rudp::kHeaderBytes + 64) + 1;
  static constexpr size_t kRecvScratchBytes =
      kRecvBatch * kMessageBytes + kMaxTrain * rudp::kHeaderBytes + kMessageBytes;
  std::vector<char> recvBufs_;
  std::vector<iovec> recvIov_;
  std::vector<Stashed> stashed_;
  bool gro_ = false;     // the sockets coalesce trains (UDP_GRO)
  size_t readPath_ = 0;  // the path that last had something to read
  std::vector<char> headers_;
  std::vector<RudpFlowState*> touched_;  // flows that got packets in this receive batch
  // Datagrams per GSO burst (the kernel's older limit), and its bytes: a GSO burst is one IP
  // datagram before segmentation.
  static constexpr size_t kMaxSegments = 64;
  static constexpr size_t kMaxBurstBytes = 65000;
  // The burst being built: datagrams to one peer on one path; all but the last are segBytes long.
  struct Burst {
    int path = -1, peer = -1;
    size_t segBytes = 0, total = 0;
    bool lastShort = false;
    std::vector<iovec> iov;     // header, payload, header, payload, ...
    std::vector<iovec> merged;  // the same with adjacent pieces joined (for one GSO send)
  } burst_;
  bool gso_ = true;

  std::atomic<uint64_t> refused_{0};  // datagrams that failed authentication or identity checks
  std::thread thread_;
};

}  // namespace loom
