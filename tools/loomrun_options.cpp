#include "loomrun_options.hpp"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <optional>
#include <string_view>
#include <vector>

namespace loom::launcher {
namespace {

// Far above any sensible local job; mainly stops a typo from exhausting file descriptors.
constexpr long kMaxRanks = 4096;
// Keeps deadline arithmetic far away from overflow.
constexpr double kMaxSeconds = 1e8;

std::optional<int> parseCount(const std::string& text) {
  if (text.empty()) return std::nullopt;
  char* end = nullptr;
  errno = 0;
  long value = std::strtol(text.c_str(), &end, 10);
  if (errno != 0 || *end != '\0' || value < 1 || value > kMaxRanks) return std::nullopt;
  return static_cast<int>(value);
}

std::optional<double> parseSeconds(const std::string& text) {
  if (text.empty()) return std::nullopt;
  char* end = nullptr;
  errno = 0;
  double value = std::strtod(text.c_str(), &end);
  if (errno != 0 || *end != '\0' || !std::isfinite(value) || value < 0 || value > kMaxSeconds) {
    return std::nullopt;
  }
  return value;
}

std::optional<int> parseInt(const std::string& text, long low, long high) {
  if (text.empty()) return std::nullopt;
  char* end = nullptr;
  errno = 0;
  long value = std::strtol(text.c_str(), &end, 10);
  if (errno != 0 || *end != '\0' || value < low || value > high) return std::nullopt;
  return static_cast<int>(value);
}

// "0,2,5-7" -> {0, 2, 5, 6, 7}, ascending and without duplicates; nullopt on any mistake.
std::optional<std::vector<int>> parseRankList(const std::string& text) {
  std::vector<int> ranks;
  size_t start = 0;
  while (start <= text.size()) {
    size_t comma = text.find(',', start);
    std::string item = text.substr(start, comma == std::string::npos ? comma : comma - start);
    size_t dash = item.find('-');
    std::optional<int> first = parseInt(item.substr(0, dash), 0, kMaxRanks - 1);
    std::optional<int> last =
        dash == std::string::npos ? first : parseInt(item.substr(dash + 1), 0, kMaxRanks - 1);
    if (!first || !last || *last < *first) return std::nullopt;
    for (int r = *first; r <= *last; ++r) ranks.push_back(r);
    if (ranks.size() > static_cast<size_t>(kMaxRanks)) return std::nullopt;
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  std::sort(ranks.begin(), ranks.end());
  if (std::adjacent_find(ranks.begin(), ranks.end()) != ranks.end()) return std::nullopt;
  return ranks;
}

// "host:port" or "[v6]:port".
bool parseHostPort(const std::string& text, std::string& host, int& port) {
  size_t colon = text.rfind(':');
  if (colon == std::string::npos || colon == 0) return false;
  std::string name = text.substr(0, colon);
  if (name.size() > 2 && name.front() == '[' && name.back() == ']') {
    name = name.substr(1, name.size() - 2);
  }
  std::optional<int> value = parseInt(text.substr(colon + 1), 1, 65535);
  if (!value || name.empty()) return false;
  host = name;
  port = *value;
  return true;
}

// Cross-checks of the multi-node flags, once all of them are known. Empty when all is well.
std::string checkNodeOptions(LaunchOptions& opts, bool masterGiven) {
  if (!opts.multiNode()) {
    if (opts.nodeRank != 0) return "--node-rank needs --nnodes > 1";
    if (!opts.ranks.empty()) return "--ranks needs --nnodes > 1";
    if (opts.worldSizeOption != 0) return "--world-size needs --nnodes > 1";
    if (masterGiven) return "--master needs --nnodes > 1";
    return "";
  }
  if (opts.nodeRank >= opts.nnodes) {
    return "--node-rank " + std::to_string(opts.nodeRank) + " is not below --nnodes " +
           std::to_string(opts.nnodes);
  }
  if (opts.masterPort == 0) return "--nnodes > 1 needs --master HOST:PORT (node 0's address)";
  if (!opts.ranks.empty()) {
    if (opts.nprocPerNode != 0 && opts.nprocPerNode != static_cast<int>(opts.ranks.size())) {
      return "-n " + std::to_string(opts.nprocPerNode) + " does not match the " +
             std::to_string(opts.ranks.size()) + " ranks of --ranks";
    }
    opts.nprocPerNode = static_cast<int>(opts.ranks.size());
    if (opts.worldSizeOption != 0 && opts.ranks.back() >= opts.worldSizeOption) {
      return "--ranks names rank " + std::to_string(opts.ranks.back()) +
             ", which is not below --world-size " + std::to_string(opts.worldSizeOption);
    }
  } else if (opts.worldSizeOption != 0 && opts.nprocPerNode != 0 &&
             opts.worldSizeOption != opts.nnodes * opts.nprocPerNode) {
    return "--world-size differs from --nnodes x -n; use --ranks for uneven nodes";
  }
  return "";
}

ParseResult usageError(std::string message) {
  ParseResult result;
  result.outcome = ParseOutcome::kUsageError;
  result.error = std::move(message);
  return result;
}

}  // namespace

const char* shortUsage() {
  return "Usage: loomrun -n N [options] [--] prog [args...]\n"
         "       loomrun --nnodes K --node-rank I --master HOST:PORT (-n N | --ranks LIST)\n"
         "               [options] [--] prog [args...]\n";
}

std::string usageText() {
  return std::string(shortUsage()) +
         "\n"
         "Starts N local ranks of prog with torchrun-style environment variables (RANK,\n"
         "WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, GROUP_RANK, NODE_RANK, MASTER_ADDR,\n"
         "MASTER_PORT) and Loom's LOOM_COMM_ID and LOOM_JOB_SECRET.\n"
         "\n"
         "Options:\n"
         "  -n N, -np N, --np N    number of ranks (also -N N, --nproc-per-node N)\n"
         "  --timeout SEC          stop all ranks after SEC seconds and exit 124\n"
         "                         (default: $LOOMRUN_TIMEOUT, or no timeout)\n"
         "  --grace SEC            delay between SIGTERM and SIGKILL when stopping (default 3)\n"
         "  --no-prefix            do not prefix output lines with \"[RANK] \"; while they\n"
         "                         are prefixed, a rank whose stdout is loomrun's pipe (inode\n"
         "                         INO) finds loomrun's own stdout, for unprefixed data, in\n"
         "                         LOOMRUN_STDOUT_FD=FD:INO\n"
         "  -h, --help             show this help\n"
         "  --version              show loomrun's and Loom's version\n"
         "\n"
         "Several nodes (one loomrun per node, as with torchrun):\n"
         "  --nnodes K             number of nodes (loomruns) in the job\n"
         "  --node-rank I          this node's index, 0..K-1; node 0 hosts the rendezvous\n"
         "  --master HOST:PORT     where node 0's loomrun listens (also --master-addr HOST\n"
         "                         --master-port PORT); HOST must be an address of node 0\n"
         "  --ranks LIST           this node's global ranks, e.g. 0,2 or 0-2 (default with -n:\n"
         "                         I*N .. I*N+N-1); nodes may differ in size and interleave\n"
         "  --world-size W         expected world size (checked; default: as the nodes report)\n"
         "  --join-timeout SEC     how long the loomruns wait for each other (default 60)\n"
         "Every node needs the same LOOM_JOB_SECRET (32 hex digits) in its environment; it\n"
         "authenticates the loomruns to each other and the ranks to each other. Global rank 0\n"
         "must run on node 0, where Loom's rendezvous (LOOM_COMM_ID) listens.\n"
         "\n"
         "If a rank fails, the others are stopped and loomrun exits with that rank's status\n"
         "(128+signal if it was killed by a signal). With several nodes, every node's loomrun\n"
         "stops its ranks and exits with the failing rank's status; a loomrun that loses\n"
         "contact with another (no heartbeat for 15 s, or its connection closed) exits 1.\n";
}

ParseResult parseCommandLine(int argc, const char* const* argv, const char* envTimeout) {
  ParseResult result;
  LaunchOptions& opts = result.options;

  if (envTimeout != nullptr && *envTimeout != '\0') {
    std::optional<double> seconds = parseSeconds(envTimeout);
    if (!seconds) {
      return usageError("invalid LOOMRUN_TIMEOUT '" + std::string(envTimeout) +
                        "' (expected seconds >= 0)");
    }
    opts.timeoutSec = *seconds;
  }

  bool masterGiven = false;
  int i = 1;
  for (; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg == "--") {
      ++i;
      break;
    }
    if (arg.size() < 2 || arg[0] != '-') break;  // first word of the program

    // Split "--name=value", "-n4" and "-nvalue" forms into a name and an inline value.
    std::string name = arg;
    std::optional<std::string> inlineValue;
    if (arg.rfind("--", 0) == 0) {
      size_t eq = arg.find('=');
      if (eq != std::string::npos) {
        name = arg.substr(0, eq);
        inlineValue = arg.substr(eq + 1);
      }
    } else if (arg == "-np") {
      name = arg;  // Open MPI's spelling, not -n with the value "p"
    } else if (arg.size() > 2) {
      name = arg.substr(0, 2);
      inlineValue = arg.substr(2);
    }

    auto takeValue = [&]() -> std::optional<std::string> {
      if (inlineValue) return inlineValue;
      if (i + 1 >= argc) return std::nullopt;
      return std::string(argv[++i]);
    };
    auto needsNoValue = [&]() { return !inlineValue.has_value(); };

    if (name == "-h" || name == "--help") {
      if (!needsNoValue()) return usageError("option " + name + " takes no value");
      result.outcome = ParseOutcome::kHelp;
      return result;
    } else if (name == "--version") {
      if (!needsNoValue()) return usageError("option " + name + " takes no value");
      result.outcome = ParseOutcome::kVersion;
      return result;
    } else if (name == "-n" || name == "-N" || name == "--np" || name == "-np" ||
               name == "--nproc-per-node" || name == "--nproc_per_node") {
      std::optional<std::string> value = takeValue();
      if (!value) return usageError("option " + name + " needs a value");
      std::optional<int> count = parseCount(*value);
      if (!count) {
        return usageError("invalid rank count '" + *value + "' (expected 1.." +
                          std::to_string(kMaxRanks) + ")");
      }
      opts.nprocPerNode = *count;
    } else if (name == "--timeout" || name == "--grace") {
      std::optional<std::string> value = takeValue();
      if (!value) return usageError("option " + name + " needs a value");
      std::optional<double> seconds = parseSeconds(*value);
      if (!seconds) {
        return usageError("invalid " + name + " value '" + *value + "' (expected seconds >= 0)");
      }
      (name == "--timeout" ? opts.timeoutSec : opts.graceSec) = *seconds;
    } else if (name == "--no-prefix") {
      if (!needsNoValue()) return usageError("option " + name + " takes no value");
      opts.prefix = false;
    } else if (name == "--nnodes" || name == "--node-rank" || name == "--node_rank" ||
               name == "--world-size" || name == "--world_size" || name == "--master-port" ||
               name == "--master_port") {
      std::optional<std::string> value = takeValue();
      if (!value) return usageError("option " + name + " needs a value");
      bool isNodeRank = name == "--node-rank" || name == "--node_rank";
      bool isPort = name == "--master-port" || name == "--master_port";
      std::optional<int> number = parseInt(*value, isNodeRank ? 0 : 1, isPort ? 65535 : kMaxRanks);
      if (!number) return usageError("invalid " + name + " value '" + *value + "'");
      if (name == "--nnodes") {
        opts.nnodes = *number;
      } else if (isNodeRank) {
        opts.nodeRank = *number;
      } else if (isPort) {
        opts.masterPort = *number;
        masterGiven = true;
      } else {
        opts.worldSizeOption = *number;
      }
    } else if (name == "--master" || name == "--master-addr" || name == "--master_addr") {
      std::optional<std::string> value = takeValue();
      if (!value) return usageError("option " + name + " needs a value");
      masterGiven = true;
      if (name != "--master") {
        opts.masterAddr = *value;
      } else if (!parseHostPort(*value, opts.masterAddr, opts.masterPort)) {
        return usageError("invalid --master '" + *value + "' (expected HOST:PORT)");
      }
    } else if (name == "--ranks") {
      std::optional<std::string> value = takeValue();
      if (!value) return usageError("option " + name + " needs a value");
      std::optional<std::vector<int>> list = parseRankList(*value);
      if (!list || list->empty()) {
        return usageError("invalid --ranks '" + *value +
                          "' (expected distinct ranks such as 0,2 or 0-3)");
      }
      opts.ranks = *list;
    } else if (name == "--join-timeout") {
      std::optional<std::string> value = takeValue();
      if (!value) return usageError("option " + name + " needs a value");
      std::optional<double> seconds = parseSeconds(*value);
      if (!seconds || *seconds <= 0) {
        return usageError("invalid " + name + " value '" + *value + "' (expected seconds > 0)");
      }
      opts.joinTimeoutSec = *seconds;
    } else {
      return usageError("unknown option '" + arg + "'");
    }
  }

  std::string nodeError = checkNodeOptions(opts, masterGiven);
  if (!nodeError.empty()) return usageError(nodeError);
  if (opts.nprocPerNode < 1) return usageError("missing -n N (number of ranks)");
  if (i >= argc) return usageError("missing program to run");
  for (; i < argc; ++i) opts.command.emplace_back(argv[i]);
  result.outcome = ParseOutcome::kRun;
  return result;
}

}  // namespace loom::launcher
