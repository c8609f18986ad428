// loom-info: what Loom would do here. `loom-info --algos` prints, for the communicator it joins
// (under loomrun/torchrun/mpirun, or alone as a single rank), which algorithm the selector picks
// for every collective at sizes from 8 B to 256 MiB, after LOOM_ALGO and the LOOM_* settings.
// `--plans` lists the execution plans the communicator loaded (LOOM_PLAN_DIR); `--check-plan
// FILE` checks a plan file without a communicator (exit status 1 and the reason if it is wrong).
// Without joining anything: `--flight DIR` reads every rank's flight record in DIR and says what
// happened (flight_report.hpp); `--status` asks this user's running Loom processes for their
// calls in flight (status_client.hpp); `--dump DIR` has them all write their flight records.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

#include "comm/status_socket.hpp"
#include "flight_report.hpp"
#include "loom/loom.h"
#include "status_client.hpp"

namespace {

void die(const char* call, loomResult_t r) {
  std::fprintf(stderr, "loom-info: %s failed: %s: %s\n", call, loomGetErrorString(r),
               loomGetLastError(nullptr));
  std::exit(1);
}

loomComm_t joinOrAlone() {
  loomComm_t comm = nullptr;
  if (std::getenv("LOOM_RANK") || std::getenv("RANK") || std::getenv("OMPI_COMM_WORLD_RANK") ||
      std::getenv("SLURM_PROCID")) {
    loomResult_t r = loomCommInitFromEnv(&comm, nullptr);
    if (r != loomSuccess) die("loomCommInitFromEnv", r);
    return comm;
  }
  loomUniqueId id;
  loomResult_t r = loomGetUniqueId(&id);
  if (r != loomSuccess) die("loomGetUniqueId", r);
  r = loomCommInitRank(&comm, 1, id, 0);
  if (r != loomSuccess) die("loomCommInitRank", r);
  return comm;
}

const char* kFuncNames[loomNumFuncs] = {"allreduce",     "broadcast", "reduce",    "allgather",
                                        "reducescatter", "alltoall",  "alltoallv", "gather",
                                        "scatter",       "sendrecv",  "barrier"};

int checkPlan(const char* path) {
  size_t needed = 0;
  loomResult_t r = loomPlanCheck(path, nullptr, 0, &needed);
  if (r != loomSuccess) {
    std::fprintf(stderr, "loom-info: %s\n", loomGetLastError(nullptr));
    return 1;
  }
  std::string text(needed, '\0');
  loomPlanCheck(path, text.data(), text.size(), nullptr);
  text.resize(needed - 1);
  std::printf("%s: ok\n  %s\n", path, text.c_str());
  return 0;
}

}  // namespace

// --flight, --status and --dump: they read files and sockets; no communicator is made.
int inspect(int argc, char** argv) {
  std::string flightDir, dumpDir, statusDir = loom::statusDirectory(std::getenv("LOOM_STATUS_DIR"));
  bool status = false, verbose = false;
  std::vector<int> pids;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    const bool more = i + 1 < argc;
    if (arg == "--flight" && more) {
      flightDir = argv[++i];
    } else if (arg == "--status") {
      status = true;
    } else if (arg == "--dump" && more) {
      dumpDir = argv[++i];
    } else if (arg == "--status-dir" && more) {
      statusDir = argv[++i];
    } else if (arg == "--pid" && more) {
      pids.push_back(std::atoi(argv[++i]));
    } else if (arg == "-v" || arg == "--verbose") {
      verbose = true;
    } else {
      std::fprintf(stderr, "loom-info: unexpected argument '%s' (see loom-info --help)\n",
                   arg.c_str());
      return 2;
    }
  }
  try {
    if (!flightDir.empty())
      std::fputs(loom::tool::flightReport(flightDir, verbose).c_str(), stdout);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "loom-info: %s\n", e.what());
    return 1;
  }
  if (!dumpDir.empty()) {
    int written = 0;
    for (const auto& a : loom::tool::queryStatus(statusDir, pids, "dump " + dumpDir, 3000)) {
      for (const std::string& line : a.lines)
        if (line.rfind("dumped ", 0) == 0) written += std::atoi(line.c_str() + 7);
      if (!a.answered) std::printf("process %d did not answer: %s\n", a.pid, a.why.c_str());
    }
    std::printf("%d flight record(s) written to %s\n", written, dumpDir.c_str());
  }
  if (status)
    std::fputs(
        loom::tool::statusReport(loom::tool::queryStatus(statusDir, pids, "status", 2000)).c_str(),
        stdout);
  return 0;
}

