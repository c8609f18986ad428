// The steps every loom-bench run shares, whatever its devices: the communicator of every rank,
// the report's files and the exit status, what a --device or --placement names that is missing.
#pragma once

#include <string>

#include "bench_backend.hpp"
#include "bench_options.hpp"
#include "bench_report.hpp"
#include "loom/loom.h"

namespace loom::bench {

// The communicator of every rank: from the launcher's variables, or a job of one rank.
loomComm_t initWorld(const loomConfig_t* config, bool launched, const char* argv0);
// Whether -r names a rank of the job (rank 0 says why not).
bool rootFits(const BenchOptions& opts, int rank, int nranks);
// The exit status of a run refused once every rank knows why (a -r or --placement that does not
// fit the job): 2 on rank 0, which said why; 0 on the others, since a launcher that saw them fail
// first could stop rank 0 before it said why.
int refusedStatus(int rank);
// Opens the table and the --csv file; every rank learns whether rank 0 could write the file
// before any rank starts measuring.
bool openReport(const BenchOptions& opts, Reporter& reporter, Backend& backend, int rank);
// The run's exit status once the report's files (and --plot's picture) are written.
int finishReport(const BenchOptions& opts, const Reporter& reporter, int rank, int status);
// What --device KIND or --placement names that this build or host lacks; "" when all is there.
std::string missingDevices(const BenchOptions& opts);

}  // namespace loom::bench
