// loom-hetero-bench: a collective on a heterogeneous communicator against what a user does
// without Loom (a device rank copies what it sends to host memory, the same collective on a host
// communicator of all ranks, the device rank copies back what it receives, one step after the
// other), with the two parts of the bound measured in the same run: the device ranks' own
// device<->host copies of those bytes, and the CPU ranks' own collective over the same bytes.
//
//   loomrun -n 4 -- loom-hetero-bench --placement GCCC [--op allreduce] [--root R] [-b 8]
//                     [-e 256M] [-f 4] [-n 20] [-w 5]
//
// One letter per rank: G a CUDA rank (device memory, a stream of its own), E an emulated-device
// rank (the plug-in named by LOOM_DEVICE_PLUGIN, else the one beside this build or installation),
// C a CPU rank. --op: allreduce (default),
// broadcast, reduce, allgather, reducescatter, a comma list of them, or all (one table each);
// bytes as nccl-tests count them (hetero_ops.hpp; the header line says which), float32, sum.
// Broadcast's and reduce's root: --root, by default the first device rank. Times are the
// slowest rank's mean per call. Every size's result is checked once on every rank, bit-exact.
// LOOM_CLUSTER_SPLIT and LOOM_HETERO_ALGO apply to the heterogeneous communicator only: the host
// communicators of the staged and cpu columns are made without them (they would split and compose
// too, and a split sized for all ranks does not fit the CPU ranks' communicator).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "bench_memory.hpp"
#include "hetero_ops.hpp"
#include "loom/loom.h"
#include "tool_cli.hpp"

