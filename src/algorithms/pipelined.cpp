// "pipelined": reduce-scatter then all-gather inside the shared arena, chunk by chunk.
// Per step: (1) copy-in: every rank stages its chunk; (2) reduce-slice: rank i reduces slice i of
// the chunk across all ranks' slots into its output slot; (3) copy-out: every rank copies all
// reduced slices into its result (for reduce: only the root). Each byte is read about 3 times and
// written about twice per rank, independent of the rank count: the bandwidth algorithm.
#include <vector>

#include "algorithms/context.hpp"
#include "algorithms/families.hpp"
#include "algorithms/partition.hpp"
#include "algorithms/shm_stage.hpp"
#include "base/dtype.hpp"

namespace loom {

namespace {

void reduceThenGather(const AlgoContext& ctx, const CollArgs& a, bool everyoneGets) {
  size_t esize = dtypeSize(a.dtype);
  size_t chunk = ctx.arena->slotBytes() / esize;
  int divisor = averageDivisor(a.op, ctx.nranks);
  loomRedOp_t op = kernelOp(a.op);
  bool gets = everyoneGets || ctx.rank == a.root;
  std::vector<const void*>& srcs = *ctx.sources;
  for (size_t c = 0; c < chunkCount(a.count, chunk); ++c) {
    Range r = chunkOf(a.count, chunk, c);
    ShmStage stage(ctx);
    const char* send = static_cast<const char*>(a.send) + r.offset * esize;
    char* recv = static_cast<char*>(a.recv) + r.offset * esize;
    ctx.device->copy(stage.myIn(), send, r.count * esize);
    stage.publishIn();
    stage.waitAllIn();

    Range mine = sliceOf(r.count, ctx.nranks, ctx.rank);
    size_t mineBytes = mine.offset * esize;
    for (int i = 0; i < ctx.nranks; ++i) srcs[i] = stage.in(i) + mineBytes;
    ctx.device->reduce(stage.myOut() + mineBytes, srcs.data(), ctx.nranks, mine.count, a.dtype, op,
                       a.accum, divisor);
    stage.publishRed();

    if (gets) {
      stage.waitAllRed();
      for (int i = 0; i < ctx.nranks; ++i) {
        Range slice = sliceOf(r.count, ctx.nranks, i);
        ctx.copyOut(recv + slice.offset * esize, stage.out(i) + slice.offset * esize,
                    slice.count * esize, a.count * esize);
      }
    }
    stage.publishDone();
  }
}

void allReducePipelined(const AlgoContext& ctx, const CollArgs& a) {
  reduceThenGather(ctx, a, true);
}
void reducePipelined(const AlgoContext& ctx, const CollArgs& a) { reduceThenGather(ctx, a, false); }

}  // namespace

void registerPipelinedAlgorithms(std::vector<Algorithm>& out) {
  out.push_back({loomFuncAllReduce, "pipelined", allReducePipelined, true, true});
  out.push_back({loomFuncReduce, "pipelined", reducePipelined, true, true});
}

}  // namespace loom
