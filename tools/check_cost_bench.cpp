// loom-check-cost: what the default mismatch check (LOOM_CHECK=1) costs, measured in one job. Every
// rank holds two communicators over the same ranks, one with the check and one without (split
// from the first with LOOM_CHECK=0 set in between), and times blocks of calls on each in turn:
// the same processes, cores, buffers and moment, so placement and machine noise, which move
// sub-microsecond times by more than the few percent being measured from one job to the next,
// fall on both sides alike. The order of the two blocks alternates round by round.
//
//   loomrun -n 4 -- loom-check-cost [--op allreduce] [-b 8] [-e 64M] [-f 8] [-n 200] [-r 15]
//                                   [--null]   (the check off on both sides: the noise floor)
//
// Per size: the median over rounds of the per-call time (rank 0's, after a barrier) with the
// check off and on, the median of the per-round ratios on/off, and their spread (quartiles).
// Results are not checked here (loom-bench -c 1 and the tests do that).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "loom/loom.h"
#include "tool_cli.hpp"

namespace {

using Clock = std::chrono::steady_clock;

constexpr const char* kTool = "loom-check-cost";
[[noreturn]] void die(const std::string& why) { loom::tool::die(kTool, why); }
void ok(loomResult_t r, const char* what) { loom::tool::ok(kTool, r, what); }
size_t parseSize(const char* text) { return loom::tool::sizeArg(kTool, text); }

struct Options {
  std::string op = "allreduce";
  size_t minBytes = 8, maxBytes = 64 << 20;
  int factor = 8, iters = 200, rounds = 15, warmup = 20;
  bool null = false;  // both communicators without the check: the measurement's noise floor
};

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    std::string flag = argv[i];
    if (flag == "-h" || flag == "--help") {
      std::printf(
          "usage: loomrun -n N -- loom-check-cost [--op allreduce|broadcast|reduce|allgather|"
          "reducescatter|alltoall] [-b 8] [-e 64M] [-f 8] [-n 200] [-r 15] [-w 20] [--null]\n"
          "  --null: the check off on both sides (what the same measurement shows for no "
          "change)\n");
      std::exit(0);
    }
    if (flag == "--null") {
      o.null = true;
      continue;
    }
    if (i + 1 >= argc) die("flag " + flag + " needs a value");
    const char* v = argv[++i];
    if (flag == "--op")
      o.op = v;
    else if (flag == "-b")
      o.minBytes = parseSize(v);
    else if (flag == "-e")
      o.maxBytes = parseSize(v);
    else if (flag == "-f")
      o.factor = std::atoi(v);
    else if (flag == "-n")
      o.iters = std::atoi(v);
    else if (flag == "-r")
      o.rounds = std::atoi(v);
    else if (flag == "-w")
      o.warmup = std::atoi(v);
    else
      die("unknown flag " + flag);
  }
  if (o.factor < 2 || o.iters < 1 || o.rounds < 1 || o.warmup < 0) die("bad -f, -n, -r or -w");
  return o;
}

// One call of the collective on `count` floats per rank's block.
loomResult_t call(const std::string& op, const float* send, float* recv, size_t count,
                  loomComm_t comm) {
  if (op == "allreduce") return loomAllReduce(send, recv, count, loomFloat, loomSum, comm, nullptr);
  if (op == "broadcast") return loomBroadcast(send, recv, count, loomFloat, 0, comm, nullptr);
  if (op == "reduce") return loomReduce(send, recv, count, loomFloat, loomSum, 0, comm, nullptr);
  if (op == "allgather") return loomAllGather(send, recv, count, loomFloat, comm, nullptr);
  if (op == "reducescatter")
    return loomReduceScatter(send, recv, count, loomFloat, loomSum, comm, nullptr);
  if (op == "alltoall") return loomAllToAll(send, recv, count, loomFloat, comm, nullptr);
  die("unknown --op " + op);
}

double quantile(std::vector<double> v, double q) {
  std::sort(v.begin(), v.end());
  double pos = q * static_cast<double>(v.size() - 1);
  size_t lo = static_cast<size_t>(pos);
  size_t hi = std::min(lo + 1, v.size() - 1);
  return v[lo] + (v[hi] - v[lo]) * (pos - static_cast<double>(lo));
}

}  // namespace

int main(int argc, char** argv) {
  Options o = parse(argc, argv);
  setenv("LOOM_CHECK", o.null ? "0" : "1", 1);
  loomComm_t checked = nullptr, unchecked = nullptr;
  ok(loomCommInitFromEnv(&checked, nullptr), "init");
  setenv("LOOM_CHECK", "0", 1);
  int rank = 0, nranks = 0;
  ok(loomCommUserRank(checked, &rank), "rank");
  ok(loomCommCount(checked, &nranks), "count");
  ok(loomCommSplit(checked, 0, rank, &unchecked, nullptr), "split (LOOM_CHECK=0)");

  // Blocks of nranks elements (alltoall, reduce-scatter) need room for nranks times the size.
  size_t maxElems = o.maxBytes / sizeof(float);
  std::vector<float> send(maxElems * nranks, 1.0f), recv(maxElems * nranks, 0.0f);
  bool perPeer = o.op == "reducescatter" || o.op == "alltoall";
  if (rank == 0) {
    std::printf("# loom-check-cost: %s, float32, %d ranks, %d rounds of %d calls per side%s\n",
                o.op.c_str(), nranks, o.rounds, o.iters, o.null ? " (--null: both off)" : "");
    std::printf(
        "| collective | ranks | bytes | off (us) | on (us) | on/off (median of rounds) |"
        " quartiles of on/off |\n|---|---:|---:|---:|---:|---:|---|\n");
  }
  for (size_t bytes = o.minBytes; bytes <= o.maxBytes; bytes *= o.factor) {
    size_t count = std::max<size_t>(bytes / sizeof(float), 1);
    if (perPeer) count = std::max<size_t>(count / nranks, 1);
    auto block = [&](loomComm_t comm, int n) {
      float one = 1.0f;
      ok(loomAllReduce(&one, &one, 1, loomFloat, loomSum, unchecked, nullptr), "sync");
      Clock::time_point t0 = Clock::now();
      for (int i = 0; i < n; ++i) ok(call(o.op, send.data(), recv.data(), count, comm), "call");
      return std::chrono::duration<double, std::micro>(Clock::now() - t0).count() / n;
    };
    // Fewer calls for large sizes: about the same time per round at every size.
    int iters = std::max(1, o.iters / static_cast<int>(std::max<size_t>(1, bytes >> 18)));
    block(checked, o.warmup), block(unchecked, o.warmup);
    std::vector<double> on, off, ratio;
    for (int r = 0; r < o.rounds; ++r) {
      double a, b;
      if (r % 2 == 0) {
        a = block(checked, iters);
        b = block(unchecked, iters);
      } else {
        b = block(unchecked, iters);
        a = block(checked, iters);
      }
      on.push_back(a), off.push_back(b), ratio.push_back(a / b);
    }
    if (rank == 0) {
      std::printf("| %s | %d | %zu | %.3f | %.3f | %.3f | %.3f-%.3f |\n", o.op.c_str(), nranks,
                  count * sizeof(float) * (perPeer ? nranks : 1), quantile(off, 0.5),
                  quantile(on, 0.5), quantile(ratio, 0.5), quantile(ratio, 0.25),
                  quantile(ratio, 0.75));
      std::fflush(stdout);
    }
  }
  ok(loomCommDestroy(unchecked), "destroy");
  ok(loomCommDestroy(checked), "destroy");
  return 0;
}