namespace {

using Clock = std::chrono::steady_clock;
using loom::tool::HeteroOp;
using loom::tool::OpShape;

constexpr const char* kTool = "loom-hetero-bench";
[[noreturn]] void die(const std::string& why) { loom::tool::die(kTool, why); }
void ok(loomResult_t r, const char* what) { loom::tool::ok(kTool, r, what); }
size_t parseSize(const char* text) { return loom::tool::sizeArg(kTool, text); }

using loom::tool::Memory;

std::unique_ptr<Memory> memoryFor(char letter) {
  if (letter == 'C') return std::make_unique<loom::tool::HostMemory>();
  // Every E rank on the emulated device 0, as this tool always did.
  if (letter == 'E') return std::make_unique<loom::tool::PluginMemory>(kTool, "loom-emu", 0);
#ifdef LOOM_HAVE_CUDA
  if (letter == 'G') return loom::tool::makeCudaMemory(kTool, -1);
  die("placement letter G needs a build with CUDA");
#else
  die(std::string("placement letter ") + letter + " is not G, E or C (G needs a CUDA build)");
#endif
}

// The slowest rank's value.
double slowest(double mine, loomComm_t world) {
  double v = mine;
  ok(loomAllReduce(&v, &v, 1, loomFloat64, loomMax, world, nullptr), "max");
  return v;
}

template <typename Body>
double timed(int warmup, int iters, loomComm_t world, Body body) {
  for (int i = 0; i < warmup; ++i) body();
  ok(loomBarrier(world, nullptr), "barrier");
  Clock::time_point start = Clock::now();
  for (int i = 0; i < iters; ++i) body();
  double us = std::chrono::duration<double, std::micro>(Clock::now() - start).count() / iters;
  return slowest(us, world);
}

constexpr const char* kUsage =
    "usage: loom-hetero-bench --placement LETTERS [--op OPS] [--root R] [-b MIN] [-e MAX] [-f F]\n"
    "                         [-n N] [-w W]\n"
    "  --placement  one letter per rank: G CUDA, E emulated device (LOOM_DEVICE_PLUGIN), C CPU\n"
    "  --op         allreduce (default), broadcast, reduce, allgather, reducescatter, a comma\n"
    "               list of them, or all: one table each\n"
    "  --root       broadcast's and reduce's root (default: the first G or E rank, else 0)\n"
    "  -b, -e       smallest and largest bytes, as nccl-tests count them for the op (8, 256M)\n"
    "  -f           factor between sizes (4)\n"
    "  -n, -w       timed and warm-up calls per size (20, a quarter of n from 64 MiB; 5)\n";

std::vector<HeteroOp> parseOps(const std::string& list) {
  if (list == "all")
    return {HeteroOp::kAllReduce, HeteroOp::kBroadcast, HeteroOp::kReduce, HeteroOp::kAllGather,
            HeteroOp::kReduceScatter};
  std::vector<HeteroOp> ops;
  size_t start = 0;
  while (start <= list.size()) {
    size_t end = std::min(list.find(',', start), list.size());
    HeteroOp op;
    if (!loom::tool::parseHeteroOp(list.substr(start, end - start), &op))
      die("--op: '" + list.substr(start, end - start) +
          "' is not allreduce, broadcast, reduce, allgather, reducescatter or all");
    ops.push_back(op);
    start = end + 1;
  }
  return ops;
}

// One run's ranks, communicators and buffers: out == in and hostOut == hostIn where no op runs
// out of place. Device ranks' in and out are device memory, their host ones pinned.
struct Bench {
  std::string placement;
  int rank = 0, nranks = 0, root = 0, iters = 0, warmup = 0;
  char me = 'C';
  Memory* mem = nullptr;
  loomComm_t world = nullptr, hetero = nullptr, cpus = nullptr;
  int ncpus = 0;
  void* in = nullptr;
  void* out = nullptr;
  float* hostIn = nullptr;
  float* hostOut = nullptr;
};

void printHeader(const Bench& b, HeteroOp op) {
  const char* name = loom::tool::heteroOpName(op);
  if (op == HeteroOp::kAllReduce) {
    std::printf("# loom-hetero-bench: allreduce float32 sum, placement %s, %d iterations\n",
                b.placement.c_str(), b.iters);
    std::printf(
        "# time per call (us), slowest rank; loom-q4 = four calls back to back, one "
        "synchronization; staged = copy to host, Loom's CPU allreduce "
        "over all ranks, copy back; copies = a device rank's D2H+H2D of its bytes; "
        "cpu = the CPU ranks' own allreduce\n");
  } else {
    const OpShape s = loom::tool::shapeFor(op, 0, b.nranks, b.root);
    std::string root;
    if (s.rooted()) root = ", root " + std::to_string(b.root) + " (" + b.placement[b.root] + ")";
    std::printf("# loom-hetero-bench: %s float32%s%s, placement %s, %d iterations; bytes = %s\n",
                name, s.reduces() ? " sum" : "", root.c_str(), b.placement.c_str(), b.iters,
                loom::tool::heteroOpBytes(op));
    std::printf(
        "# time per call (us), slowest rank; loom-q4 = four calls back to back, one "
        "synchronization; staged = a device rank copies what it sends to host, Loom's CPU %s "
        "over all ranks, it copies back what it receives; copies = those copies alone; "
        "cpu = the CPU ranks' own %s over the same bytes%s\n",
        name, name, s.rooted() ? " (root: their first)" : "");
  }
  std::printf("%12s %12s %12s %12s %12s %12s %10s %10s %s\n", "bytes", "loom", "loom-q4", "staged",
              "copies", "cpu", "staged/x", "x/bound", "check");
}

// Checks the heterogeneous call once (on a CUDA rank the upload is still queued on the stream
// when the collective is called, and the download is queued behind it: both orders are the
// stream's); out of place, the input must be left as it was. Returns the wrong values, all ranks.
double check(const Bench& b, const OpShape& s, void* out, float* hostOut) {
  const char* name = loom::tool::heteroOpName(s.op);
  Memory& mem = *b.mem;
  loom::tool::fillInput(s, b.rank, b.hostIn);
  mem.toDeviceQueued(b.in, b.hostIn, s.inputElems() * sizeof(float));
  if (!s.inPlace()) {
    std::fill(hostOut, hostOut + s.outputElems(), -1.0f);
    mem.toDeviceQueued(out, hostOut, s.outputElems() * sizeof(float));
  }
  ok(loom::tool::runOp(s, b.in, out, b.hetero, mem.stream()), name);
  std::vector<float> got(s.outputElems());
  mem.toHost(got.data(), out, got.size() * sizeof(float));
  long bad = loom::tool::countWrong(s, b.rank, got.data());
  if (!s.inPlace()) {
    std::vector<float> sent(s.inputElems()), want(s.inputElems());
    mem.toHost(sent.data(), b.in, sent.size() * sizeof(float));
    loom::tool::fillInput(s, b.rank, want.data());
    for (size_t i = 0; i < sent.size(); ++i) bad += sent[i] != want[i];
  }
  return slowest(static_cast<double>(bad), b.world);
}

// One table: every size of op. False where a result was wrong.
bool benchOp(const Bench& b, HeteroOp op, size_t minBytes, size_t maxBytes, int factor) {
  const char* name = loom::tool::heteroOpName(op);
  if (b.rank == 0) printHeader(b, op);
  Memory& mem = *b.mem;
  const bool inPlace = loom::tool::shapeFor(op, 0, b.nranks, b.root).inPlace();
  void* out = inPlace ? b.in : b.out;
  float* hostOut = inPlace ? b.hostIn : b.hostOut;
  const int warmup = b.warmup;
  for (size_t bytes = minBytes; bytes <= maxBytes; bytes *= factor) {
    const OpShape s = loom::tool::shapeFor(op, bytes, b.nranks, b.root);
    const OpShape cpuShape = loom::tool::shapeFor(op, bytes, std::max(1, b.ncpus), 0);
    const double anyBad = check(b, s, out, hostOut);

    const int n = bytes >= (64u << 20) ? std::max(3, b.iters / 4) : b.iters;
    double loomUs = timed(warmup, n, b.world, [&] {
      ok(loom::tool::runOp(s, b.in, out, b.hetero, mem.stream()), name);
      mem.synchronize();
    });
    // Back to back: kQueued calls, one synchronization. A device rank whose calls return once
    // enqueued overlaps the next call's copies and exchange with the previous one's.
    constexpr int kQueued = 4;
    double queuedUs = timed(warmup, std::max(1, n / kQueued), b.world,
                            [&] {
                              for (int q = 0; q < kQueued; ++q)
                                ok(loom::tool::runOp(s, b.in, out, b.hetero, mem.stream()), name);
                              mem.synchronize();
                            }) /
                      kQueued;
    // By hand: what this rank sends to host memory, the host collective, what it receives back.
    const size_t sendBytes = s.sendElems(b.rank) * sizeof(float);
    const size_t recvBytes = s.recvElems(b.rank) * sizeof(float);
    auto copyIn = [&] {
      if (sendBytes > 0) mem.toHost(b.hostIn, b.in, sendBytes);
    };
    auto copyOut = [&] {
      if (recvBytes > 0) mem.toDevice(out, hostOut, recvBytes);
    };
    double stagedUs = timed(warmup, n, b.world, [&] {
      if (b.me == 'C') {
        ok(loom::tool::runOp(s, b.in, out, b.world, nullptr), name);
        return;
      }
      copyIn();
      ok(loom::tool::runOp(s, b.hostIn, hostOut, b.world, nullptr), name);
      copyOut();
    });
    double copiesUs = timed(warmup, n, b.world, [&] {
      if (b.me == 'C') return;
      copyIn();
      copyOut();
    });
    double cpuUs = timed(warmup, n, b.world, [&] {
      if (b.cpus != nullptr) ok(loom::tool::runOp(cpuShape, b.in, out, b.cpus, nullptr), name);
    });
    double bound = std::max(copiesUs, cpuUs);
    if (b.rank == 0)
      std::printf("%12zu %12.1f %12.1f %12.1f %12.1f %12.1f %10.2f %10.2f %s\n", s.bytes(), loomUs,
                  queuedUs, stagedUs, copiesUs, cpuUs, stagedUs / loomUs, loomUs / bound,
                  anyBad == 0 ? "ok" : "WRONG");
    if (anyBad != 0) return false;
    if (bytes > maxBytes / factor) break;
  }
  return true;
}

}  // namespace

