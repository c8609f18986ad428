// loom-bench: nccl-tests-style bandwidth benchmark of Loom's collectives, through the public C
// API only. Every rank runs this program under a launcher; rank 0 prints.
//
// Per size: warm-up, all ranks synchronized, `iters` back-to-back calls timed together; the
// slowest rank's time is reported. The result check runs as a separate, untimed call so that
// filling inputs and computing references never pollute the timing. Buffers live in host
// memory or on CUDA devices (bench_backend.hpp); on CUDA devices NCCL can be timed on the same
// buffers for comparison (--vs nccl).
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "base/dtype.hpp"
#include "bench_backend.hpp"
#include "bench_check.hpp"
#include "bench_gpu.hpp"
#include "bench_options.hpp"
#include "bench_report.hpp"
#include "loom/loom.h"

namespace loom::bench {
namespace {

class Runner {
 public:
  Runner(const BenchOptions& options, loomComm_t comm, int rank, int nranks, Backend& backend,
         PeerLibrary* peer, Reporter& reporter)
      : opts_(options),
        comm_(comm),
        rank_(rank),
        nranks_(nranks),
        backend_(backend),
        peer_(peer),
        reporter_(reporter) {}

  // Returns the process exit status.
  int run();

 private:
  void issue(const CallArgs& c);
  CallArgs argsFor(bool inPlace, const CallShape& shape, loomDataType_t dtype, loomRedOp_t redop);
  Timing timeCalls(const std::function<void()>& launch, size_t bytes);
  int64_t checkOnce(const CallArgs& c, bool inPlace, const CallShape& shape);
  PassResult runPass(bool inPlace, const CallShape& shape, loomDataType_t dtype, loomRedOp_t redop,
                     size_t bytes);
  const char* algorithm(size_t count, loomDataType_t dtype);
  void warmUp();

