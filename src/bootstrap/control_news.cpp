// The control plane's news. A rank waiting on a peer of another host sees only silence, an EOF
// or a reset, which names the peer but not why it stopped. Rank 0, the hub of the control plane,
// hears more: every rank says goodbye when it destroys its communicator (and after which call),
// an abort names its reason, and a connection that closes without a goodbye means a death. It
// notes all of it and tells a rank that asks, after a call of that rank failed. Nothing is sent
// unasked but aborts (relayed as always) and rank 0's own goodbye: a normal teardown costs one
// frame per rank. A news service thread on rank 0 reads the connections while no collective of
// the bootstrap does, so that relays and answers do not wait for rank 0's next control call.
#include <poll.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "base/error.hpp"
#include "base/log.hpp"
#include "bootstrap/bootstrap_state.hpp"

namespace loom {

namespace {

// Bounds what one rank's note and one answer may hold (a reason is at most a few hundred bytes).
constexpr size_t kMaxNoteBytes = 1024;
constexpr size_t kMaxNewsBytes = 4096;

}  // namespace

bool Bootstrap::State::takeNotice(ControlPeer& peer, wire::Frame& frame) {
  switch (frame.type) {
    case wire::FrameType::kData:
      return false;
    case wire::FrameType::kAbort:
      onAbortFrame(peer, frame);
    case wire::FrameType::kLeave:
      peer.left = true;
      peer.leftHow = frame.body.substr(0, kMaxNoteBytes);
      noteNews(peer.rank, "rank " + std::to_string(peer.rank) + " " + peer.leftHow);
      return true;
    case wire::FrameType::kQuery:
      if (rank == 0)
        sendBestEffort(peer, wire::encodeFrame(wire::FrameType::kNews, 0, 0, newsText()),
                       deadlineAfterMs(kAbortBudgetMs));
      return true;
    case wire::FrameType::kNews: {
      std::lock_guard<std::mutex> lock(newsMutex);
      answered = true;
      answer = frame.body.substr(0, kMaxNewsBytes);
      return true;
    }
    default:
      LOOM_THROW(loomRemoteError, "unexpected message (type ", static_cast<int>(frame.type),
                 ") from ", peer.sock.peer());
  }
}

void Bootstrap::State::noteNews(int about, const std::string& what) {
  std::lock_guard<std::mutex> lock(newsMutex);
  if (news.empty()) news.resize(nranks);
  // The first word on a rank is its cause; what follows (its goodbye after an abort) is an echo.
  if (about >= 0 && about < nranks && news[about].empty())
    news[about] = what.substr(0, kMaxNoteBytes);
}

std::string Bootstrap::State::newsText() {
  std::lock_guard<std::mutex> lock(newsMutex);
  std::string text;
  int untold = 0;
  for (const std::string& note : news) {
    if (note.empty()) continue;
    if (text.size() + note.size() + 2 > kMaxNewsBytes) {
      ++untold;
      continue;
    }
    text += (text.empty() ? "" : "; ") + note;
  }
  if (untold > 0) text += "; and " + std::to_string(untold) + " rank(s) more";
  return text;
}

void Bootstrap::State::startService() {
  try {
    serviceWake.emplace("the control plane's news service");
  } catch (const Error& e) {
    // Without it the control plane works as before: relays and answers at rank 0's next read.
    LOOM_WARN(kSubsysBootstrap, rank, "no news service on the control plane (", e.what(), ")");
    return;
  }
  service = std::thread([this] { serve(); });
}

void Bootstrap::State::pokeService() noexcept {
  if (serviceWake) serviceWake->signal();
}

void Bootstrap::State::stopService() noexcept {
  if (!service.joinable()) return;
  stopping.store(true);
  pokeService();
  service.join();
}

void Bootstrap::State::serve() {
  std::vector<pollfd> fds;
  std::vector<ControlPeer*> watched;
  while (true) {
    fds.assign(1, pollfd{serviceWake->get(), POLLIN, 0});
    watched.clear();
    {
      // A peer whose data waits for a collective is left to it: what follows is for after.
      std::lock_guard<std::mutex> lock(callMutex);
      for (auto& peer : peers) {
        if (peer->closed || peer->hasData) continue;
        fds.push_back({peer->sock.fd(), POLLIN, 0});
        watched.push_back(peer.get());
      }
    }
    if (::poll(fds.data(), fds.size(), -1) < 0 && errno != EINTR) return;
    if (fds[0].revents != 0) {
      // Poked: stopping, or a collective took a peer's data (that peer is watched again).
      serviceWake->consume();
      if (stopping.load()) return;
      continue;
    }
    std::lock_guard<std::mutex> lock(callMutex);
    for (size_t i = 0; i < watched.size(); ++i)
      if (fds[i + 1].revents != 0) serveReadable(*watched[i]);
  }
}

void Bootstrap::State::serveReadable(ControlPeer& peer) {
  try {
    drain(peer);
  } catch (const Error& e) {
    // The bootstrap is broken as a health probe would have found it, unless this was a goodbye.
    if (!(peer.closed && peer.left)) recordFailure(e);
    // Whatever it was (an EOF, an abort with its sender's EOF behind it, a malformed frame), the
    // service has nothing more to learn from this connection; a collective still reads it.
    peer.closed = true;
  }
}

std::string Bootstrap::State::waitAtRank0(Deadline deadline) {
  // The service reads the connections: an abort on its way arrives in the failure.
  while (!failed.load() && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  if (failed.load()) {
    std::lock_guard<std::mutex> lock(failMutex);
    return failMessage;
  }
  return newsText();
}

std::string Bootstrap::State::askRank0(Deadline deadline) {
  ControlPeer& root = *peers[0];
  const auto asked = std::chrono::steady_clock::now();
  {
    std::lock_guard<std::mutex> lock(newsMutex);
    answered = false;
  }
  sendBestEffort(root, wire::encodeFrame(wire::FrameType::kQuery, rank, 0, ""), deadline);
  std::vector<pollfd> fds{{root.sock.fd(), POLLIN, 0}};
  while (std::chrono::steady_clock::now() < deadline) {
    fds[0].revents = 0;
    if (pollSlice(fds, deadline) > 0) drain(root);  // an abort or rank 0's EOF throws
    std::lock_guard<std::mutex> lock(newsMutex);
    // An answer with news is the cause; an empty one may still be followed by an abort that
    // reaches rank 0 after its sender's EOF reached this rank: wait the budget out for it.
    if (answered && !answer.empty()) return answer;
  }
  std::lock_guard<std::mutex> lock(newsMutex);
  if (answered) return answer;
  const auto waited = std::chrono::duration_cast<std::chrono::milliseconds>(
      std::chrono::steady_clock::now() - asked);
  return "rank 0, which relays the control plane, did not answer within " +
         std::to_string(waited.count()) + " ms (stopped, or too busy to)";
}

void Bootstrap::leave(const std::string& how) noexcept {
  State& s = *state_;
  try {
    const std::string frame =
        wire::encodeFrame(wire::FrameType::kLeave, s.rank, 0, how.substr(0, kMaxNoteBytes));
    const Deadline deadline = deadlineAfterMs(kAbortBudgetMs);
    // To a connection already closed the send fails at once (rank 0's service may be reading
    // them: `closed` is not this thread's to look at).
    for (auto& peer : s.peers) s.sendBestEffort(*peer, frame, deadline);
  } catch (...) {
  }
}

std::string Bootstrap::news(int64_t budgetMs) {
  State& s = *state_;
  if (s.nranks == 1) return "";
  const Deadline deadline = deadlineAfterMs(budgetMs);
  if (s.rank == 0) return s.waitAtRank0(deadline);
  std::unique_lock<std::mutex> lock(s.callMutex, std::defer_lock);
  if (!tryLockBefore(lock, deadline)) return "";
  try {
    s.throwIfFailed();
    return s.askRank0(deadline);
  } catch (const Error& e) {
    s.recordFailure(e);
    return e.what();
  }
}

}  // namespace loom
