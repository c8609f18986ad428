// One rank of the init/destroy cycles (tests/soak/cycles.py, or any launcher Loom reads):
//
//   init_cycles CYCLES WARMUP
//
// The first communicator comes from the launcher's environment (loomCommInitFromEnv); each next
// one from a unique id that rank 0 makes and broadcasts over the previous communicator, which is
// then destroyed, so one job makes CYCLES communicators one after another, as a framework that
// builds and drops groups does. Each communicator runs one allreduce, checked. After WARMUP cycles
// and after the last one the rank prints what it holds:
//   usage cycle=K rss_kb=R fds=F threads=T
// and at the end "done cycles=N" (or "failed cycle=K: reason" and exit 1). Growth between the
// two usage lines is what the cycles leak.
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "loom/loom.h"
#include "process_counts.hpp"

namespace {

using loom::soak::countEntries;

long residentKb() {
  FILE* f = std::fopen("/proc/self/statm", "r");
  long pages = 0, resident = 0;
  if (f == nullptr) return -1;
  if (std::fscanf(f, "%ld %ld", &pages, &resident) != 2) resident = -1;
  std::fclose(f);
  return resident * (sysconf(_SC_PAGESIZE) / 1024);
}

void printUsage(int cycle) {
  std::printf("usage cycle=%d rss_kb=%ld fds=%d threads=%d\n", cycle, residentKb(),
              countEntries("/proc/self/fd"), countEntries("/proc/self/task"));
  std::fflush(stdout);
}

[[noreturn]] void fail(int cycle, const char* what, loomResult_t r, loomComm_t comm) {
  std::printf("failed cycle=%d: %s: %s (%s)\n", cycle, what, loomGetErrorString(r),
              loomGetLastError(comm));
  std::fflush(stdout);
  std::exit(1);
}

// One allreduce of the rank numbers, checked.
void checkedAllReduce(loomComm_t comm, int cycle) {
  int rank = 0, size = 0;
  loomCommUserRank(comm, &rank);
  loomCommCount(comm, &size);
  std::vector<int32_t> data(257, rank + cycle);
  loomResult_t r =
      loomAllReduce(data.data(), data.data(), data.size(), loomInt32, loomSum, comm, nullptr);
  if (r != loomSuccess) fail(cycle, "allreduce", r, comm);
  const int32_t want = size * (size - 1) / 2 + size * cycle;
  for (int32_t v : data)
    if (v != want) {
      std::printf("failed cycle=%d: allreduce gave %d, not %d\n", cycle, v, want);
      std::exit(1);
    }
}

// The next communicator: a new unique id from rank 0, over the current one.
loomComm_t nextComm(loomComm_t comm, int cycle) {
  int rank = 0, size = 0;
  loomCommUserRank(comm, &rank);
  loomCommCount(comm, &size);
  loomUniqueId id{};
  loomResult_t r = rank == 0 ? loomGetUniqueId(&id) : loomSuccess;
  if (r != loomSuccess) fail(cycle, "loomGetUniqueId", r, comm);
  r = loomBroadcast(&id, &id, sizeof(id), loomUint8, 0, comm, nullptr);
  if (r != loomSuccess) fail(cycle, "broadcast of the next id", r, comm);
  loomComm_t next = nullptr;
  r = loomCommInitRank(&next, size, id, rank);
  if (r != loomSuccess) fail(cycle, "loomCommInitRank", r, next);
  r = loomCommDestroy(comm);
  if (r != loomSuccess) fail(cycle, "loomCommDestroy", r, nullptr);
  return next;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: init_cycles CYCLES WARMUP\n");
    return 2;
  }
  const int cycles = std::atoi(argv[1]), warmup = std::atoi(argv[2]);
  loomComm_t comm = nullptr;
  loomResult_t r = loomCommInitFromEnv(&comm, nullptr);
  if (r != loomSuccess) fail(0, "loomCommInitFromEnv", r, comm);
  for (int cycle = 1; cycle <= cycles; ++cycle) {
    comm = nextComm(comm, cycle);
    checkedAllReduce(comm, cycle);
    if (cycle == warmup || cycle == cycles) printUsage(cycle);
  }
  r = loomCommDestroy(comm);
  if (r != loomSuccess) fail(cycles, "loomCommDestroy", r, nullptr);
  std::printf("done cycles=%d\n", cycles);
  return 0;
}
