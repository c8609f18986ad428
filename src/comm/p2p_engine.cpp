#include "comm/p2p_engine.hpp"

#include <algorithm>

namespace loom {

namespace {

constexpr auto kPeerCheckInterval = std::chrono::milliseconds(5);

// Marks a ticket finished; returns its callback (if any) for the caller to run unlocked.
std::function<void(loomResult_t)> markFinished(P2PTicket& t, loomResult_t code,
                                               const std::string& message, FlightRecorder* flight) {
  if (flight != nullptr && t.flight != 0) flight->finish(t.flight, code);
  std::lock_guard<std::mutex> lock(t.mutex);
  t.result = code;
  t.message = message;
  t.finished.store(true, std::memory_order_release);
  return std::move(t.callback);
}

const char* direction(const P2POp& op) { return op.isSend ? "send to" : "receive from"; }

}  // namespace

void setTicketCallback(P2PTicket& ticket, std::function<void(loomResult_t)> callback) {
  {
    std::lock_guard<std::mutex> lock(ticket.mutex);
    if (!ticket.finished.load(std::memory_order_acquire)) {
      ticket.callback = std::move(callback);
      return;
    }
  }
  callback(ticket.result);
}

P2PEngine::P2PEngine(P2PEngineHooks hooks, ProgressQueue& queue)
    : hooks_(std::move(hooks)), queue_(queue) {
  queue_.attach(*this);
}

P2PEngine::~P2PEngine() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  changed_.notify_all();
  queue_.detach(*this);  // its drive sees stopping_ and ends
  std::lock_guard<std::mutex> lock(mutex_);
  finishAllLocked(loomInvalidUsage,
                  "the communicator was destroyed with this point-to-point operation in flight");
  runCallbacks();
}

std::shared_ptr<P2PTicket> P2PEngine::post(const P2POp& op) {
  hooks_.checkPeer(-1);  // an aborted communicator refuses new work at once
  auto ticket = std::make_shared<P2PTicket>();
  ticket->op = op;
  ticket->deadline = Clock::now() + std::chrono::milliseconds(hooks_.timeoutMs);
  record(*ticket, FlightState::kQueued);
  {
    std::lock_guard<std::mutex> lock(mutex_);
    queueDrives_ = true;
    requests_.push_back(ticket);
    enqueueLocked(ticket.get());
  }
  queue_.wake();
  return ticket;
}

void P2PEngine::postOwned(P2PTicket& ticket) {
  hooks_.checkPeer(-1);
  ticket.deadline = Clock::now() + std::chrono::milliseconds(hooks_.timeoutMs);
  record(ticket, FlightState::kStarted);
  bool wake = false;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    enqueueLocked(&ticket);
    wake = queueDrives_;
  }
  if (wake) queue_.wake();
}

void P2PEngine::startThread() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    queueDrives_ = true;
  }
  queue_.wake();
}

bool P2PEngine::wantsDriving() {
  std::lock_guard<std::mutex> lock(mutex_);
  return queueDrives_ && !driving_ && !stopping_ && (!incoming_.empty() || !active_.empty());
}

void P2PEngine::driveWhile(const std::function<bool()>& stop) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (driving_ || stopping_) return;
    driving_ = true;
  }
  drive([&] { return stopping_.load() || idle() || stop(); });
  {
    std::lock_guard<std::mutex> lock(mutex_);
    driving_ = false;
  }
  changed_.notify_all();
}

void P2PEngine::record(P2PTicket& ticket, FlightState state) {
  if (hooks_.flight == nullptr) return;
  const P2POp& op = ticket.op;
  FlightCall call;
  call.kind = op.isSend ? FlightKind::kSend : FlightKind::kRecv;
  call.state = state;
  call.func = loomFuncSendRecv;
  call.seq = recorded_.fetch_add(1, std::memory_order_relaxed) + 1;
  call.peer = op.peer == kAnySource ? -2 : op.peer;
  call.tag = op.tag;
  call.count = op.bytes;
  call.dtype = loomUint8;
  call.bytes = op.bytes;
  call.algorithm = "p2p";
  ticket.flight = hooks_.flight->begin(call);
}

void P2PEngine::enqueueLocked(P2PTicket* ticket) {
  incoming_.push_back(ticket);
  posted_.fetch_add(1);
  changed_.notify_all();
}

