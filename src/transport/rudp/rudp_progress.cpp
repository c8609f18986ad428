// RudpEngine's progress thread: it sleeps in poll until a flow's timer, a datagram or a wake-up,
// reads the sockets unless a caller does, and sends what every flow has (acknowledgements,
// retransmissions, new data, probes); it follows its caller's CPU where cores are scarce.
#include <poll.h>
#include <pthread.h>
#include <sched.h>

#include "base/wait.hpp"
#include "transport/rudp/rudp_engine.hpp"

namespace loom {

void RudpEngine::run() {
  // The wake-up first: while callers receive, the thread polls it alone.
  std::vector<pollfd> pfds;
  pfds.push_back({wakeFd_.get(), POLLIN, 0});
  // After the caller held the send lock through a timer wake: when to look again.
  constexpr uint64_t kDeferNs = 50'000;
  uint64_t deferUntil = 0;
  for (const Fd& fd : sockets_) pfds.push_back({fd.get(), POLLIN, 0});
  while (!stop_.load()) {
    uint64_t now = steadyNowNs();
    if (follow_) followCaller(now);
    if (resetRequested_.exchange(false)) sendResets(now);
    const Wakeup w = sleepUntilDue(pfds, now, deferUntil);
    now = w.now;
    // Woken only to see whether the caller went quiet, and it has not: nothing is due and the
    // sockets are the caller's, so the thread neither reads nor sends (it used to, every 200 us,
    // contending with the caller for the receive and send locks: two context switches a time).
    if (w.callerActive && !w.woken && !w.busy && now < w.timersDue &&
        now < lastCall_.load(std::memory_order_relaxed) + kCallerQuietNs)
      continue;
    if (w.ready > 0 || w.callerActive) {
      if (w.woken) takeWake();
      // While the caller is active and reading the sockets itself, what it reads is read: the
      // thread does not queue behind it (a futex sleep and wake-up each time).
      std::unique_lock<std::mutex> receiving(recvMu_, std::defer_lock);
      if (w.callerActive ? receiving.try_lock() : (receiving.lock(), true))
        receivePass(now, nullptr);
    }
    // Likewise a caller sending right now sends its flow, timers included (collect() runs them);
    // only what is due for sure (busy: new data, losses, ACKs) waits for the lock.
    std::unique_lock<std::mutex> send(sendMu_, std::defer_lock);
    if (w.callerActive && !w.busy && !w.woken) {
      if (!send.try_lock()) {
        deferUntil = now + kDeferNs;  // a timer it left due is looked at again then, not spun on
        continue;
      }
    } else {
      send.lock();
    }
    releaseHeld(now, false);
    for (auto& st : flows_)
      if (st) sendFlow(*st);
  }
  std::lock_guard<std::mutex> send(sendMu_);
  releaseHeld(steadyNowNs(), true);
}

RudpEngine::Wakeup RudpEngine::sleepUntilDue(std::vector<pollfd>& pfds, uint64_t now,
                                             uint64_t deferUntil) {
  Wakeup w;
  // Published before the timers are read: a caller that sends after this point and sees no
  // deadline yet, or a later one than its flow needs, wakes the thread (sendNow).
  plannedWake_.store(0);
  sleeping_.store(true);
  uint64_t next = earliestTimer(w.busy);
  // A caller that called lately reads the sockets when it waits: leave them to it until it has
  // been quiet for kCallerQuietNs, then read them here again (and before every timer).
  const uint64_t callerUntil =
      callerReceives_ ? lastCall_.load(std::memory_order_relaxed) + kCallerQuietNs : 0;
  w.callerActive = now < callerUntil;
  w.timersDue = next;
  if (w.callerActive) next = std::min(next, callerUntil);
  if (!w.busy && now < deferUntil) next = std::max(next, deferUntil);
  long timeoutNs = w.busy               ? 0
                   : next == UINT64_MAX ? 100'000'000L
                   : next <= now        ? 0
                                 : static_cast<long>(std::min<uint64_t>(next - now, 100'000'000));
  timespec ts{timeoutNs / 1'000'000'000, timeoutNs % 1'000'000'000};
  plannedWake_.store(now + static_cast<uint64_t>(timeoutNs));
  w.ready = ppoll(pfds.data(), w.callerActive ? 1 : pfds.size(), &ts, nullptr);
  sleeping_.store(false);
  w.now = steadyNowNs();
  w.woken = w.ready > 0 && (pfds[0].revents & POLLIN);
  return w;
}

uint64_t RudpEngine::earliestTimer(bool& busy) {
  uint64_t next = UINT64_MAX;
  busy = false;
  for (auto& st : flows_) {
    if (!st) continue;
    std::lock_guard<std::mutex> lock(st->mu);
    next = std::min(next, st->flow.nextTimer());
    busy |= st->flow.wantsToSend();
  }
  if (faulty_) {
    std::lock_guard<std::mutex> send(sendMu_);
    for (const Held& h : held_) next = std::min(next, h.due);
  }
  return next;
}

void RudpEngine::followCaller(uint64_t now) {
  // Why: the caller and this thread hand every message over to each other (a send, its ACKs, the
  // wake-up of a waiting reader). Left to the scheduler, both ranks' four threads on a 2-core host
  // piled onto one core for tens of milliseconds at a time (its wake-up affinity), or a rank's
  // two threads woke each other across cores; on the caller's core, a hand-over is a switch on a
  // core already awake. Measured between two namespace nodes: a 1 MiB sendrecv 1180-1580 us
  // without, 457-474 us with (TCP 497-515 us).
  const int want = callerCpu_.load(std::memory_order_relaxed);
  if (want < 0 || want == threadCpu_ || now < nextMove_) return;
  nextMove_ = now + 1'000'000;  // a caller the scheduler moves often is followed once per ms
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(want, &set);
  if (pthread_setaffinity_np(pthread_self(), sizeof(set), &set) == 0) {
    threadCpu_ = want;
    moves_.fetch_add(1, std::memory_order_relaxed);
  }
}

}  // namespace loom