// LOOM_CLUSTER_SPLIT and LOOM_HETERO_ALGO as the user gave them, taken out of the environment
// at construction and put back only while the heterogeneous communicator is made.
class HeteroSettings {
 public:
  HeteroSettings() {
    for (Setting& s : settings_) {
      const char* value = std::getenv(s.name);
      s.set = value != nullptr;
      if (s.set) s.value = value;
    }
    clear();
  }
  void apply() const {
    for (const Setting& s : settings_)
      if (s.set) setenv(s.name, s.value.c_str(), 1);
  }
  void clear() const {
    for (const Setting& s : settings_) unsetenv(s.name);
  }

 private:
  struct Setting {
    const char* name;
    bool set = false;
    std::string value;
  };
  Setting settings_[2] = {{"LOOM_CLUSTER_SPLIT"}, {"LOOM_HETERO_ALGO"}};
};

// The world (the staged column's host communicator), the heterogeneous communicator on each
// rank's device and the CPU ranks' own (the cpu column); sets the rank, the root (a device rank
// unless given: the case where its data crosses a device boundary) and this rank's memory. Each
// communicator reads the environment as it is made: HeteroSettings leaves the two settings to
// the heterogeneous one.
std::unique_ptr<Memory> makeCommunicators(Bench& b, int root) {
  HeteroSettings hetero;
  ok(loomCommInitFromEnv(&b.world, nullptr), "init");
  loomCommUserRank(b.world, &b.rank);
  loomCommCount(b.world, &b.nranks);
  const std::string& placement = b.placement;
  if (static_cast<int>(placement.size()) != b.nranks)
    die("--placement needs one letter per rank (" + std::to_string(b.nranks) + ")");
  if (root < 0) root = std::max<int>(0, static_cast<int>(placement.find_first_not_of('C')));
  if (root >= b.nranks) die("--root " + std::to_string(root) + " is not a rank");
  b.root = root;
  b.me = placement[b.rank];
  b.ncpus = static_cast<int>(std::count(placement.begin(), placement.end(), 'C'));
  std::unique_ptr<Memory> mem = memoryFor(b.me);
  b.mem = mem.get();
  loomConfig_t config = LOOM_CONFIG_INITIALIZER;
  const std::string device = mem->device();
  config.device = device.c_str();
  hetero.apply();
  ok(loomCommSplit(b.world, 0, b.rank, &b.hetero, &config), "heterogeneous communicator");
  hetero.clear();
  ok(loomCommSplit(b.world, b.me == 'C' ? 0 : LOOM_SPLIT_NOCOLOR, b.rank, &b.cpus, nullptr),
     "cpu split");
  return mem;
}

