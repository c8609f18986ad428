// "pipelined": reduce-scatter then all-gather inside the shared arena, chunk by chunk.
// Per chunk k: (1) copy-in: every rank stages its part of chunk k; (2) reduce-slice: rank i reduces
// slice i of chunk k across all ranks' slots into its output slot; (3) copy-out: every rank copies
// all reduced slices into its result (for reduce: only the root). Each byte is read about 3 times
// and written about twice per rank, independent of the rank count: the bandwidth algorithm.
// Chunks overlap by one step: a rank stages chunk k+1 right after reducing its slice of chunk k and
// copies chunk k out only after seeing every rank's chunk k+1 staged, which implies every slice of
// k is reduced. So each chunk costs one wait for all ranks, not two: under CPU contention a call's
// time follows its count of all-rank waits (each needs every rank to have been scheduled), not its
// bytes. Slot reuse (two steps back) is safe without ShmStage's own wait: a rank stages k+1 after
// every rank staged k, hence after every rank's reads of the inputs of k-1; it reduces into the
// output slot of k+1 after every rank staged k+1, hence after every rank copied k-1 out.
#include <optional>
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
  size_t chunks = chunkCount(a.count, chunk);
  int divisor = averageDivisor(a.op, ctx.nranks);
  loomRedOp_t op = kernelOp(a.op);
  bool gets = everyoneGets || ctx.rank == a.root;
  std::vector<const void*>& srcs = *ctx.sources;
  auto stageIn = [&](ShmStage& stage, size_t c) {
    Range r = chunkOf(a.count, chunk, c);
    ctx.device->copy(stage.myIn(), static_cast<const char*>(a.send) + r.offset * esize,
                     r.count * esize);
    stage.publishIn();
    stage.waitAllIn();
  };
  std::optional<ShmStage> stages[2];  // chunk c's step in stages[c % 2] (not movable)
  stageIn(stages[0].emplace(ctx), 0);
  for (size_t c = 0; c < chunks; ++c) {
    std::optional<ShmStage>& stage = stages[c % 2];
    Range r = chunkOf(a.count, chunk, c);
    Range mine = sliceOf(r.count, ctx.nranks, ctx.rank);
    size_t mineBytes = mine.offset * esize;
    for (int i = 0; i < ctx.nranks; ++i) srcs[i] = stage->in(i) + mineBytes;
    ctx.device->reduce(stage->myOut() + mineBytes, srcs.data(), ctx.nranks, mine.count, a.dtype, op,
                       a.accum, divisor);

    if (c + 1 < chunks) {
      // Every rank's `in` of c+1: every slice of c is reduced.
      stageIn(stages[(c + 1) % 2].emplace(ctx, ShmStage::Reuse::kOrderedByCaller), c + 1);
    } else {
      stage->publishRed();
      if (gets) stage->waitAllRed();
    }
    if (gets) {
      char* recv = static_cast<char*>(a.recv) + r.offset * esize;
      for (int i = 0; i < ctx.nranks; ++i) {
        Range slice = sliceOf(r.count, ctx.nranks, i);
        ctx.copyOut(recv + slice.offset * esize, stage->out(i) + slice.offset * esize,
                    slice.count * esize, a.count * esize);
      }
    }
    stage->publishDone();
    stage.reset();
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
