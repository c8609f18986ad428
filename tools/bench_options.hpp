// Command line of loom-bench (`loom-bench OP [flags]`, nccl-tests' flags) and the byte
// conventions that turn a size on that command line into the arguments of one Loom call.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "loom/loom.h"

namespace loom::bench {

enum class BenchOp {
  kAllReduce,
  kAllGather,
  kReduceScatter,
  kBroadcast,
  kReduce,
  kAllToAll,
  kGather,
  kScatter,
  kSendRecv,
};

const char* benchOpName(BenchOp op);
loomFunc_t benchOpFunc(BenchOp op);
bool benchOpReduces(BenchOp op);  // takes a loomRedOp_t
bool benchOpHasRoot(BenchOp op);
bool benchOpHasInPlace(BenchOp op);
// busbw = algbw * factor: the bandwidth each rank's link would need, so that results compare
// across rank counts (nccl-tests' convention).
double busFactor(BenchOp op, int nranks);

// Where the buffers live. Auto: CUDA when this build has it and a device is visible, else host.
// Plugin: a device plug-in's kind (BenchOptions::deviceSpec), every rank on one of its devices.
enum class DeviceChoice { kAuto, kCpu, kCuda, kPlugin };

struct BenchOptions {
  BenchOp op = BenchOp::kAllReduce;
  size_t minBytes = 8;
  size_t maxBytes = size_t{256} << 20;
  double stepFactor = 2;
  int iters = 20;
  int warmupIters = 5;
  int aggIters = 1;       // -m: calls per timed step, issued in one group
  int average = 3;        // -a: time reported 0 rank 0, 1 mean, 2 fastest, 3 slowest rank
  bool blocking = false;  // -z 1: wait for each call's completion before issuing the next
  bool check = true;
  std::vector<loomDataType_t> dtypes{loomFloat};
  std::vector<loomRedOp_t> redops{loomSum};
  int root = 0;
  bool csv = false;      // --csv alone: CSV on stdout instead of the table
  std::string csvPath;   // --csv FILE: the table on stdout, CSV into FILE
  std::string jsonPath;  // -J FILE: the run as JSON (nccl-tests' -J)
  std::string plotPath;  // --plot FILE.png: busbw against size, drawn by bench/plot.py
  // One line each for nccl-tests flags that mean nothing to Loom (-g 2: one device per process).
  std::vector<std::string> notes;
  DeviceChoice device = DeviceChoice::kAuto;
  std::string deviceSpec;  // kPlugin: "loom-emu" or "loom-emu:1"
  // --placement: each rank's device ("cuda", "cpu", "loom-emu"), one per rank, in rank order.
  std::vector<std::string> placement;
  bool graph = false;   // CUDA only: time the -n calls as one captured CUDA graph
  bool vsNccl = false;  // CUDA only: time NCCL on the same buffers too
  bool window = false;  // CUDA only: the buffers are registered windows (loomCommWindowRegister)
  // CUDA only: each rank registers the buffers alone (loomCommRegister; NCCL: ncclCommRegister)
  bool registerBuffers = false;
  // CUDA only, eager: N > 0 times each size's calls again while bf16 GEMMs of N x N matrices
  // (cuBLAS, loaded at run time) run on a stream of their own, and reports what each side lost.
  int overlapGemm = 0;
};

enum class ParseOutcome { kRun, kHelp, kVersion, kUsageError };

struct ParseResult {
  ParseOutcome outcome = ParseOutcome::kUsageError;
  std::string error;  // for kUsageError, without the "loom-bench: " prefix
  BenchOptions options;
};

ParseResult parseCommandLine(int argc, const char* const* argv);
// "-e 64M needs 128 MiB per rank ..." when the buffers of `localRanks` ranks would not fit in
// `availableBytes` of memory; "" when they fit.
std::string memoryShortfall(const BenchOptions& options, size_t availableBytes, int localRanks,
                            const char* where);
// "1.5 GiB", "64 MiB", "8 B".
std::string humanBytes(double bytes);
// nccl-tests' spellings, as the table and the CSV print them.
const char* typeName(loomDataType_t type);
const char* redOpName(loomRedOp_t op);
std::string usageText();
// --placement's value: letters (G a CUDA GPU, C the CPU, E the emulated device loom-emu, as
// loom-hetero-bench takes them) or a comma list of device specs; false for anything else.
bool parsePlacement(const std::string& text, std::vector<std::string>* devices);

// "8", "64K", "1.5M", "2G" (binary multiples); nothing else.
bool parseSize(const std::string& text, size_t* bytes);

// The sizes a run visits: minBytes, then times stepFactor while <= maxBytes, and maxBytes itself
// where the factor steps over it (-b 8 -e 64M -f 4 ends at 64 MiB, not 32 MiB).
std::vector<size_t> sizeSteps(const BenchOptions& options);

// One call's shape. `count` is the count argument of the Loom call; the buffers hold sendElems
// and recvElems elements; totalElems is what the size column reports (the whole gathered array
// for allgather, reducescatter, gather and scatter, the whole send buffer for alltoall).
struct CallShape {
  size_t count = 0;
  size_t sendElems = 0;
  size_t recvElems = 0;
  size_t totalElems = 0;
};

// A zero count means the size is too small for this op, type and rank count: the row is skipped.
CallShape callShape(BenchOp op, size_t bytes, size_t elemSize, int nranks);

}  // namespace loom::bench