int main(int argc, char** argv) {
  Bench b;
  std::vector<HeteroOp> ops = {HeteroOp::kAllReduce};
  size_t minBytes = 8, maxBytes = 256u << 20;
  int factor = 4, root = -1;
  b.iters = 20;
  b.warmup = 5;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto next = [&]() -> const char* {
      if (i + 1 >= argc) die(a + " needs a value");
      return argv[++i];
    };
    if (a == "-h" || a == "--help") {
      std::fputs(kUsage, stdout);
      return 0;
    } else if (a == "--placement") {
      b.placement = next();
    } else if (a == "--op") {
      ops = parseOps(next());
    } else if (a == "--root") {
      root = std::atoi(next());
    } else if (a == "-b") {
      minBytes = parseSize(next());
    } else if (a == "-e") {
      maxBytes = parseSize(next());
    } else if (a == "-f") {
      factor = std::atoi(next());
    } else if (a == "-n") {
      b.iters = std::atoi(next());
    } else if (a == "-w") {
      b.warmup = std::atoi(next());
    } else {
      std::fputs(kUsage, stderr);
      return 2;
    }
  }
  if (factor < 2 || minBytes == 0) die("-f needs a factor of at least 2, -b at least 1 byte");
  if (b.iters < 1 || b.warmup < 0) die("-n needs at least 1 call, -w at least 0");
  std::unique_ptr<Memory> mem = makeCommunicators(b, root);

  // Every buffer holds the largest size; allgather and reduce-scatter need one float per rank.
  const size_t cap = std::max(maxBytes, sizeof(float) * b.nranks);
  const bool outOfPlace = std::any_of(ops.begin(), ops.end(), [&](HeteroOp op) {
    return !loom::tool::shapeFor(op, 0, b.nranks, b.root).inPlace();
  });
  b.in = mem->allocate(cap);
  b.out = outOfPlace ? mem->allocate(cap) : b.in;
  b.hostIn = static_cast<float*>(mem->allocateHost(cap));
  b.hostOut = outOfPlace ? static_cast<float*>(mem->allocateHost(cap)) : b.hostIn;
  int status = 0;
  for (HeteroOp op : ops)
    if (!benchOp(b, op, minBytes, maxBytes, factor)) {
      status = 1;
      break;
    }
  if (b.cpus != nullptr) loomCommDestroy(b.cpus);
  loomCommDestroy(b.hetero);
  loomCommDestroy(b.world);
  return status;
}
