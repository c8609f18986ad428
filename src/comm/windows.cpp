// The communicator's windows: buffers every rank registers together, which a backend's native
// collectives may read and write in peers' memory (device/native.hpp registerWindow), and the
// device memory loomMemAlloc hands out for them. Also buffers a rank registers alone
// (loomCommRegister, device/native.hpp registerBuffer).
//
// Window registration is collective, and so are its failures: a rank's bad argument is
// exchanged before anything else, so that every rank throws the same loomInvalidArgument instead
// of leaving its peers waiting in the backend's exchange.
#include <algorithm>

#include "base/log.hpp"
#include "comm/comm.hpp"

namespace loom {

namespace {

// Entry `id` of a communicator's windows or registrations (Comm::WindowTable::Entry); end() when
// there is none.
template <typename Entries>
auto findEntry(Entries& entries, uint64_t id) {
  return std::find_if(entries.begin(), entries.end(), [&](const auto& e) { return e.id == id; });
}

template <typename Entries>
bool entryUsed(const Entries& entries, uint64_t id, std::string* why) {
  auto it = findEntry(entries, id);
  if (it == entries.end()) return false;
  if (why != nullptr) *why = it->why;
  return it->used;
}

}  // namespace

uint64_t Comm::registerWindow(void* ptr, size_t bytes, bool symmetric) {
  beginOperation();
  std::string problem;
  if (ptr == nullptr || bytes == 0) {
    problem = "buffer is NULL or size is 0";
  } else {
    try {
      device_->checkBuffer(ptr, bytes, "window buffer");
    } catch (const Error& e) {
      problem = e.what();
    }
  }
  std::vector<std::string> problems =
      withBootstrap([&](Bootstrap& b) { return b.allGather(problem.empty() ? "" : problem); });
  for (int q = 0; q < nranks_; ++q)
    LOOM_CHECK_ARG(problems[q].empty(), "rank ", q, ": ", problems[q]);
  WindowTable::Entry w{windows_.nextWindow++, ptr, bytes, false, ""};
  if (!native()) {
    w.why = "this communicator runs host algorithms, which do not use windows";
  } else if (!symmetric) {
    w.why = "registered without LOOM_WIN_COLL_SYMMETRIC";
  } else {
    failOnErrorExceptArguments([&] { w.used = native()->registerWindow(w.id, ptr, bytes, w.why); });
  }
  if (!w.used)
    LOOM_INFO(kSubsysColl, rank_, "window ", w.id, " (", bytes,
              " bytes) registered; collectives on it run as on any buffer: ", w.why);
  windows_.windows.push_back(w);
  return w.id;
}

void Comm::deregisterWindow(uint64_t id) {
  checkUsable();
  auto it = findEntry(windows_.windows, id);
  LOOM_CHECK_ARG(it != windows_.windows.end(), "window ", id,
                 " is not registered with this communicator");
  const bool used = it->used;
  windows_.windows.erase(it);
  if (used) failOnErrorExceptArguments([&] { native()->deregisterWindow(id); });
}

bool Comm::windowUsed(uint64_t id, std::string* why) const {
  return entryUsed(windows_.windows, id, why);
}

uint64_t Comm::registerBuffer(void* ptr, size_t bytes) {
  checkUsable();
  LOOM_CHECK_ARG(ptr != nullptr && bytes > 0, "buffer is NULL or size is 0");
  device_->checkBuffer(ptr, bytes, "registered buffer");
  WindowTable::Entry r{windows_.nextRegistration++, ptr, bytes, false, ""};
  if (!native()) {
    r.why = "this communicator runs host algorithms, which do not use registered buffers";
  } else {
    // A bad buffer fails this rank's call alone: registration involves no peer.
    r.used = native()->registerBuffer(r.id, ptr, bytes, r.why);
  }
  if (!r.used)
    LOOM_INFO(kSubsysColl, rank_, "buffer of ", bytes,
              " bytes registered; collectives on it run as on any buffer: ", r.why);
  windows_.registrations.push_back(r);
  return r.id;
}

void Comm::deregisterBuffer(uint64_t id) {
  checkUsable();
  auto it = findEntry(windows_.registrations, id);
  LOOM_CHECK_ARG(it != windows_.registrations.end(), "registration ", id,
                 " is not registered with this communicator");
  // Withdrawn from the backend first: if that fails, the registration is still listed here.
  if (it->used) failOnErrorExceptArguments([&] { native()->deregisterBuffer(id); });
  windows_.registrations.erase(it);
}

bool Comm::bufferRegistrationUsed(uint64_t id, std::string* why) const {
  return entryUsed(windows_.registrations, id, why);
}

void* Comm::allocateMemory(size_t bytes) {
  LOOM_CHECK_ARG(bytes > 0, "size is 0");
  return device_->allocate(bytes);
}

void Comm::releaseMemory(void* ptr) {
  if (ptr != nullptr) device_->release(ptr);
}

}  // namespace loom
