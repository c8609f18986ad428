// Per-job setup of loomrun: rendezvous ports, the job secret and each rank's environment.
#pragma once

#include <string>
#include <vector>

#include "loomrun_options.hpp"

namespace loom::launcher {

// Values shared by all ranks of one job.
struct JobInfo {
  int masterPort = 0;
  std::string commId;  // LOOM_COMM_ID, "host:port"
  std::string secret;  // LOOM_JOB_SECRET
};

// Picks the ports and the secret. Returns false with `error` set when that is impossible.
bool prepareJob(const LaunchOptions& options, JobInfo& job, std::string& error);

// loomrun's own environment minus the variables it defines, plus those for `localRank`, as
// "NAME=value" strings.
std::vector<std::string> rankEnvironment(const LaunchOptions& options, const JobInfo& job,
                                         int localRank);

}  // namespace loom::launcher
