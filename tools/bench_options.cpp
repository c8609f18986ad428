#include "bench_options.hpp"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <string_view>

#include "base/dtype.hpp"

namespace loom::bench {
namespace {

struct OpInfo {
  BenchOp op;
  const char* name;
  loomFunc_t func;
};

constexpr OpInfo kOps[] = {
    {BenchOp::kAllReduce, "allreduce", loomFuncAllReduce},
    {BenchOp::kAllGather, "allgather", loomFuncAllGather},
    {BenchOp::kReduceScatter, "reducescatter", loomFuncReduceScatter},
    {BenchOp::kBroadcast, "broadcast", loomFuncBroadcast},
    {BenchOp::kReduce, "reduce", loomFuncReduce},
    {BenchOp::kAllToAll, "alltoall", loomFuncAllToAll},
    {BenchOp::kGather, "gather", loomFuncGather},
    {BenchOp::kScatter, "scatter", loomFuncScatter},
    {BenchOp::kSendRecv, "sendrecv", loomFuncSendRecv},
};

// nccl-tests' names, in the order `-d all` visits them. Spelled out here rather than taken from
// the library so the command line stays the published convention whatever aliases Loom adds.
struct TypeInfo {
  const char* name;
  loomDataType_t type;
};

constexpr TypeInfo kTypes[] = {
    {"int8", loomInt8},
    {"uint8", loomUint8},
    {"int32", loomInt32},
    {"uint32", loomUint32},
    {"int64", loomInt64},
    {"uint64", loomUint64},
    {"half", loomFloat16},
    {"float", loomFloat32},
    {"double", loomFloat64},
    {"bfloat16", loomBfloat16},
    {"fp8e4m3", loomFloat8e4m3},
    {"fp8e5m2", loomFloat8e5m2},
    {"fp8e4m3b15", loomFloat8e4m3b15},
};

struct RedOpInfo {
  const char* name;
  loomRedOp_t op;
};

constexpr RedOpInfo kRedOps[] = {
    {"sum", loomSum}, {"prod", loomProd}, {"max", loomMax}, {"min", loomMin}, {"avg", loomAvg},
};

const OpInfo& info(BenchOp op) {
  for (const OpInfo& i : kOps) {
    if (i.op == op) return i;
  }
  return kOps[0];
}

std::optional<long> parseInt(const std::string& text, long lo, long hi) {
  if (text.empty()) return std::nullopt;
  char* end = nullptr;
  errno = 0;
  long value = std::strtol(text.c_str(), &end, 10);
  if (errno != 0 || *end != '\0' || value < lo || value > hi) return std::nullopt;
  return value;
}

ParseResult usageError(std::string message) {
  ParseResult result;
  result.outcome = ParseOutcome::kUsageError;
  result.error = std::move(message);
  return result;
}

// A device plug-in's "kind" or "kind:N": the kind in the plug-in ABI's alphabet, [a-z0-9_-]+.
bool isPluginSpec(const std::string& spec) {
  const size_t colon = spec.find(':');
  const std::string kind = spec.substr(0, colon);
  if (kind.empty() || kind == "cpu" || kind == "cuda" || kind == "auto") return false;
  for (char c : kind)
    if (!(std::islower(static_cast<unsigned char>(c)) ||
          std::isdigit(static_cast<unsigned char>(c)) || c == '_' || c == '-'))
      return false;
  return colon == std::string::npos || parseInt(spec.substr(colon + 1), 0, 1 << 20).has_value();
}

// One rank's device in a --placement list: cpu, cuda, cuda:N or a plug-in's spec.
bool isDeviceSpec(const std::string& spec) {
  if (spec == "cpu" || spec == "cuda") return true;
  if (spec.rfind("cuda:", 0) == 0) return parseInt(spec.substr(5), 0, 1 << 20).has_value();
  return isPluginSpec(spec);
}

}  // namespace

bool parsePlacement(const std::string& text, std::vector<std::string>* devices) {
  devices->clear();
  if (!text.empty() && text.find_first_not_of("GCE") == std::string::npos) {
    for (char letter : text)
      devices->push_back(letter == 'G' ? "cuda" : letter == 'C' ? "cpu" : "loom-emu");
    return true;
  }
  for (size_t start = 0; start <= text.size();) {
    const size_t end = std::min(text.find(',', start), text.size());
    devices->push_back(text.substr(start, end - start));
    start = end + 1;
    if (!isDeviceSpec(devices->back())) return false;
  }
  return !devices->empty();
}

const char* benchOpName(BenchOp op) { return info(op).name; }
loomFunc_t benchOpFunc(BenchOp op) { return info(op).func; }

bool benchOpReduces(BenchOp op) {
  return op == BenchOp::kAllReduce || op == BenchOp::kReduceScatter || op == BenchOp::kReduce;
}

bool benchOpHasRoot(BenchOp op) {
  return op == BenchOp::kBroadcast || op == BenchOp::kReduce || op == BenchOp::kGather ||
         op == BenchOp::kScatter;
}

bool benchOpHasInPlace(BenchOp op) {
  return op == BenchOp::kAllReduce || op == BenchOp::kAllGather || op == BenchOp::kReduceScatter ||
         op == BenchOp::kBroadcast || op == BenchOp::kReduce;
}

double busFactor(BenchOp op, int nranks) {
  const double n = nranks;
  switch (op) {
    case BenchOp::kAllReduce:
      return 2.0 * (n - 1) / n;
    case BenchOp::kAllGather:
    case BenchOp::kReduceScatter:
    case BenchOp::kAllToAll:
    case BenchOp::kGather:
    case BenchOp::kScatter:
      return (n - 1) / n;
    default:
      return 1.0;
  }
}

bool parseSize(const std::string& text, size_t* bytes) {
  if (text.empty()) return false;
  char* end = nullptr;
  errno = 0;
  double value = std::strtod(text.c_str(), &end);
  if (errno != 0 || end == text.c_str() || !std::isfinite(value) || value < 0) return false;
  std::string_view suffix(end);
  double scale = 1;
  if (suffix == "K" || suffix == "k") {
    scale = 1 << 10;
  } else if (suffix == "M" || suffix == "m") {
    scale = 1 << 20;
  } else if (suffix == "G" || suffix == "g") {
    scale = 1 << 30;
  } else if (!suffix.empty()) {
    return false;
  }
  value *= scale;
  // Far beyond any buffer this tool could allocate; keeps the conversion defined.
  if (value > 1e18) return false;
  *bytes = static_cast<size_t>(value);
  return true;
}

std::vector<size_t> sizeSteps(const BenchOptions& options) {
  std::vector<size_t> steps;
  // Stepping a double keeps fractional factors (-f 1.5) from stalling on small sizes.
  for (double s = static_cast<double>(options.minBytes);
       s <= static_cast<double>(options.maxBytes) * (1 + 1e-12); s *= options.stepFactor) {
    size_t bytes = static_cast<size_t>(s);
    if (steps.empty() || steps.back() != bytes) steps.push_back(bytes);
    if (s == 0) break;
  }
  // -e is inclusive (the size asked for is measured) even where the factor steps over it.
  if (!steps.empty() && steps.back() < options.maxBytes) steps.push_back(options.maxBytes);
  return steps;
}

CallShape callShape(BenchOp op, size_t bytes, size_t elemSize, int nranks) {
  const size_t elems = bytes / elemSize;
  const size_t n = static_cast<size_t>(nranks);
  CallShape s;
  switch (op) {
    case BenchOp::kAllReduce:
    case BenchOp::kBroadcast:
    case BenchOp::kReduce:
    case BenchOp::kSendRecv:
      s.count = s.sendElems = s.recvElems = s.totalElems = elems;
      break;
    case BenchOp::kAllGather:
    case BenchOp::kGather:
      s.count = s.sendElems = elems / n;
      s.recvElems = s.totalElems = s.count * n;
      break;
    case BenchOp::kReduceScatter:
    case BenchOp::kScatter:
      s.count = s.recvElems = elems / n;
      s.sendElems = s.totalElems = s.count * n;
      break;
    case BenchOp::kAllToAll:
      s.count = elems / n;
      s.sendElems = s.recvElems = s.totalElems = s.count * n;
      break;
  }
  if (s.count == 0) s = CallShape{};
  return s;
}

std::string humanBytes(double bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int unit = 0;
  while (bytes >= 1024 && unit < 4) {
    bytes /= 1024;
    ++unit;
  }
  char text[32];
  std::snprintf(text, sizeof(text), unit == 0 || bytes == std::floor(bytes) ? "%.0f %s" : "%.1f %s",
                bytes, units[unit]);
  return text;
}

std::string memoryShortfall(const BenchOptions& options, size_t availableBytes, int localRanks,
                            const char* where) {
  // A send and a receive buffer of -e bytes each per rank (bench_host.cpp, bench_gpu.cpp).
  const double perRank = 2.0 * static_cast<double>(options.maxBytes);
  const double needed = perRank * localRanks;
  if (needed <= static_cast<double>(availableBytes)) return "";
  std::string text = "-e " + humanBytes(static_cast<double>(options.maxBytes)) + " needs " +
                     humanBytes(perRank) + " of " + where +
                     " per rank (a send and a receive buffer)";
  if (localRanks > 1) {
    text += ", " + humanBytes(needed) + " for the " + std::to_string(localRanks) +
            " ranks on this host";
  }
  return text + ", but only " + humanBytes(static_cast<double>(availableBytes)) +
         " is available: lower -e or run fewer ranks per host";
}

std::string usageText() {
  return "Usage: loom-bench OP [options]\n"
         "\n"
         "OP: allreduce allgather reducescatter broadcast reduce alltoall gather scatter\n"
         "    sendrecv\n"
         "Run one process per rank under a launcher (loomrun, torchrun, mpirun, srun), or alone\n"
         "as a single rank; rank 0 prints.\n"
         "\n"
         "Options (as nccl-tests):\n"
         "  -b BYTES    smallest size (default 8; K/M/G suffixes)\n"
         "  -e BYTES    largest size, measured even where -f steps over it (default 256M)\n"
         "  -f FACTOR   size multiplier between steps (default 2)\n"
         "  -n ITERS    timed iterations per size (default 20)\n"
         "  -w ITERS    warm-up iterations per size (default 5)\n"
         "  -m N        calls per timed step, issued in one group (default 1)\n"
         "  -a 0..3     time reported: 0 rank 0, 1 mean, 2 fastest, 3 slowest rank (default 3;\n"
         "              nccl-tests' default is 1)\n"
         "  -z 0|1      wait for each call to complete before the next (default 0)\n"
         "  -c 0|1      check results in a separate, untimed pass (default 1)\n"
         "  -d TYPE     int8 uint8 int32 uint32 int64 uint64 half float double bfloat16\n"
         "              fp8e4m3 fp8e5m2 fp8e4m3b15, or all (default float)\n"
         "  -o OP       sum prod max min avg, or all (default sum)\n"
         "  -r ROOT     root rank of broadcast, reduce, gather, scatter (default 0)\n"
         "  --csv       one comma-separated line per size instead of the table\n"
         "  --csv FILE  the table on stdout, and the comma-separated lines into FILE\n"
         "  -J FILE     the run as JSON into FILE (nccl-tests' -J; FILE.csv: as --csv FILE)\n"
         "  --plot FILE.png  busbw against size (and the --vs peer's), drawn by the python3\n"
         "              on PATH with matplotlib (python3 -m pip install matplotlib)\n"
         "  -g 1, -t 1  one device and one thread per process: run more ranks instead\n"
         "  -h, --version  show this help, the version\n"
         "\n"
         "Device options (--graph, --window, --register, --overlap-gemm, --vs: CUDA only):\n"
         "  --device D  cpu, cuda, auto, or a device plug-in's kind (loom-emu, KIND:N)\n"
         "              (default auto: cuda when built with CUDA and there is a GPU for\n"
         "              every local rank, else cpu); each rank uses device LOCAL_RANK %\n"
         "              device count. A plug-in is LOOM_DEVICE_PLUGIN's file of that kind,\n"
         "              else Loom's own beside this build or installation (loom-emu)\n"
         "  --placement P  each rank's device, in rank order: letters (G CUDA, C CPU,\n"
         "              E loom-emu: GCCC) or a comma list (cuda,cpu,loom-emu,cpu); the\n"
         "              ranks form one heterogeneous communicator\n"
         "  --graph 0|1 capture the -n calls of each size into one CUDA graph and time its\n"
         "              launch (default 0); -G N is the same with N > 0\n"
         "  --window 0|1 register the send and receive buffers as symmetric windows\n"
         "              (loomCommWindowRegister), so that Loom's calls on them run zero-copy\n"
         "              (default 0); with --vs nccl, NCCL gets its own buffers from\n"
         "              ncclMemAlloc registered as symmetric windows (NCCL 2.27+)\n"
         "  --register 0|1 each rank registers the send and receive buffers alone\n"
         "              (loomCommRegister, as PyTorch's allocator hook does for NCCL), so that\n"
         "              Loom's calls on them run zero-copy (default 0); with --vs nccl, NCCL\n"
         "              registers the same buffers (ncclCommRegister)\n"
         "  --overlap-gemm N  time each size again while N x N bf16 GEMMs (cuBLAS, loaded at\n"
         "              run time: libcublas.so.13/.12) run on another stream of the same\n"
         "              GPU, and report the calls' time under it and the compute each call\n"
         "              cost the GEMMs (eager only; default 0: off)\n"
         "  --vs nccl   also time NCCL on the same buffers and print its time, its busbw and\n"
         "              the loom/nccl time ratio; NCCL is loaded at run time: libnccl.so.2,\n"
         "              or the file $LOOM_BENCH_NCCL names\n"
         "\n"
         "Sizes are total bytes: the whole gathered array for allgather, reducescatter, gather\n"
         "and scatter, the whole send buffer for alltoall.\n";
}

ParseResult parseCommandLine(int argc, const char* const* argv) {
  ParseResult result;
  BenchOptions& opts = result.options;
  if (argc < 2) return usageError("missing OP");
  std::string opName = argv[1];
  if (opName == "-h" || opName == "--help") {
    result.outcome = ParseOutcome::kHelp;
    return result;
  }
  if (opName == "--version" || opName == "-V") {
    result.outcome = ParseOutcome::kVersion;
    return result;
  }
  bool found = false;
  for (const OpInfo& i : kOps) {
    if (opName == i.name) {
      opts.op = i.op;
      found = true;
    }
  }
  // nccl-tests name the collective in the binary (all_reduce_perf -b 8 ...): say where it goes.
  if (!found && opName[0] == '-')
    return usageError("name the collective first, before the options: loom-bench allreduce " +
                      opName + " ... (OP: allreduce, allgather, reducescatter, ...)");
  if (!found) return usageError("unknown OP '" + opName + "'");

  for (int i = 2; i < argc; ++i) {
    std::string flag = argv[i];
    if (flag == "-h" || flag == "--help") {
      result.outcome = ParseOutcome::kHelp;
      return result;
    }
    if (flag == "--version") {
      result.outcome = ParseOutcome::kVersion;
      return result;
    }
    if (flag == "--csv") {
      // A following word that is not a flag names the file; alone, CSV replaces the table.
      if (i + 1 < argc && argv[i + 1][0] != '-' && argv[i + 1][0] != '\0') {
        opts.csvPath = argv[++i];
      } else {
        opts.csv = true;
      }
      continue;
    }
    if (flag.rfind("--csv=", 0) == 0) {
      opts.csvPath = flag.substr(6);
      if (opts.csvPath.empty()) return usageError("--csv= needs a file name");
      continue;
    }
    if (i + 1 >= argc) {
      static const char* const kValued[] = {"-b",
                                            "-e",
                                            "-f",
                                            "-n",
                                            "-w",
                                            "-m",
                                            "-a",
                                            "-z",
                                            "-g",
                                            "-t",
                                            "-G",
                                            "-J",
                                            "-c",
                                            "-r",
                                            "-d",
                                            "-o",
                                            "--minbytes",
                                            "--maxbytes",
                                            "--stepfactor",
                                            "--iters",
                                            "--warmup_iters",
                                            "--agg_iters",
                                            "--average",
                                            "--blocking",
                                            "--ngpus",
                                            "--nthreads",
                                            "--cudagraph",
                                            "--output_file",
                                            "--plot",
                                            "--check",
                                            "--root",
                                            "--datatype",
                                            "--op",
                                            "--device",
                                            "--graph",
                                            "--window",
                                            "--register",
                                            "--overlap-gemm",
                                            "--vs"};
      for (const char* known : kValued) {
        if (flag == known) return usageError("flag " + flag + " needs a value");
      }
      return usageError("unknown flag '" + flag + "'");
    }
    std::string value = argv[++i];
    auto bad = [&]() { return usageError("invalid value '" + value + "' for " + flag); };
    if (flag == "-b" || flag == "--minbytes") {
      if (!parseSize(value, &opts.minBytes)) return bad();
    } else if (flag == "-e" || flag == "--maxbytes") {
      if (!parseSize(value, &opts.maxBytes)) return bad();
    } else if (flag == "-f" || flag == "--stepfactor") {
      char* end = nullptr;
      opts.stepFactor = std::strtod(value.c_str(), &end);
      if (*end != '\0' || !(opts.stepFactor > 1.0) || opts.stepFactor > 1e9) return bad();
    } else if (flag == "-n" || flag == "--iters") {
      auto v = parseInt(value, 1, 1 << 30);
      if (!v) return bad();
      opts.iters = static_cast<int>(*v);
    } else if (flag == "-w" || flag == "--warmup_iters") {
      auto v = parseInt(value, 0, 1 << 30);
      if (!v) return bad();
      opts.warmupIters = static_cast<int>(*v);
    } else if (flag == "-m" || flag == "--agg_iters") {
      auto v = parseInt(value, 1, 1 << 20);
      if (!v) return bad();
      opts.aggIters = static_cast<int>(*v);
    } else if (flag == "-a" || flag == "--average") {
      auto v = parseInt(value, 0, 3);
      if (!v) return bad();
      opts.average = static_cast<int>(*v);
    } else if (flag == "-z" || flag == "--blocking") {
      auto v = parseInt(value, 0, 1);
      if (!v) return bad();
      opts.blocking = *v == 1;
    } else if (flag == "-g" || flag == "--ngpus" || flag == "-t" || flag == "--nthreads") {
      auto v = parseInt(value, 1, 1 << 20);
      if (!v) return bad();
      const bool gpus = flag == "-g" || flag == "--ngpus";
      if (*v != 1) {
        opts.notes.push_back(flag + " " + value + " ignored: a Loom rank is one process with " +
                             (gpus ? "one device" : "one thread") + "; run " + value +
                             " times as many ranks instead (loomrun -n)");
      }
    } else if (flag == "-G" || flag == "--cudagraph") {
      auto v = parseInt(value, 0, 1 << 20);
      if (!v) return bad();
      opts.graph = *v > 0;
      if (*v > 1) {
        opts.notes.push_back("-G " + value + ": the -n calls are captured into one graph and " +
                             "launched once per size, not " + value + " times");
      }
    } else if (flag == "-J" || flag == "--output_file") {
      // As nccl-tests: the suffix says the format.
      const bool csv = value.size() > 4 && value.compare(value.size() - 4, 4, ".csv") == 0;
      (csv ? opts.csvPath : opts.jsonPath) = value;
    } else if (flag == "--plot") {
      opts.plotPath = value;
    } else if (flag == "-c" || flag == "--check") {
      auto v = parseInt(value, 0, 1);
      if (!v) return bad();
      opts.check = *v == 1;
    } else if (flag == "-r" || flag == "--root") {
      auto v = parseInt(value, 0, 1 << 30);
      if (!v) return bad();
      opts.root = static_cast<int>(*v);
    } else if (flag == "-d" || flag == "--datatype") {
      opts.dtypes.clear();
      for (const TypeInfo& t : kTypes) {
        if (value == "all" || value == t.name) opts.dtypes.push_back(t.type);
      }
      // Loom's own aliases ("fp16", "bf16", ...) too, for convenience.
      std::optional<loomDataType_t> alias = dtypeFromName(value);
      if (opts.dtypes.empty() && alias) opts.dtypes.push_back(*alias);
      if (opts.dtypes.empty()) return bad();
    } else if (flag == "--device") {
      if (value == "cpu") {
        opts.device = DeviceChoice::kCpu;
      } else if (value == "cuda") {
        opts.device = DeviceChoice::kCuda;
      } else if (value == "auto") {
        opts.device = DeviceChoice::kAuto;
      } else if (isPluginSpec(value)) {
        opts.device = DeviceChoice::kPlugin;
        opts.deviceSpec = value;
      } else {
        return bad();
      }
    } else if (flag == "--placement") {
      if (!parsePlacement(value, &opts.placement)) return bad();
    } else if (flag == "--graph") {
      auto v = parseInt(value, 0, 1);
      if (!v) return bad();
      opts.graph = *v == 1;
    } else if (flag == "--window") {
      auto v = parseInt(value, 0, 1);
      if (!v) return bad();
      opts.window = *v == 1;
    } else if (flag == "--register") {
      auto v = parseInt(value, 0, 1);
      if (!v) return bad();
      opts.registerBuffers = *v == 1;
    } else if (flag == "--overlap-gemm") {
      auto v = parseInt(value, 0, 65536);
      if (!v) return bad();
      opts.overlapGemm = static_cast<int>(*v);
    } else if (flag == "--vs") {
      if (value != "nccl") return bad();
      opts.vsNccl = true;
    } else if (flag == "-o" || flag == "--op") {
      opts.redops.clear();
      for (const RedOpInfo& r : kRedOps) {
        if (value == "all" || value == r.name) opts.redops.push_back(r.op);
      }
      if (opts.redops.empty()) return bad();
    } else {
      return usageError("unknown flag '" + flag + "'");
    }
  }
  if (opts.minBytes > opts.maxBytes) return usageError("-b is larger than -e");
  if (opts.device == DeviceChoice::kCpu &&
      (opts.graph || opts.vsNccl || opts.window || opts.registerBuffers || opts.overlapGemm > 0)) {
    return usageError(
        "--graph, --window, --register, --overlap-gemm and --vs run on CUDA devices only, not "
        "with --device cpu");
  }
  const bool cudaOnly =
      opts.graph || opts.vsNccl || opts.window || opts.registerBuffers || opts.overlapGemm > 0;
  if (!opts.placement.empty() && opts.device != DeviceChoice::kAuto)
    return usageError("--placement names each rank's device: not with --device");
  if ((!opts.placement.empty() || opts.device == DeviceChoice::kPlugin) && cudaOnly) {
    return usageError(
        "--graph, --window, --register, --overlap-gemm and --vs need every rank on a CUDA GPU: "
        "not with a plug-in's device or --placement");
  }
  if (opts.window && opts.registerBuffers) {
    return usageError("--window 1 and --register 1 exclude each other");
  }
  if (opts.overlapGemm > 0 && (opts.graph || opts.vsNccl)) {
    return usageError("--overlap-gemm times eager Loom calls: not with --graph 1 or --vs");
  }
  // Ops without a reduction run once per type, whatever -o says.
  if (!benchOpReduces(opts.op)) opts.redops = {loomSum};
  result.outcome = ParseOutcome::kRun;
  return result;
}

const char* typeName(loomDataType_t type) {
  for (const TypeInfo& t : kTypes) {
    if (t.type == type) return t.name;
  }
  return "unknown";
}

const char* redOpName(loomRedOp_t op) {
  for (const RedOpInfo& r : kRedOps) {
    if (r.op == op) return r.name;
  }
  return "unknown";
}

}  // namespace loom::bench
