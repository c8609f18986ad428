// loom-bench: nccl-tests-style bandwidth benchmark of Loom's collectives, through the public C
// API only. Every rank runs this program under a launcher; rank 0 prints.
//
// Per size: warm-up, a barrier, `iters` back-to-back calls timed together; the slowest rank's
// time is reported. The result check runs as a separate, untimed call so that filling inputs
// and computing references never pollute the timing.
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "base/dtype.hpp"
#include "bench_check.hpp"
#include "bench_options.hpp"
#include "loom/loom.h"

namespace loom::bench {
namespace {

[[noreturn]] void failCall(const char* call, loomResult_t r, loomComm_t comm) {
  std::fprintf(stderr, "loom-bench: %s failed: %s: %s\n", call, loomGetErrorString(r),
               loomGetLastError(comm));
  std::exit(1);
}

void checkCall(loomResult_t r, const char* call, loomComm_t comm) {
  if (r != loomSuccess) failCall(call, r, comm);
}

struct FreeDeleter {
  void operator()(void* p) const { std::free(p); }
};
using Buffer = std::unique_ptr<unsigned char, FreeDeleter>;

Buffer allocTouched(size_t bytes) {
  const size_t rounded = (bytes + 63) / 64 * 64 + 64;
  auto* p = static_cast<unsigned char*>(std::aligned_alloc(64, rounded));
  if (p == nullptr) {
    std::fprintf(stderr, "loom-bench: cannot allocate %zu bytes\n", rounded);
    std::exit(1);
  }
  // Fault every page in now, so the first timed size does not pay for it. Zeros are a valid
  // value of every type, and far from the denormals that would slow reductions down.
  std::memset(p, 0, rounded);
  return Buffer(p);
}

// One pass (out-of-place or in-place) of one row.
struct PassResult {
  bool ran = false;
  double seconds = 0;
  double algbw = 0;
  double busbw = 0;
  bool checked = false;
  int64_t wrong = 0;
};

struct Row {
  size_t bytes = 0;
  size_t elems = 0;
  loomDataType_t dtype = loomFloat;
  loomRedOp_t redop = loomSum;
  const char* algo = "";
  PassResult oop;
  PassResult ip;
};

// The arguments of one Loom call.
struct CallArgs {
  void* send = nullptr;
  void* recv = nullptr;
  size_t count = 0;
  loomDataType_t dtype = loomFloat;
  loomRedOp_t redop = loomSum;
};

class Runner {
 public:
  Runner(const BenchOptions& options, loomComm_t comm, int rank, int nranks)
      : opts_(options), comm_(comm), rank_(rank), nranks_(nranks) {}

  // Returns the process exit status.
  int run();

 private:
  void issue(const CallArgs& c);
  CallArgs argsFor(bool inPlace, const CallShape& shape, loomDataType_t dtype, loomRedOp_t redop);
  double timeCalls(const CallArgs& c);
  int64_t checkOnce(const CallArgs& c, bool inPlace, const CallShape& shape);
  PassResult runPass(bool inPlace, const CallShape& shape, loomDataType_t dtype, loomRedOp_t redop,
                     size_t bytes);
  const char* algorithm(size_t count, loomDataType_t dtype);

  void printHeader() const;
  void printRow(const Row& row) const;
  void printFooter() const;

