// loom-bench: nccl-tests-style bandwidth benchmark of Loom's collectives, through the public C
// API only. Every rank runs this program under a launcher; rank 0 prints.
//
// Per size: warm-up, all ranks synchronized, `iters` back-to-back calls timed together; the
// slowest rank's time is reported. The result check runs as a separate, untimed call so that
// filling inputs and computing references never pollute the timing. Buffers live in host
// memory or on CUDA devices (bench_backend.hpp); on CUDA devices NCCL can be timed on the same
// buffers for comparison (--vs nccl).
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
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

Timing Runner::timeCalls(const std::function<void()>& launch, size_t bytes) {
  Timing t;
  t.ran = true;
  // The collective is only as fast as its slowest rank.
  t.seconds = backend_.maxOverRanks(backend_.secondsPerCall(launch));
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
  const bool asked = opts.device == DeviceChoice::kCuda || opts.graph || opts.vsNccl;
  if (cudaDeviceVisible(asked)) return true;
  if (asked) {
#if LOOM_HAVE_CUDA
    std::fprintf(stderr,
                 "loom-bench: no CUDA device is visible (needed by --device cuda, "
                 "--graph and --vs)\n");
#else
    std::fprintf(stderr,
                 "loom-bench: this loom-bench was built without CUDA (needed by "
                 "--device cuda, --graph and --vs)\n");
#endif
    std::exit(2);
  }
  return false;
}

int benchMain(int argc, char** argv) {
  ParseResult parsed = parseCommandLine(argc, argv);
  if (parsed.outcome == ParseOutcome::kHelp) {
    std::fputs(usageText().c_str(), stdout);
    return 0;
  }
  if (parsed.outcome == ParseOutcome::kUsageError) {
    std::fprintf(stderr, "loom-bench: %s\n%s", parsed.error.c_str(), usageText().c_str());
    return 2;
  }
  const BenchOptions& opts = parsed.options;
  [[maybe_unused]] const bool cuda = resolveDevice(opts);

  ReportLayout layout;
  [[maybe_unused]] loomConfig_t config = LOOM_CONFIG_INITIALIZER;
  loomConfig_t* configArg = nullptr;  // host runs keep the library's defaults
#if LOOM_HAVE_CUDA
  if (cuda) {
    layout.deviceColumns = true;
    layout.deviceName = "cuda";
    layout.graph = opts.graph;
    layout.peer = opts.vsNccl;
    layout.deviceLine =
        "# device: cuda, rank 0 on " + selectCudaDevice() + "; graph: " + (opts.graph ? "1" : "0");
    config.device = "cuda";
    configArg = &config;
  }
#endif

  loomComm_t comm = nullptr;
  checkCall(loomCommInitFromEnv(&comm, configArg), "loomCommInitFromEnv", comm);
  int rank = 0;
  int nranks = 1;
  checkCall(loomCommUserRank(comm, &rank), "loomCommUserRank", comm);
  checkCall(loomCommCount(comm, &nranks), "loomCommCount", comm);
  if (opts.root >= nranks) {
    if (rank == 0) std::fprintf(stderr, "loom-bench: root %d >= nranks %d\n", opts.root, nranks);
    loomCommDestroy(comm);
    return 2;
  }

  std::unique_ptr<Backend> backend;
  std::unique_ptr<PeerLibrary> peer;
#if LOOM_HAVE_CUDA
  if (cuda) {
    auto device = std::make_unique<CudaBackend>(opts, comm);
    if (opts.vsNccl) {
      peer = makeNcclPeer(*device, rank, nranks);
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
  return status;
}

}  // namespace
}  // namespace loom::bench

int main(int argc, char** argv) { return loom::bench::benchMain(argc, argv); }
