// Command line of loomrun: `loomrun -n N [options] [--] prog [args...]`.
#pragma once

#include <string>
#include <vector>

namespace loom::launcher {

// Everything the launcher needs to know about one job. The multi-node fields are already here
// (fixed to a single node) so that adding torchrun's --nnodes/--node-rank/--master later only
// touches the parser, not the code that computes ranks and environments.
struct LaunchOptions {
  int nprocPerNode = 0;  // -n: ranks started by this loomrun
  int nnodes = 1;
  int nodeRank = 0;
  std::string masterAddr = "127.0.0.1";
  double timeoutSec = 0;  // 0: no timeout
  double graceSec = 3;    // SIGTERM -> SIGKILL delay when stopping ranks
  bool prefix = true;     // "[R] " in front of every output line
  std::vector<std::string> command;

  int worldSize() const { return nnodes * nprocPerNode; }
  int globalRank(int localRank) const { return nodeRank * nprocPerNode + localRank; }
};

enum class ParseOutcome { kRun, kHelp, kUsageError };

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
