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
#include "bench_memory.hpp"
#include "bench_options.hpp"
#include "bench_report.hpp"
#include "bench_setup.hpp"
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
  // A plug-in's device or a placement: each rank's own memory (runPlaced), not this CUDA path.
  if (opts.device == DeviceChoice::kCpu || opts.device == DeviceChoice::kPlugin ||
      !opts.placement.empty())
    return false;
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

// --device KIND (a device plug-in's) and --placement: a host communicator of every rank first
// (the rank lines, the timing's barrier and scalars), then each rank's own device memory and a
// communicator split from it on that device: one kind for all, or a heterogeneous one.
int runPlaced(const BenchOptions& opts, bool launched, const char* argv0) {
  loomConfig_t hostConfig = LOOM_CONFIG_INITIALIZER;
  hostConfig.device = "cpu";
  loomComm_t world = initWorld(&hostConfig, launched, argv0);
  int rank = 0, nranks = 1;
  checkCall(loomCommUserRank(world, &rank), "loomCommUserRank", world);
  checkCall(loomCommCount(world, &nranks), "loomCommCount", world);
  const std::vector<std::string>& placement = opts.placement;
  if (!placement.empty() && static_cast<int>(placement.size()) != nranks) {
    if (rank == 0)
      std::fprintf(stderr, "loom-bench: --placement names %zu devices for %d ranks\n",
                   placement.size(), nranks);
    loomCommDestroy(world);
    return refusedStatus(rank);
  }
  if (!rootFits(opts, rank, nranks)) {
    loomCommDestroy(world);
    return refusedStatus(rank);
  }
  std::unique_ptr<tool::Memory> memory =
      tool::memoryForDevice("loom-bench", placement.empty() ? opts.deviceSpec : placement[rank]);
  const std::string device = memory->device();
  loomConfig_t deviceConfig = LOOM_CONFIG_INITIALIZER;
  deviceConfig.device = device.c_str();
  loomComm_t comm = nullptr;
  checkCall(loomCommSplit(world, 0, rank, &comm, &deviceConfig), "loomCommSplit", world);

  ReportLayout layout;
  std::string all;
  for (const std::string& d : placement) all += (all.empty() ? "" : ",") + d;
  layout.deviceName = placement.empty() ? opts.deviceSpec.substr(0, opts.deviceSpec.find(':'))
                                        : std::string("mixed");
  layout.runsOn = (placement.empty() ? "running on " + layout.deviceName +
                                           " devices (the plug-in's device buffers), "
                                     : "running on placement " + all +
                                           " (one heterogeneous communicator, each rank's "
                                           "buffers on its own device), ") +
                  std::to_string(nranks) + (nranks == 1 ? " rank on " : " ranks on ");
  layout.rankLines = rankLines(world, rank, nranks, memory->description(), &layout.runsOn);
  std::unique_ptr<Backend> backend = makePlacedBackend(opts, world, *memory);
  Reporter reporter(opts, nranks, layout);
  int status = 1;
  if (openReport(opts, reporter, *backend, rank))
    status = Runner(opts, comm, rank, nranks, *backend, nullptr, reporter).run();
  backend->synchronize();
  checkCall(loomCommDestroy(comm), "loomCommDestroy", nullptr);
  backend.reset();
  checkCall(loomCommDestroy(world), "loomCommDestroy", nullptr);
  memory.reset();
  return finishReport(opts, reporter, rank, status);
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
    std::string why;
    if (speaks && !plotReady(&why)) {
      std::fprintf(stderr, "loom-bench: %s\n", why.c_str());
      return 2;
    }
  }
  if (opts.device == DeviceChoice::kPlugin || !opts.placement.empty()) {
    // Every rank finds the same answer before any communicator exists: rank 0 says what is
    // missing, the others leave quietly (as for a usage error).
    const std::string missing = missingDevices(opts);
    if (!missing.empty()) {
      if (speaks) std::fprintf(stderr, "loom-bench: %s\n", missing.c_str());
      return speaks ? 2 : 0;
    }
    return runPlaced(opts, envRank.has_value(), argv[0]);
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

  loomComm_t comm = initWorld(configArg, envRank.has_value(), argv[0]);
  int rank = 0;
  int nranks = 1;
  checkCall(loomCommUserRank(comm, &rank), "loomCommUserRank", comm);
  checkCall(loomCommCount(comm, &nranks), "loomCommCount", comm);
  if (!rootFits(opts, rank, nranks)) {
    loomCommDestroy(comm);
    return refusedStatus(rank);
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
  if (!openReport(opts, reporter, *backend, rank)) {
    loomCommDestroy(comm);
    return 1;
  }

  int status = Runner(opts, comm, rank, nranks, *backend, peer.get(), reporter).run();
  // NCCL goes first, and the stream drains, before Loom's communicator and the buffers go.
  peer.reset();
  backend->synchronize();
  checkCall(loomCommDestroy(comm), "loomCommDestroy", nullptr);
  backend.reset();
  return finishReport(opts, reporter, rank, status);
}

}  // namespace
}  // namespace loom::bench

int main(int argc, char** argv) { return loom::bench::benchMain(argc, argv); }
