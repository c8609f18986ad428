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

// Picks the ports and the secret of a single-node job. Returns false with `error` set when that
// is impossible.
bool prepareJob(const LaunchOptions& options, JobInfo& job, std::string& error);

// Multi-node jobs: the secret must come from the environment (every node needs the same one, and
// it authenticates the loomruns to each other), as 32 hex digits since the ranks' bootstrap
// requires that form.
bool sharedSecret(std::string& secret, std::string& error);

// Picks `count` distinct free TCP ports on the local address `host` (node 0 of a multi-node job
// picks the ports its ranks will listen on) and sets job.masterPort and job.commId from them.
bool pickJobPorts(const std::string& host, JobInfo& job, std::string& error);

// loomrun's own environment minus the variables it defines, plus those for `localRank`, as
// "NAME=value" strings.
std::vector<std::string> rankEnvironment(const LaunchOptions& options, const JobInfo& job,
                                         int localRank);

}  // namespace loom::launcher