void P2PEngine::finish(const std::vector<P2PTicket*>& tickets) {
  auto mine = [&] {
    return std::all_of(tickets.begin(), tickets.end(), [](const P2PTicket* t) {
      return t->finished.load(std::memory_order_acquire);
    });
  };
  {
    std::unique_lock<std::mutex> lock(mutex_);
    while (!mine()) {
      if (!driving_) {
        driving_ = true;
        lock.unlock();
        // Until this caller's tickets are done, or none of this engine's are left to move (a
        // group's tickets on another engine finish on that engine's thread).
        drive([&] { return mine() || idle(); });
        lock.lock();
        driving_ = false;
        changed_.notify_all();
        // Tickets left outstanding (requests, another caller's) go back to the queue's thread.
        if (queueDrives_ && (!incoming_.empty() || !active_.empty())) {
          lock.unlock();
          queue_.wake();
          lock.lock();
        }
      } else {
        // Woken when a ticket finishes; the bound covers tickets of other engines.
        changed_.wait_for(lock, std::chrono::milliseconds(1));
      }
    }
  }
  for (const P2PTicket* t : tickets)
    if (t->result != loomSuccess) throw Error(t->result, t->message);
}

void P2PEngine::takePosted() {
  if (posted_.load(std::memory_order_acquire) == taken_) return;
  std::lock_guard<std::mutex> lock(mutex_);
  if (hooks_.flight != nullptr)
    for (P2PTicket* t : incoming_) hooks_.flight->start(t->flight, 0, nullptr);
  active_.insert(active_.end(), incoming_.begin(), incoming_.end());
  incoming_.clear();
  taken_ = posted_.load();
  // Sized by what is outstanding, not by how a pass happens to go: once warm, nothing grows.
  ops_.reserve(active_.size());
  done_.reserve(active_.size());
  passState_.busy.reserve(active_.size());
}

template <typename Until>
void P2PEngine::drive(Until until) {
  // The executor's progress loop over this engine's tickets (their lanes are the tag matcher's:
  // algorithms/p2p); a failure finishes every ticket with it, and the loop then finds nothing
  // left to drive.
  for (;;) {
    try {
      driveUntil(
          *this,
          [&] {
            takePosted();
            return until();
          },
          pollSet_, CoreSharing());
      return;
    } catch (const Error& e) {
      failAll(e);
    } catch (const std::exception& e) {
      failAll(Error(loomInternalError, e.what()));
    }
  }
}

bool P2PEngine::pass() {
  takePosted();
  ops_.clear();
  for (P2PTicket* t : active_) ops_.push_back(&t->op);
  const bool moved = progressPointToPoint(ops_, passState_);
  finishDone();
  return moved;
}

void P2PEngine::healthCheck() {
  hooks_.checkPeer(-1);
  const Clock::time_point now = Clock::now();
  for (const P2PTicket* t : active_) {
    if (t->op.done || now < t->deadline) continue;
    const P2POp& op = t->op;
    LOOM_THROW(loomTimeout, "timed out after ", hooks_.timeoutMs / 1000.0, " s in a ",
               direction(op), op.peer == kAnySource ? " any rank" : " rank ",
               op.peer == kAnySource ? "" : std::to_string(op.peer), " (tag ", op.tag, ", ",
               op.bytes, " bytes) (LOOM_TIMEOUT / config timeoutMs)");
  }
  if (now < nextPeerCheck_) return;
  nextPeerCheck_ = now + kPeerCheckInterval;
  for (const P2PTicket* t : active_)
    if (!t->op.done) hooks_.checkPeer(t->op.peer);
}

void P2PEngine::finishDone() {
  done_.clear();
  for (P2PTicket* t : active_)
    if (t->op.done) done_.push_back(t);
  if (done_.empty()) return;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    for (P2PTicket* t : done_) {
      auto callback = markFinished(*t, loomSuccess, {}, hooks_.flight);
      if (callback) callbacks_.emplace_back(std::move(callback), loomSuccess);
    }
    std::erase_if(active_, [](const P2PTicket* t) { return t->op.done; });
    std::erase_if(requests_, [](const std::shared_ptr<P2PTicket>& t) {
      return t->finished.load(std::memory_order_relaxed);
    });
  }
  changed_.notify_all();
  runCallbacks();
}

void P2PEngine::finishAllLocked(loomResult_t code, const std::string& message) {
  for (std::vector<P2PTicket*>* list : {&active_, &incoming_}) {
    for (P2PTicket* t : *list) {
      auto callback = markFinished(*t, code, message, hooks_.flight);
      if (callback) callbacks_.emplace_back(std::move(callback), code);
    }
    list->clear();
  }
  requests_.clear();
}

void P2PEngine::failAll(const Error& error) {
  hooks_.fail(error);  // the communicator is aborted first: later posts fail at once
  {
    std::lock_guard<std::mutex> lock(mutex_);
    finishAllLocked(error.code(), error.what());
  }
  changed_.notify_all();
  runCallbacks();
}

void P2PEngine::runCallbacks() {
  for (auto& [callback, code] : callbacks_) callback(code);
  callbacks_.clear();
}

}  // namespace loom