  const BenchOptions& opts_;
  loomComm_t comm_;
  int rank_;
  int nranks_;
  Buffer send_;
  Buffer recv_;
  int64_t totalWrong_ = 0;
  double busbwSum_ = 0;
  int busbwCount_ = 0;
};

void Runner::issue(const CallArgs& c) {
  const int root = opts_.root;
  switch (opts_.op) {
    case BenchOp::kAllReduce:
      checkCall(loomAllReduce(c.send, c.recv, c.count, c.dtype, c.redop, comm_, nullptr),
                "loomAllReduce", comm_);
      break;
    case BenchOp::kAllGather:
      checkCall(loomAllGather(c.send, c.recv, c.count, c.dtype, comm_, nullptr), "loomAllGather",
                comm_);
      break;
    case BenchOp::kReduceScatter:
      checkCall(loomReduceScatter(c.send, c.recv, c.count, c.dtype, c.redop, comm_, nullptr),
                "loomReduceScatter", comm_);
      break;
    case BenchOp::kBroadcast:
      checkCall(loomBroadcast(c.send, c.recv, c.count, c.dtype, root, comm_, nullptr),
                "loomBroadcast", comm_);
      break;
    case BenchOp::kReduce:
      checkCall(loomReduce(c.send, c.recv, c.count, c.dtype, c.redop, root, comm_, nullptr),
                "loomReduce", comm_);
      break;
    case BenchOp::kAllToAll:
      checkCall(loomAllToAll(c.send, c.recv, c.count, c.dtype, comm_, nullptr), "loomAllToAll",
                comm_);
      break;
    case BenchOp::kGather:
      checkCall(loomGather(c.send, c.recv, c.count, c.dtype, root, comm_, nullptr), "loomGather",
                comm_);
      break;
    case BenchOp::kScatter:
      checkCall(loomScatter(c.send, c.recv, c.count, c.dtype, root, comm_, nullptr), "loomScatter",
                comm_);
      break;
    case BenchOp::kSendRecv: {
      // A ring shift: the group lets every rank post its send before its receive.
      const int next = (rank_ + 1) % nranks_;
      const int prev = (rank_ - 1 + nranks_) % nranks_;
      checkCall(loomGroupStart(), "loomGroupStart", comm_);
      checkCall(loomSend(c.send, c.count, c.dtype, next, comm_, nullptr), "loomSend", comm_);
      checkCall(loomRecv(c.recv, c.count, c.dtype, prev, comm_, nullptr), "loomRecv", comm_);
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
  c.send = send_.get();
  c.recv = recv_.get();
  if (!inPlace) return c;
  // nccl-tests' in-place layouts: the rank's own block of the larger buffer is the smaller one.
  const size_t ownBlock = static_cast<size_t>(rank_) * shape.count * dtypeSize(dtype);
  switch (opts_.op) {
    case BenchOp::kAllGather:
      c.send = recv_.get() + ownBlock;
      break;
    case BenchOp::kReduceScatter:
      c.recv = send_.get() + ownBlock;
      break;
    default:
      c.send = c.recv;
      break;
  }
  return c;
}

double Runner::timeCalls(const CallArgs& c) {
  for (int i = 0; i < opts_.warmupIters; ++i) issue(c);
  checkCall(loomBarrier(comm_, nullptr), "loomBarrier", comm_);
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < opts_.iters; ++i) issue(c);
  const std::chrono::duration<double> elapsed = std::chrono::steady_clock::now() - start;
  double seconds = elapsed.count() / opts_.iters;
  // The collective is only as fast as its slowest rank.
  checkCall(loomAllReduce(&seconds, &seconds, 1, loomDouble, loomMax, comm_, nullptr),
            "loomAllReduce", comm_);
  return seconds;
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
  // Poison whatever the op must overwrite, so that a skipped write shows up as wrong.
  if (!inPlace || op == BenchOp::kAllGather) fillPoison(c.dtype, c.recv, shape.recvElems);
  if (inPlace && op == BenchOp::kBroadcast && rank_ != opts_.root) {
    fillPoison(c.dtype, c.recv, shape.recvElems);
  } else {
    fillSendInput(spec, rank_, c.send);
  }
  issue(c);
  int64_t wrong = countWrong(spec, rank_, c.recv);
  checkCall(loomAllReduce(&wrong, &wrong, 1, loomInt64, loomSum, comm_, nullptr), "loomAllReduce",
            comm_);
  return wrong;
}

PassResult Runner::runPass(bool inPlace, const CallShape& shape, loomDataType_t dtype,
                           loomRedOp_t redop, size_t bytes) {
  PassResult p;
  if (inPlace && !benchOpHasInPlace(opts_.op)) return p;
  const CallArgs c = argsFor(inPlace, shape, dtype, redop);
  p.ran = true;
  p.seconds = timeCalls(c);
  p.algbw = static_cast<double>(bytes) / p.seconds / 1e9;
  p.busbw = p.algbw * busFactor(opts_.op, nranks_);
  busbwSum_ += p.busbw;
  ++busbwCount_;
  if (opts_.check) {
    p.checked = true;
    p.wrong = checkOnce(c, inPlace, shape);
    totalWrong_ += p.wrong;
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

int Runner::run() {
  send_ = allocTouched(opts_.maxBytes);
  recv_ = allocTouched(opts_.maxBytes);
  if (rank_ == 0) printHeader();
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
        if (rank_ == 0) printRow(row);
      }
    }
  }
  if (rank_ == 0) printFooter();
  return totalWrong_ == 0 ? 0 : 1;
}

// Widths of the table's columns; the header is printed with the same widths as the rows.
constexpr const char* kFixedFormat = "%12s  %12s  %8s  %6s  %6s";
constexpr const char* kPassFormat = "  %7s  %6s  %6s %6s";

void Runner::printHeader() const {
  if (opts_.csv) {
    std::printf(
        "op,nranks,bytes,count,dtype,redop,root,algo,oop_us,oop_algbw,oop_busbw,"
        "oop_wrong,ip_us,ip_algbw,ip_busbw,ip_wrong\n");
    std::fflush(stdout);
    return;
  }
  int version = 0;
  loomGetVersion(&version);
  std::printf("# loom-bench %s nranks %d version %d.%d.%d\n", benchOpName(opts_.op), nranks_,
              version / 10000, version / 100 % 100, version % 100);
  std::printf(
      "# minBytes %zu maxBytes %zu step: %g(factor) warmup iters: %d iters: %d "
      "validation: %d\n#\n",
      opts_.minBytes, opts_.maxBytes, opts_.stepFactor, opts_.warmupIters, opts_.iters,
      opts_.check ? 1 : 0);
  // Widths: the fixed columns take 52 characters, each pass 32 (see the formats above).
  std::printf("#%51s%22s%32s\n", "", "out-of-place", "in-place");
  std::printf("#%11s  %12s  %8s  %6s  %6s", "size", "count", "type", "redop", "root");
  for (int i = 0; i < 2; ++i) std::printf(kPassFormat, "time", "algbw", "busbw", "#wrong");
  std::printf("  algo\n");
  std::printf("#%11s  %12s  %8s  %6s  %6s", "(B)", "(elements)", "", "", "");
  std::printf(kPassFormat, "(us)", "(GB/s)", "(GB/s)", "");
  std::printf("  %7s  %6s  %6s\n", "(us)", "(GB/s)", "(GB/s)");
  std::fflush(stdout);
}

std::string formatTime(double us) {
  char text[32];
  if (us >= 10000.0) {
    std::snprintf(text, sizeof(text), "%.0f", us);
  } else if (us >= 100.0) {
    std::snprintf(text, sizeof(text), "%.1f", us);
  } else {
    std::snprintf(text, sizeof(text), "%.2f", us);
  }
  return text;
}

std::string formatFixed(double v, int decimals) {
  char text[32];
  std::snprintf(text, sizeof(text), "%.*f", decimals, v);
  return text;
}

void Runner::printRow(const Row& row) const {
  const char* redop = benchOpReduces(opts_.op) ? redOpName(row.redop) : "none";
  const std::string root = benchOpHasRoot(opts_.op) ? std::to_string(opts_.root) : "-1";
  auto wrongText = [](const PassResult& p) {
    return p.checked ? std::to_string(p.wrong) : std::string("N/A");
  };
  if (opts_.csv) {
    auto pass = [&](const PassResult& p) {
      if (!p.ran) return std::string("nan,nan,nan,nan");
      return formatFixed(p.seconds * 1e6, 3) + "," + formatFixed(p.algbw, 4) + "," +
             formatFixed(p.busbw, 4) + "," + (p.checked ? std::to_string(p.wrong) : "nan");
    };
    std::printf("%s,%d,%zu,%zu,%s,%s,%s,%s,%s,%s\n", benchOpName(opts_.op), nranks_, row.bytes,
                row.elems, typeName(row.dtype), redop, root.c_str(), row.algo,
                pass(row.oop).c_str(), pass(row.ip).c_str());
    std::fflush(stdout);
    return;
  }
  std::printf(kFixedFormat, std::to_string(row.bytes).c_str(), std::to_string(row.elems).c_str(),
              typeName(row.dtype), redop, root.c_str());
  for (const PassResult* p : {&row.oop, &row.ip}) {
    if (!p->ran) {
      std::printf(kPassFormat, "N/A", "N/A", "N/A", "N/A");
      continue;
    }
    std::printf(kPassFormat, formatTime(p->seconds * 1e6).c_str(), formatFixed(p->algbw, 2).c_str(),
                formatFixed(p->busbw, 2).c_str(), wrongText(*p).c_str());
  }
  std::printf("  %s\n", row.algo);
  std::fflush(stdout);
}

void Runner::printFooter() const {
  if (opts_.csv) return;
  std::printf("# Out of bounds values : %lld %s\n", static_cast<long long>(totalWrong_),
              totalWrong_ == 0 ? "OK" : "FAILED");
  std::printf("# Avg bus bandwidth    : %g\n#\n", busbwCount_ ? busbwSum_ / busbwCount_ : 0.0);
  std::fflush(stdout);
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

  loomComm_t comm = nullptr;
  checkCall(loomCommInitFromEnv(&comm, nullptr), "loomCommInitFromEnv", comm);
  int rank = 0;
  int nranks = 1;
  checkCall(loomCommUserRank(comm, &rank), "loomCommUserRank", comm);
  checkCall(loomCommCount(comm, &nranks), "loomCommCount", comm);
  if (opts.root >= nranks) {
    if (rank == 0) std::fprintf(stderr, "loom-bench: root %d >= nranks %d\n", opts.root, nranks);
    loomCommDestroy(comm);
    return 2;
  }
  int status = Runner(opts, comm, rank, nranks).run();
  checkCall(loomCommDestroy(comm), "loomCommDestroy", nullptr);
  return status;
}

}  // namespace
}  // namespace loom::bench

int main(int argc, char** argv) { return loom::bench::benchMain(argc, argv); }