int main(int argc, char** argv) {
  for (int i = 1; i < argc; ++i)
    if (std::strcmp(argv[i], "--flight") == 0 || std::strcmp(argv[i], "--status") == 0 ||
        std::strcmp(argv[i], "--dump") == 0)
      return inspect(argc, argv);
  bool algos = argc == 1, topology = argc == 1, plans = false;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--check-plan") == 0) {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "loom-info: --check-plan needs a plan file\n");
        return 2;
      }
      int status = 0;
      for (int f = i + 1; f < argc; ++f) status |= checkPlan(argv[f]);
      return status;
    } else if (std::strcmp(argv[i], "--plans") == 0) {
      plans = true;
    } else if (std::strcmp(argv[i], "--algos") == 0) {
      algos = true;
    } else if (std::strcmp(argv[i], "--topology") == 0) {
      topology = true;
    } else if (std::strcmp(argv[i], "--version") == 0) {
      std::printf("loom-info (Loom) %d.%d.%d\n", LOOM_MAJOR, LOOM_MINOR, LOOM_PATCH);
      return 0;
    } else {
      const bool help = std::strcmp(argv[i], "--help") == 0 || std::strcmp(argv[i], "-h") == 0;
      std::fprintf(
          help ? stdout : stderr,
          "usage: loom-info [--algos] [--topology] [--plans]\n"
          "       loom-info --check-plan FILE...\n"
          "       loom-info --flight DIR [-v]\n"
          "       loom-info --status [--pid PID]... [--status-dir DIR]\n"
          "       loom-info --dump DIR [--pid PID]...\n"
          "  --algos: the algorithm per collective and size (run under loomrun -n N for N ranks);\n"
          "  --topology: nodes, leaders, and each rank's transport to every peer;\n"
          "  --plans: the execution plans loaded (LOOM_PLAN_DIR); --check-plan: check plan files,\n"
          "    no communicator;\n"
          "  --flight DIR: what the flight records of every rank in DIR say happened (-v: each\n"
          "    rank's last calls); --status: the calls in flight of this user's running Loom\n"
          "    processes on this host, by communicator; --dump DIR: they all write their flight\n"
          "    records into DIR; --version\n");
      return help ? 0 : 2;
    }
  }
  int version = 0;
  loomGetVersion(&version);
  loomComm_t comm = joinOrAlone();
  int rank = 0, nranks = 1;
  loomCommUserRank(comm, &rank);
  loomCommCount(comm, &nranks);
  if (topology) {
    size_t needed = 0;
    loomResult_t r = loomCommDescribeTopology(comm, nullptr, 0, &needed);
    if (r != loomSuccess) die("loomCommDescribeTopology", r);
    std::string text(needed, '\0');
    loomCommDescribeTopology(comm, text.data(), text.size(), nullptr);
    text.resize(needed - 1);
    // Every rank prints its own transports; the node list is the same everywhere.
    if (rank != 0) text = text.substr(text.rfind('\n') + 1);
    std::printf("%s\n", text.c_str());
    std::fflush(stdout);
  }
  if (rank == 0 && plans) {
    size_t needed = 0;
    loomResult_t r = loomCommDescribePlans(comm, nullptr, 0, &needed);
    if (r != loomSuccess) die("loomCommDescribePlans", r);
    std::string text(needed, '\0');
    loomCommDescribePlans(comm, text.data(), text.size(), nullptr);
    text.resize(needed - 1);
    std::printf("execution plans for %d rank(s)%s\n%s", nranks,
                text.empty() ? ": none (LOOM_PLAN_DIR names none for this rank count)" : ":",
                text.c_str());
  }
  if (rank == 0 && algos) {
    std::printf("Loom %d.%d.%d, %d rank(s); algorithm by collective and message size (bytes)\n",
                version / 10000, version / 100 % 100, version % 100, nranks);
    std::printf("%-14s", "collective");
    for (size_t bytes = 8; bytes <= (256u << 20); bytes *= 8) std::printf(" %10zu", bytes);
    std::printf("\n");
    for (int f = 0; f < loomNumFuncs; ++f) {
      std::printf("%-14s", kFuncNames[f]);
      for (size_t bytes = 8; bytes <= (256u << 20); bytes *= 8) {
        const char* name = nullptr;
        loomResult_t r =
            loomCommGetAlgorithm(comm, static_cast<loomFunc_t>(f), bytes / 4, loomFloat32, &name);
        std::printf(" %10s", r == loomSuccess ? name : "-");
      }
      std::printf("\n");
    }
  }
  loomCommDestroy(comm);
  return 0;
}
