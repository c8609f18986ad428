#include "base/wait.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>

namespace loom {

int usableCores() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) != 0) return 1;
  return CPU_COUNT(&set);
}

namespace {

constexpr int64_t kStrangerMemoryNs = 50 * 1000 * 1000;

// The kernel's count of runnable threads on the whole host, the reader included (the fourth
// field of /proc/loadavg, "running/total"); -1 where it cannot be read.
int hostRunnableThreads() {
  int fd = open("/proc/loadavg", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return -1;
  char text[128];
  ssize_t n = read(fd, text, sizeof(text) - 1);
  close(fd);
  if (n <= 0) return -1;
  text[n] = '\0';
  // "0.12 0.34 0.56 3/245 12345": skip three fields to the fourth.
  const char* p = text;
  for (int field = 0; field < 3; ++field) {
    while (*p != '\0' && *p != ' ') ++p;
    while (*p == ' ') ++p;
  }
  char* end = nullptr;
  long running = std::strtol(p, &end, 10);
  return end == p || *end != '/' ? -1 : static_cast<int>(running);
}

}  // namespace

int CoreSharing::publishCpu() const {
  int cpu = sched_getcpu();
  std::atomic<int32_t>& mine = lines_[self_].cpu;
  if (mine.load(std::memory_order_relaxed) != cpu) mine.store(cpu, std::memory_order_relaxed);
  return cpu;
}

bool CoreSharing::peerRunnableOn(int cpu) const {
  for (int r = 0; r < nranks_; ++r) {
    if (r == self_) continue;
    const WaitPresence& p = lines_[r];
    if (p.cpu.load(std::memory_order_relaxed) == cpu &&
        p.sleeping.load(std::memory_order_relaxed) == 0)
      return true;
  }
  return false;
}

void CoreSharing::noteStranger(Clock::time_point now) const {
  lines_[self_].strangerAtNs.store(steadyNs(now), std::memory_order_relaxed);
}

bool CoreSharing::strangerSeenLately(Clock::time_point now) const {
  return steadyNs(now) - lines_[self_].strangerAtNs.load(std::memory_order_relaxed) <
         kStrangerMemoryNs;
}

int CoreSharing::runnableThreads(Clock::time_point at) const {
  WaitPresence& mine = lines_[self_];
  const int64_t now = steadyNs(at);
  if (now - mine.runnableAtNs.load(std::memory_order_relaxed) < 1000 * 1000)
    return mine.runnable.load(std::memory_order_relaxed);
  int runnable = hostRunnableThreads();
  mine.runnable.store(runnable, std::memory_order_relaxed);
  mine.runnableAtNs.store(now, std::memory_order_relaxed);
  return runnable;
}

bool CoreSharing::crowded(Clock::time_point now) const {
  return nranks_ > cores_ || runnableThreads(now) > cores_;
}

int CoreSharing::strangers(Clock::time_point now) const {
  int runnable = runnableThreads(now);
  if (runnable < 0) return -1;
  int awake = 0;
  for (int r = 0; r < nranks_; ++r)
    awake += lines_[r].sleeping.load(std::memory_order_relaxed) == 0;
  return std::max(0, runnable - awake);
}

bool CoreSharing::oversubscribed(Clock::time_point now) const {
  // Strangers counted with every rank, awake or not, so that ranks going to sleep (which this
  // answer makes them do) do not turn it.
  const int others = strangers(now);
  return others >= 0 && others + nranks_ > cores_ + std::max(2, cores_ / 4);
}

bool CoreSharing::roomForThreadPerRank(Clock::time_point now) const {
  const int others = strangers(now);
  return others >= 0 && others + 2 * nranks_ <= cores_;
}

}  // namespace loom
