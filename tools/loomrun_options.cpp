#include "loomrun_options.hpp"

#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <optional>
#include <string_view>

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

bool isMultiNodeFlag(std::string_view name) {
  return name == "--nnodes" || name == "--node-rank" || name == "--node_rank" ||
         name == "--master" || name == "--master-addr" || name == "--master_addr" ||
         name == "--master-port" || name == "--master_port";
}

ParseResult usageError(std::string message) {
  ParseResult result;
  result.outcome = ParseOutcome::kUsageError;
  result.error = std::move(message);
  return result;
}

}  // namespace

const char* shortUsage() { return "Usage: loomrun -n N [options] [--] prog [args...]\n"; }

std::string usageText() {
  return std::string(shortUsage()) +
         "\n"
         "Starts N local ranks of prog with torchrun-style environment variables (RANK,\n"
         "WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, GROUP_RANK, NODE_RANK, MASTER_ADDR,\n"
         "MASTER_PORT) and Loom's LOOM_COMM_ID and LOOM_JOB_SECRET.\n"
         "\n"
         "Options:\n"
         "  -n N, -N N, --np N     number of ranks (also --nproc-per-node N)\n"
         "  --timeout SEC          stop all ranks after SEC seconds and exit 124\n"
         "                         (default: $LOOMRUN_TIMEOUT, or no timeout)\n"
         "  --grace SEC            delay between SIGTERM and SIGKILL when stopping (default 3)\n"
         "  --no-prefix            do not prefix output lines with \"[RANK] \"\n"
         "  -h, --help             show this help\n"
         "\n"
         "If a rank fails, the others are stopped and loomrun exits with that rank's status\n"
         "(128+signal if it was killed by a signal).\n";
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
    } else if (name == "-n" || name == "-N" || name == "--np" || name == "--nproc-per-node" ||
               name == "--nproc_per_node") {
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
    } else if (isMultiNodeFlag(name)) {
      return usageError("option " + name +
                        " is not supported yet (loomrun only launches on the local node)");
    } else {
      return usageError("unknown option '" + arg + "'");
    }
  }

  if (opts.nprocPerNode < 1) return usageError("missing -n N (number of ranks)");
  if (i >= argc) return usageError("missing program to run");
  for (; i < argc; ++i) opts.command.emplace_back(argv[i]);
  result.outcome = ParseOutcome::kRun;
  return result;
}

}  // namespace loom::launcher
