#include "bench_setup.hpp"

#include <cstdio>

#include "bench_memory.hpp"

namespace loom::bench {

// The communicator of every rank: from the launcher's variables, or a job of one rank.
loomComm_t initWorld(const loomConfig_t* config, bool launched, const char* argv0) {
  loomComm_t comm = nullptr;
  loomConfig_t copy = LOOM_CONFIG_INITIALIZER;
  if (config != nullptr) copy = *config;
  loomConfig_t* arg = config != nullptr ? &copy : nullptr;
  if (launched) {
    checkCall(loomCommInitFromEnv(&comm, arg), "loomCommInitFromEnv", comm);
    return comm;
  }
  // No launcher: a job of one rank (as nccl-tests runs without mpirun).
  std::fprintf(stderr,
               "loom-bench: no launcher variables (RANK, OMPI_COMM_WORLD_RANK, SLURM_PROCID): "
               "running as a single rank; loomrun -n N %s ... runs N\n",
               argv0);
  loomUniqueId id;
  checkCall(loomGetUniqueId(&id), "loomGetUniqueId", nullptr);
  checkCall(loomCommInitRankConfig(&comm, 1, id, 0, arg), "loomCommInitRankConfig", comm);
  return comm;
}

bool rootFits(const BenchOptions& opts, int rank, int nranks) {
  if (opts.root < nranks) return true;
  if (rank == 0) std::fprintf(stderr, "loom-bench: root %d >= nranks %d\n", opts.root, nranks);
  return false;
}

int refusedStatus(int rank) { return rank == 0 ? 2 : 0; }

// Opens the table and the --csv file; every rank learns whether rank 0 could write the file
// before any rank starts measuring.
bool openReport(const BenchOptions& opts, Reporter& reporter, Backend& backend, int rank) {
  if (opts.csvPath.empty()) {
    if (rank == 0) reporter.open();
    return true;
  }
  const bool opened = rank != 0 || reporter.open();
  return backend.sumOverRanks(opened ? 0 : 1) == 0;
}

// The run's exit status once the report's files (and --plot's picture) are written.
int finishReport(const BenchOptions& opts, const Reporter& reporter, int rank, int status) {
  if (rank != 0) return status;
  if (!reporter.written()) return status == 0 ? 1 : status;
  if (!opts.plotPath.empty() && !drawPlot(opts.jsonPath, opts.plotPath))
    return status == 0 ? 1 : status;
  return status;
}

// What --device KIND or --placement names that this build or host lacks; "" when all is there.
std::string missingDevices(const BenchOptions& opts) {
  std::vector<std::string> specs = opts.placement;
  if (specs.empty()) specs.push_back(opts.deviceSpec);
  for (const std::string& spec : specs) {
    const std::string kind = spec.substr(0, spec.find(':'));
    if (kind == "cpu") continue;
    if (kind == "cuda") {
#if !LOOM_HAVE_CUDA
      return "--placement names CUDA ranks, but this loom-bench was built without CUDA";
#endif
      continue;
    }
    std::string why;
    if (tool::findDevicePlugin(kind, &why).empty()) return why;
  }
  return "";
}

}  // namespace loom::bench