  const BenchOptions& opts_;
  loomComm_t comm_;
  int rank_;
  int nranks_;
  Backend& backend_;
  PeerLibrary* peer_;  // nullptr: Loom alone
  Reporter& reporter_;
  int64_t totalWrong_ = 0;
};

void Runner::issue(const CallArgs& c) {
  const int root = opts_.root;
  loomStream_t stream = backend_.stream();
  switch (opts_.op) {
    case BenchOp::kAllReduce:
      checkCall(loomAllReduce(c.send, c.recv, c.count, c.dtype, c.redop, comm_, stream),
                "loomAllReduce", comm_);
      break;
    case BenchOp::kAllGather:
      checkCall(loomAllGather(c.send, c.recv, c.count, c.dtype, comm_, stream), "loomAllGather",
                comm_);
      break;
    case BenchOp::kReduceScatter:
      checkCall(loomReduceScatter(c.send, c.recv, c.count, c.dtype, c.redop, comm_, stream),
                "loomReduceScatter", comm_);
      break;
    case BenchOp::kBroadcast:
      checkCall(loomBroadcast(c.send, c.recv, c.count, c.dtype, root, comm_, stream),
                "loomBroadcast", comm_);
      break;
    case BenchOp::kReduce:
      checkCall(loomReduce(c.send, c.recv, c.count, c.dtype, c.redop, root, comm_, stream),
                "loomReduce", comm_);
      break;
    case BenchOp::kAllToAll:
      checkCall(loomAllToAll(c.send, c.recv, c.count, c.dtype, comm_, stream), "loomAllToAll",
                comm_);
      break;
    case BenchOp::kGather:
      checkCall(loomGather(c.send, c.recv, c.count, c.dtype, root, comm_, stream), "loomGather",
                comm_);
      break;
    case BenchOp::kScatter:
      checkCall(loomScatter(c.send, c.recv, c.count, c.dtype, root, comm_, stream), "loomScatter",
                comm_);
      break;
    case BenchOp::kSendRecv: {
      // A ring shift: the group lets every rank post its send before its receive.
      const int next = (rank_ + 1) % nranks_;
      const int prev = (rank_ - 1 + nranks_) % nranks_;
      checkCall(loomGroupStart(), "loomGroupStart", comm_);
      checkCall(loomSend(c.send, c.count, c.dtype, next, comm_, stream), "loomSend", comm_);
      checkCall(loomRecv(c.recv, c.count, c.dtype, prev, comm_, stream), "loomRecv", comm_);
      checkCall(loomGroupEnd(), "loomGroupEnd", comm_);
      break;
    }
  }
}

CallArgs Runner::argsFor(bool inPlace, const CallShape& shape, loomDataType_t dtype,
                         loomRedOp_t redop) {
  CallArgs c;
  c.count = shape.count;
  c.dtype = dtype;
  c.redop = redop;
  c.send = backend_.sendBuffer();
  c.recv = backend_.recvBuffer();
  if (!inPlace) return c;
  // nccl-tests' in-place layouts: the rank's own block of the larger buffer is the smaller one.
  const size_t ownBlock = static_cast<size_t>(rank_) * shape.count * dtypeSize(dtype);
  switch (opts_.op) {
    case BenchOp::kAllGather:
      c.send = backend_.recvBuffer() + ownBlock;
      break;
    case BenchOp::kReduceScatter:
      c.recv = backend_.sendBuffer() + ownBlock;
      break;
    default:
      c.send = c.recv;
      break;
  }
  return c;
}

Timing Runner::timeCalls(const std::function<void()>& call, size_t bytes) {
  Timing t;
  t.ran = true;
  // -m: that many calls in one group per step; -z: each step waits for its completion.
  const int agg = opts_.aggIters;
  std::function<void()> launch = call;
  if (agg > 1 || opts_.blocking) {
    launch = [&]() {
      if (agg > 1) checkCall(loomGroupStart(), "loomGroupStart", comm_);
      for (int i = 0; i < agg; ++i) call();
      if (agg > 1) checkCall(loomGroupEnd(), "loomGroupEnd", comm_);
      if (opts_.blocking) backend_.synchronize();
    };
  }
  backend_.sizeOfNextCalls(bytes);
  const double mine = backend_.secondsPerCall(launch) / agg;
  // -a: the slowest rank by default (the collective is only as fast as it), as nccl-tests -a 3.
  switch (opts_.average) {
    case 0:
      t.seconds = mine;  // rank 0's, which is the one that prints
      break;
    case 1:
      // Picoseconds as integers: the sum is exact and the same on every rank.
      t.seconds = static_cast<double>(backend_.sumOverRanks(static_cast<int64_t>(mine * 1e12))) /
                  1e12 / nranks_;
      break;
    case 2:
      t.seconds = -backend_.maxOverRanks(-mine);
      break;
    default:
      t.seconds = backend_.maxOverRanks(mine);
      break;
  }
  t.algbw = static_cast<double>(bytes) / t.seconds / 1e9;
  t.busbw = t.algbw * busFactor(opts_.op, nranks_);
  return t;
}

int64_t Runner::checkOnce(const CallArgs& c, bool inPlace, const CallShape& shape) {
  CheckSpec spec;
  spec.op = opts_.op;
  spec.dtype = c.dtype;
  spec.redop = c.redop;
  spec.nranks = nranks_;
  spec.root = opts_.root;
  spec.count = c.count;
  const BenchOp op = opts_.op;
  const size_t elemSize = dtypeSize(c.dtype);
  auto* send = static_cast<unsigned char*>(c.send);
  auto* recv = static_cast<unsigned char*>(c.recv);
  // Inputs are written into the buffers' host views, in order (in-place allgather's input lies
  // inside the poisoned output), and each range is uploaded after it is written.
  auto poisonOutput = [&]() {
    fillPoison(c.dtype, backend_.hostView(recv), shape.recvElems);
    backend_.upload(recv, shape.recvElems * elemSize);
  };
  // Poison whatever the op must overwrite, so that a skipped write shows up as wrong.
  if (!inPlace || op == BenchOp::kAllGather) poisonOutput();
  if (inPlace && op == BenchOp::kBroadcast && rank_ != opts_.root) {
    poisonOutput();
  } else {
    fillSendInput(spec, rank_, backend_.hostView(send));
    backend_.upload(send, shape.sendElems * elemSize);
  }
  issue(c);
  backend_.synchronize();
  backend_.download(recv, shape.recvElems * elemSize);
  return backend_.sumOverRanks(countWrong(spec, rank_, backend_.hostView(recv)));
}

PassResult Runner::runPass(bool inPlace, const CallShape& shape, loomDataType_t dtype,
                           loomRedOp_t redop, size_t bytes) {
  PassResult p;
  if (inPlace && !benchOpHasInPlace(opts_.op)) return p;
  const CallArgs c = argsFor(inPlace, shape, dtype, redop);
  const Timing loom = timeCalls([&]() { issue(c); }, bytes);
  p.ran = true;
  p.seconds = loom.seconds;
  p.algbw = loom.algbw;
  p.busbw = loom.busbw;
  if (opts_.check) {
    p.checked = true;
    p.wrong = checkOnce(c, inPlace, shape);
    totalWrong_ += p.wrong;
  }
  if (peer_ != nullptr && peer_->supports(opts_.op, dtype, redop)) {
    p.peer = timeCalls([&]() { peer_->issue(opts_.op, c, opts_.root); }, bytes);
  }
  return p;
}

const char* Runner::algorithm(size_t count, loomDataType_t dtype) {
  const char* name = nullptr;
  loomResult_t r = loomCommGetAlgorithm(comm_, benchOpFunc(opts_.op), count, dtype, &name);
  // Introspection the library declines (it leaves the communicator usable) must not cost the
  // measurement; anything worse is fatal like every other failed call.
  if (r == loomInvalidArgument) return "?";
  checkCall(r, "loomCommGetAlgorithm", comm_);
  return name != nullptr ? name : "?";
}

void Runner::warmUp() {
  const std::vector<size_t> steps = sizeSteps(opts_);
  const loomDataType_t dtype = opts_.dtypes.front();
  const loomRedOp_t redop = opts_.redops.front();
  for (size_t bytes : {steps.back(), steps.front()}) {
    const CallShape shape = callShape(opts_.op, bytes, dtypeSize(dtype), nranks_);
    if (shape.count == 0) continue;
    const CallArgs c = argsFor(false, shape, dtype, redop);
    for (int i = 0; i < opts_.warmupIters; ++i) issue(c);
    if (peer_ != nullptr && peer_->supports(opts_.op, dtype, redop)) {
      for (int i = 0; i < opts_.warmupIters; ++i) peer_->issue(opts_.op, c, opts_.root);
    }
  }
  backend_.synchronize();
}

int Runner::run() {
  if (rank_ == 0) reporter_.header();
  if (backend_.warmUpFirst()) warmUp();
  for (loomDataType_t dtype : opts_.dtypes) {
    const size_t elemSize = dtypeSize(dtype);
    for (loomRedOp_t redop : opts_.redops) {
      for (size_t requested : sizeSteps(opts_)) {
        const CallShape shape = callShape(opts_.op, requested, elemSize, nranks_);
        if (shape.count == 0) continue;
        Row row;
        row.elems = shape.totalElems;
        row.bytes = shape.totalElems * elemSize;
        row.dtype = dtype;
        row.redop = redop;
        row.algo = algorithm(shape.count, dtype);
        row.oop = runPass(false, shape, dtype, redop, row.bytes);
        row.ip = runPass(true, shape, dtype, redop, row.bytes);
        if (rank_ == 0) reporter_.row(row);
      }
    }
  }
  if (rank_ == 0) reporter_.footer(totalWrong_);
  return totalWrong_ == 0 ? 0 : 1;
}

// Whether this run uses CUDA devices; exits with a usage error when what was asked cannot run.
bool resolveDevice(const BenchOptions& opts) {
  if (opts.device == DeviceChoice::kCpu) return false;
  const bool asked =
      opts.device == DeviceChoice::kCuda || opts.graph || opts.vsNccl || opts.overlapGemm > 0;
  if (cudaDeviceVisible(asked)) return true;
  if (asked) {
#if LOOM_HAVE_CUDA
    std::fprintf(stderr,
                 "loom-bench: no CUDA device is visible (needed by --device cuda, "
                 "--graph, --overlap-gemm and --vs)\n");
#else
    std::fprintf(stderr,
                 "loom-bench: this loom-bench was built without CUDA (needed by "
                 "--device cuda, --graph, --overlap-gemm and --vs)\n");
#endif
    std::exit(2);
  }
  return false;
}

// This process's rank as a launcher set it (loomCommInitFromEnv reads the same variables);
// nothing when no launcher started it.
std::optional<int> launcherRank() {
  for (const char* name :
       {"LOOM_RANK", "RANK", "OMPI_COMM_WORLD_RANK", "PMI_RANK", "SLURM_PROCID"}) {
    const char* value = std::getenv(name);
    if (value != nullptr && *value != '\0') return std::atoi(value);
  }
  return std::nullopt;
}

int localRankCount() {
  for (const char* name : {"LOCAL_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_SIZE", "MPI_LOCALNRANKS",
                           "SLURM_NTASKS_PER_NODE"}) {
    const char* value = std::getenv(name);
    if (value != nullptr && std::atoi(value) > 0) return std::atoi(value);
  }
  return 1;
}

// MemAvailable of /proc/meminfo in bytes; 0 when unknown.
size_t availableHostMemory() {
  FILE* f = std::fopen("/proc/meminfo", "r");
  if (f == nullptr) return 0;
  char line[256];
  size_t kib = 0;
  while (std::fgets(line, sizeof(line), f) != nullptr) {
    if (std::sscanf(line, "MemAvailable: %zu kB", &kib) == 1) break;
  }
  std::fclose(f);
  return kib * 1024;
}

// nccl-tests' "Rank N ... Pid P on HOST device D" lines, gathered from every rank over `comm`
// (a host communicator); rank 0's alone where that fails.
std::vector<std::string> rankLines(loomComm_t comm, int rank, int nranks, const std::string& device,
                                   std::string* runsOn) {
  constexpr size_t kRecord = 192;
  char host[64] = {0};
  gethostname(host, sizeof(host) - 1);
  std::vector<char> mine(kRecord, 0);
  std::snprintf(mine.data(), kRecord, "%s\t%d\t%s", host, static_cast<int>(getpid()),
                device.c_str());
  std::vector<char> all(kRecord * static_cast<size_t>(nranks), 0);
  std::vector<std::string> lines;
  if (loomAllGather(mine.data(), all.data(), kRecord, loomChar, comm, nullptr) != loomSuccess) {
    all.assign(mine.begin(), mine.end());
    nranks = 1;
    rank = 0;
  }
  std::vector<std::string> hosts;
  for (int r = 0; r < nranks; ++r) {
    std::string record(all.data() + static_cast<size_t>(r) * kRecord);
    size_t tab1 = record.find('\t');
    size_t tab2 = record.find('\t', tab1 + 1);
    std::string rhost = record.substr(0, tab1);
    if (std::find(hosts.begin(), hosts.end(), rhost) == hosts.end()) hosts.push_back(rhost);
    char line[320];
    std::snprintf(line, sizeof(line), "Rank %2d Pid %7s on %10s device %s", r,
                  record.substr(tab1 + 1, tab2 - tab1 - 1).c_str(), rhost.c_str(),
                  record.substr(tab2 + 1).c_str());
    lines.push_back(line);
  }
  (void)rank;
  *runsOn += std::to_string(hosts.size()) + (hosts.size() == 1 ? " host" : " hosts");
  return lines;
}

// --plot: rank 0 hands the JSON to a short matplotlib script (python3 must have matplotlib).
bool drawPlot(const BenchOptions& opts, const std::string& json) {
  static const char* const kScript = R"PY(
import json, sys
try:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
except ImportError:
    sys.exit("loom-bench: --plot needs matplotlib for python3: python3 -m pip install matplotlib "
             "(or scripts/install_deps.sh plot)")
run = json.load(open(sys.argv[1]))
cfg, rows = run["config"], [r for r in run["results"] if r["out_of_place"]]
fig, ax = plt.subplots(figsize=(8, 5))
ax.plot([r["size"] for r in rows], [r["out_of_place"]["busbw_gbs"] for r in rows], "o-",
        label="loom")
peer = cfg.get("peer")
if peer:
    pts = [(r["size"], r["out_of_place"][peer]["busbw_gbs"]) for r in rows
           if peer in r["out_of_place"]]
    if pts:
        ax.plot(*zip(*pts), "s--", label=peer)
ax.set_xscale("log", base=2)
ax.set_xlabel("size (bytes)")
ax.set_ylabel("bus bandwidth (GB/s)")
ax.set_title(f"{cfg['op']}, {cfg['nranks']} ranks, {cfg['device']}: {run['runs_on']}")
ax.grid(True, which="both", alpha=0.3)
ax.legend()
fig.savefig(sys.argv[2], dpi=120, bbox_inches="tight")
print(f"# plot: {sys.argv[2]}")
)PY";
  const std::string command =
      "python3 -c '" + std::string(kScript) + "' '" + json + "' '" + opts.plotPath + "'";
  if (opts.plotPath.find('\'') != std::string::npos || json.find('\'') != std::string::npos) {
    std::fprintf(stderr, "loom-bench: --plot: file names with ' are not supported\n");
    return false;
  }
  std::fflush(stdout);
  return std::system(command.c_str()) == 0;
}

int benchMain(int argc, char** argv) {
  ParseResult parsed = parseCommandLine(argc, argv);
  // Every rank parses the same command line: rank 0 alone says what is wrong with it.
  const std::optional<int> envRank = launcherRank();
  const bool speaks = !envRank || *envRank == 0;
  if (parsed.outcome == ParseOutcome::kHelp) {
    if (speaks) std::fputs(usageText().c_str(), stdout);
    return 0;
  }
  if (parsed.outcome == ParseOutcome::kVersion) {
    if (speaks) std::printf("loom-bench (Loom) %d.%d.%d\n", LOOM_MAJOR, LOOM_MINOR, LOOM_PATCH);
    return 0;
  }
  // Every rank has the same command line: rank 0 says what is wrong and fails the job; the
  // others leave quietly and successfully, since a launcher that saw them fail first could stop
  // rank 0 before it said why.
  if (parsed.outcome == ParseOutcome::kUsageError) {
    if (!speaks) return 0;
    std::fprintf(stderr, "loom-bench: %s\nRun 'loom-bench --help' for the options.\n",
                 parsed.error.c_str());
    return 2;
  }
  BenchOptions& opts = parsed.options;
  if (speaks) {
    for (const std::string& note : opts.notes)
      std::fprintf(stderr, "loom-bench: note: %s\n", note.c_str());
  }
  if (!opts.plotPath.empty()) {
    if (opts.jsonPath.empty()) opts.jsonPath = opts.plotPath + ".json";  // the data, beside it
    // Before measuring anything: the plot is drawn by python3's matplotlib at the end.
    if (speaks && std::system("python3 -c 'import matplotlib' >/dev/null 2>&1") != 0) {
      std::fprintf(stderr,
                   "loom-bench: --plot needs matplotlib for python3: python3 -m pip install "
                   "matplotlib (or scripts/install_deps.sh plot)\n");
      return 2;
    }
  }
  [[maybe_unused]] const bool cuda = resolveDevice(opts);

  // Before any allocation: a size that cannot fit is a clear error, not the OOM killer.
  if (!cuda) {
    const size_t available = availableHostMemory();
    const std::string shortfall =
        available == 0 ? "" : memoryShortfall(opts, available, localRankCount(), "host memory");
    if (!shortfall.empty()) {
      // Each host's first rank says so and fails the job (as above, its neighbours leave quietly).
      const char* local = std::getenv("LOCAL_RANK");
      if (local != nullptr && std::atoi(local) != 0) return 0;
      std::fprintf(stderr, "loom-bench: %s\n", shortfall.c_str());
      return 1;
    }
  }

  ReportLayout layout;
  [[maybe_unused]] loomConfig_t config = LOOM_CONFIG_INITIALIZER;
  loomConfig_t* configArg = nullptr;  // host runs keep the library's defaults
  std::string myDevice = "cpu";
#if LOOM_HAVE_CUDA
  if (cuda) {
    layout.deviceColumns = true;
    layout.deviceName = "cuda";
    layout.graph = opts.graph;
    layout.peer = opts.vsNccl;
    myDevice = selectCudaDevice();
    // The device's buffers, before any is allocated (those of the ranks sharing this GPU too).
    int sharing = 1;
    const size_t freeBytes = cudaFreeMemory(localRankCount(), &sharing);
    const std::string shortfall =
        freeBytes == 0 ? "" : memoryShortfall(opts, freeBytes, sharing, "free GPU memory");
    if (!shortfall.empty()) {
      const char* local = std::getenv("LOCAL_RANK");
      if (local != nullptr && std::atoi(local) != 0) return 0;
      std::fprintf(stderr, "loom-bench: %s\n", shortfall.c_str());
      return 1;
    }
    layout.deviceLine = "# device: cuda, rank 0 on " + myDevice +
                        "; graph: " + (opts.graph ? "1" : "0") +
                        "; window: " + (opts.window ? "1" : "0") +
                        "; register: " + (opts.registerBuffers ? "1" : "0");
    config.device = "cuda";
    configArg = &config;
  }
#endif

  loomComm_t comm = nullptr;
  if (envRank) {
    checkCall(loomCommInitFromEnv(&comm, configArg), "loomCommInitFromEnv", comm);
  } else {
    // No launcher: a job of one rank (as nccl-tests runs without mpirun).
    std::fprintf(stderr,
                 "loom-bench: no launcher variables (RANK, OMPI_COMM_WORLD_RANK, SLURM_PROCID): "
                 "running as a single rank; loomrun -n N %s ... runs N\n",
                 argv[0]);
    loomUniqueId id;
    checkCall(loomGetUniqueId(&id), "loomGetUniqueId", nullptr);
    checkCall(loomCommInitRankConfig(&comm, 1, id, 0, configArg), "loomCommInitRankConfig", comm);
  }
  int rank = 0;
  int nranks = 1;
  checkCall(loomCommUserRank(comm, &rank), "loomCommUserRank", comm);
  checkCall(loomCommCount(comm, &nranks), "loomCommCount", comm);
  if (opts.root >= nranks) {
    if (rank == 0) std::fprintf(stderr, "loom-bench: root %d >= nranks %d\n", opts.root, nranks);
    loomCommDestroy(comm);
    return 2;
  }

  // Who runs where: a host communicator gathers it (a CUDA one's buffers must be on the GPU).
  loomComm_t hostComm = comm;
  loomConfig_t hostConfig = LOOM_CONFIG_INITIALIZER;
  hostConfig.device = "cpu";
  if (cuda && loomCommSplit(comm, 0, rank, &hostComm, &hostConfig) != loomSuccess)
    hostComm = nullptr;
  layout.runsOn = std::string(cuda ? "running on GPUs (CUDA device buffers), "
                                   : "running on CPUs (host buffers; no GPU used), ") +
                  std::to_string(nranks) + (nranks == 1 ? " rank on " : " ranks on ");
  if (hostComm != nullptr) {
    layout.rankLines = rankLines(hostComm, rank, nranks, myDevice, &layout.runsOn);
    if (hostComm != comm) loomCommDestroy(hostComm);
  } else {
    layout.runsOn += "? hosts";
  }

  std::unique_ptr<Backend> backend;
  std::unique_ptr<PeerLibrary> peer;
#if LOOM_HAVE_CUDA
  if (cuda) {
    auto device = std::make_unique<CudaBackend>(opts, comm);
    if (opts.vsNccl) {
      peer = makeNcclPeer(*device, rank, nranks, opts.window, opts.registerBuffers);
      layout.deviceLine += "; vs: " + peer->description();
    }
    backend = std::move(device);
  }
#endif
  if (!backend) backend = makeHostBackend(opts, comm);

  Reporter reporter(opts, nranks, layout);
  if (!opts.csvPath.empty()) {
    // Every rank learns whether rank 0 can write the file before any rank starts measuring.
    const bool opened = rank != 0 || reporter.open();
    if (backend->sumOverRanks(opened ? 0 : 1) != 0) {
      loomCommDestroy(comm);
      return 1;
    }
  } else if (rank == 0) {
    reporter.open();
  }

  int status = Runner(opts, comm, rank, nranks, *backend, peer.get(), reporter).run();
  // NCCL goes first, and the stream drains, before Loom's communicator and the buffers go.
  peer.reset();
  backend->synchronize();
  checkCall(loomCommDestroy(comm), "loomCommDestroy", nullptr);
  backend.reset();
  if (rank == 0 && !reporter.written()) status = status == 0 ? 1 : status;
  if (rank == 0 && !opts.plotPath.empty() && reporter.written() && !drawPlot(opts, opts.jsonPath)) {
    status = status == 0 ? 1 : status;
  }
  return status;
}

}  // namespace
}  // namespace loom::bench

int main(int argc, char** argv) { return loom::bench::benchMain(argc, argv); }
