// Command line of loomrun: `loomrun -n N [options] [--] prog [args...]`.
#pragma once

#include <string>
#include <vector>

namespace loom::launcher {

// Everything the launcher needs to know about one job. With --nnodes K > 1 there is one
// loomrun per node (torchrun's model); node 0's loomrun hosts the launchers' own rendezvous at
// masterAddr:masterPort and tells the others the job's ports and world size.
struct LaunchOptions {
  int nprocPerNode = 0;  // -n: ranks started by this loomrun
  int nnodes = 1;
  int nodeRank = 0;
  std::string masterAddr = "127.0.0.1";
  int masterPort = 0;          // multi-node only: where node 0's loomrun listens
  std::vector<int> ranks;      // --ranks: this node's global ranks, ascending; empty: contiguous
  int worldSizeOption = 0;     // --world-size; 0: nnodes * nprocPerNode, or as the nodes report
  double timeoutSec = 0;       // 0: no timeout
  double graceSec = 3;         // SIGTERM -> SIGKILL delay when stopping ranks
  double joinTimeoutSec = 60;  // multi-node: how long the loomruns wait for each other
  bool prefix = true;          // "[R] " in front of every output line
  std::vector<std::string> command;

  bool multiNode() const { return nnodes > 1; }
  int worldSize() const {
    if (worldSizeOption > 0) return worldSizeOption;
    return nnodes * nprocPerNode;
  }
  int globalRank(int localRank) const {
    if (!ranks.empty()) return ranks[static_cast<size_t>(localRank)];
    return nodeRank * nprocPerNode + localRank;
  }
};

enum class ParseOutcome { kRun, kHelp, kVersion, kUsageError };

struct ParseResult {
  ParseOutcome outcome = ParseOutcome::kUsageError;
  std::string error;  // set for kUsageError, without the "loomrun: " prefix
  LaunchOptions options;
};

// envTimeout is the value of LOOMRUN_TIMEOUT (nullptr when unset); --timeout overrides it.
ParseResult parseCommandLine(int argc, const char* const* argv, const char* envTimeout);

// The one-line synopsis, and the full help text that starts with it.
const char* shortUsage();
std::string usageText();

}  // namespace loom::launcher
