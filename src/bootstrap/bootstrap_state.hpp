// What a Bootstrap holds (private to src/bootstrap): the control connections, the collectives'
// state, the failure that broke it, and the control plane's news (who left, failed or vanished),
// which rank 0 keeps and tells a rank that asks.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "bootstrap/bootstrap.hpp"
#include "bootstrap/protocol.hpp"
#include "bootstrap/socket.hpp"

namespace loom {

// How long a best-effort message (an abort, a leave, an answer) may take to go out.
constexpr int64_t kAbortBudgetMs = 100;

// Polls try_lock rather than using a timed mutex: the wait is short and rare, and timed locks are
// invisible to ThreadSanitizer (it reports false unlock errors).
bool tryLockBefore(std::unique_lock<std::mutex>& lock, Deadline deadline);

// One control connection: rank 0 holds one per other rank; every other rank holds one, to rank 0.
struct ControlPeer {
  int rank = -1;
  Socket sock;
  wire::FrameReader reader;
  uint64_t maxBody = 0;
  // Serializes writers: a collective's sends against broadcastAbort from another thread.
  std::mutex sendMutex;
  // A collective's contribution (rank 0) or result (others) that has arrived but is not yet used.
  bool hasData = false;
  uint64_t dataSeq = 0;
  std::string data;
  // It said it was leaving (how: "destroyed its communicator after ..."): its EOF is a goodbye,
  // not a death. closed: its EOF was read (rank 0's news service stops watching it).
  bool left = false;
  std::string leftHow;
  bool closed = false;
};

struct Bootstrap::State {
  int rank = 0;
  int nranks = 1;
  int64_t timeoutMs = 0;
  const std::atomic<bool>* abortFlag = nullptr;
  std::vector<std::string> infos;
  std::vector<std::unique_ptr<ControlPeer>> peers;
  uint64_t seq = 0;
  // Held by collectives, health probes and rank 0's news service: one reader of the connections.
  std::mutex callMutex;
  std::mutex failMutex;
  std::atomic<bool> failed{false};
  loomResult_t failCode = loomSuccess;
  std::string failMessage;
  // The news: rank 0 notes per rank what it heard (a leave, an abort, a connection closed without
  // one) and answers a leaf's question with it; it never sends it unasked, so that a normal
  // teardown costs one frame per rank, not one per pair. A leaf keeps rank 0's last answer.
  std::mutex newsMutex;
  std::vector<std::string> news;
  bool answered = false;
  std::string answer;
  // Rank 0's news service: reads the connections while no collective does, so that aborts are
  // relayed and questions answered while this rank computes or waits on its data channels.
  // Pokes (stopping, or a peer's data taken) wake the service; none: no service.
  std::optional<EventFd> serviceWake;
  std::atomic<bool> stopping{false};
  std::thread service;

  bool aborted() const { return abortFlag != nullptr && abortFlag->load(); }
  void throwIfFailed();
  void recordFailure(const Error& e);
  void drain(ControlPeer& peer);
  // drain's frames other than a collective's data; false for data (drain keeps it).
  bool takeNotice(ControlPeer& peer, wire::Frame& frame);
  [[noreturn]] void onPeerLost(ControlPeer& peer, const Error& cause);
  [[noreturn]] void onAbortFrame(ControlPeer& peer, const wire::Frame& frame);
  void forwardAbort(int origin, wire::AbortKind kind, const std::string& reason,
                    int exceptRank) noexcept;
  void sendBestEffort(ControlPeer& peer, const std::string& frame, Deadline deadline) noexcept;
  void sendLocked(ControlPeer& peer, const std::string& frame, Deadline deadline);
  std::vector<std::string> gatherAtRank0(const std::string& mine, Deadline deadline);
  std::vector<std::string> gatherAtLeaf(const std::string& mine, Deadline deadline);
  void acceptControl(Listener& listener, uint64_t token, const JobSecret& secret,
                     Deadline deadline);
  void connectControl(const wire::RankBlob& rank0, const JobSecret& secret, Deadline deadline);

  // The news (control_news.cpp).
  void noteNews(int about, const std::string& what);
  std::string newsText();
  void startService();
  void pokeService() noexcept;
  void stopService() noexcept;
  void serve();
  void serveReadable(ControlPeer& peer);
  std::string askRank0(Deadline deadline);
  std::string waitAtRank0(Deadline deadline);
};

}  // namespace loom
