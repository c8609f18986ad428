// "direct": one-shot collectives through the shared arena, repeated per chunk for large buffers.
// Every step: each rank stages what it contributes in its own slot and raises `in`; the ranks that
// need it read straight from the other ranks' slots into their outputs (allreduce: every rank
// reduces every slot itself, so one synchronisation per step), then raise `done`.
// Latency-optimal (one flag wait per step, no system call); reads grow with the rank count, so the
// selector moves large allreduces to "pipelined" (algorithms/pipelined.cpp).
#include <vector>

#include "algorithms/context.hpp"
#include "algorithms/families.hpp"
#include "algorithms/partition.hpp"
#include "algorithms/shm_stage.hpp"
#include "base/dtype.hpp"

namespace loom {

namespace {

const char* bytesAt(const void* base, size_t elems, size_t esize) {
  return static_cast<const char*>(base) + elems * esize;
}
char* bytesAt(void* base, size_t elems, size_t esize) {
  return static_cast<char*>(base) + elems * esize;
}

// allreduce and reduce: every rank stages its chunk; the ranks that get the result (all, or the
// root) reduce every slot, in rank order, straight into their output.
void reduceAllSlots(const AlgoContext& ctx, const CollArgs& a, bool everyoneGets) {
  size_t esize = dtypeSize(a.dtype);
  size_t chunk = ctx.arena->slotBytes() / esize;
  int divisor = averageDivisor(a.op, ctx.nranks);
  loomRedOp_t op = kernelOp(a.op);
  bool gets = everyoneGets || ctx.rank == a.root;
  std::vector<const void*>& srcs = *ctx.sources;
  for (size_t c = 0; c < chunkCount(a.count, chunk); ++c) {
    Range r = chunkOf(a.count, chunk, c);
    ShmStage stage(ctx);
    ctx.device->copy(stage.myIn(), bytesAt(a.send, r.offset, esize), r.count * esize);
    stage.publishIn();
    if (gets) {
      stage.waitAllIn();
      for (int i = 0; i < ctx.nranks; ++i) srcs[i] = stage.in(i);
      ctx.device->reduce(bytesAt(a.recv, r.offset, esize), srcs.data(), ctx.nranks, r.count,
                         a.dtype, op, a.accum, divisor);
    }
    stage.publishDone();
  }
}

void allReduceDirect(const AlgoContext& ctx, const CollArgs& a) { reduceAllSlots(ctx, a, true); }
void reduceDirect(const AlgoContext& ctx, const CollArgs& a) { reduceAllSlots(ctx, a, false); }

void broadcastDirect(const AlgoContext& ctx, const CollArgs& a) {
  size_t esize = dtypeSize(a.dtype);
  size_t chunk = ctx.arena->slotBytes() / esize;
  for (size_t c = 0; c < chunkCount(a.count, chunk); ++c) {
    Range r = chunkOf(a.count, chunk, c);
    ShmStage stage(ctx);
    if (ctx.rank == a.root) {
      ctx.device->copy(stage.myIn(), bytesAt(a.send, r.offset, esize), r.count * esize);
      stage.publishIn();
      ctx.device->copy(bytesAt(a.recv, r.offset, esize), bytesAt(a.send, r.offset, esize),
                       r.count * esize);
    } else {
      stage.publishIn();  // arrived (no input): carries the call's signature
      stage.waitIn(a.root);
      ctx.copyOut(bytesAt(a.recv, r.offset, esize), stage.in(a.root), r.count * esize,
                  a.count * esize);
    }
    stage.publishDone();
  }
}

// allgather and gather: every rank stages a chunk of its block; readers copy all blocks out.
void gatherBlocks(const AlgoContext& ctx, const CollArgs& a, bool everyoneReads) {
  size_t esize = dtypeSize(a.dtype);
  size_t chunk = ctx.arena->slotBytes() / esize;
  bool reader = everyoneReads || ctx.rank == a.root;
  for (size_t c = 0; c < chunkCount(a.count, chunk); ++c) {
    Range r = chunkOf(a.count, chunk, c);
    ShmStage stage(ctx);
    ctx.device->copy(stage.myIn(), bytesAt(a.send, r.offset, esize), r.count * esize);
    stage.publishIn();
    if (reader) {
      for (int i = 0; i < ctx.nranks; ++i) {
        char* dst = bytesAt(a.recv, i * a.count + r.offset, esize);
        if (i == ctx.rank) {
          ctx.device->copy(dst, bytesAt(a.send, r.offset, esize), r.count * esize);
        } else {
          stage.waitIn(i);
          ctx.copyOut(dst, stage.in(i), r.count * esize, a.count * esize * ctx.nranks);
        }
      }
    }
    stage.publishDone();
  }
}

void allGatherDirect(const AlgoContext& ctx, const CollArgs& a) { gatherBlocks(ctx, a, true); }
void gatherDirect(const AlgoContext& ctx, const CollArgs& a) { gatherBlocks(ctx, a, false); }

// reduce-scatter, alltoall and scatter stage one piece per destination rank: piece i of a step
// holds a chunk of the block that rank i receives.
void reduceScatterDirect(const AlgoContext& ctx, const CollArgs& a) {
  size_t esize = dtypeSize(a.dtype);
  size_t chunk = ctx.arena->slotBytes() / (esize * ctx.nranks);
  int divisor = averageDivisor(a.op, ctx.nranks);
  loomRedOp_t op = kernelOp(a.op);
  std::vector<const void*>& srcs = *ctx.sources;
  for (size_t c = 0; c < chunkCount(a.count, chunk); ++c) {
    Range r = chunkOf(a.count, chunk, c);
    ShmStage stage(ctx);
    for (int i = 0; i < ctx.nranks; ++i)
      ctx.device->copy(stage.myIn() + i * r.count * esize,
                       bytesAt(a.send, i * a.count + r.offset, esize), r.count * esize);
    stage.publishIn();
    stage.waitAllIn();
    for (int i = 0; i < ctx.nranks; ++i) srcs[i] = stage.in(i) + ctx.rank * r.count * esize;
    ctx.device->reduce(bytesAt(a.recv, r.offset, esize), srcs.data(), ctx.nranks, r.count, a.dtype,
                       op, a.accum, divisor);
    stage.publishDone();
  }
}

void allToAllDirect(const AlgoContext& ctx, const CollArgs& a) {
  size_t esize = dtypeSize(a.dtype);
  size_t chunk = ctx.arena->slotBytes() / (esize * ctx.nranks);
  for (size_t c = 0; c < chunkCount(a.count, chunk); ++c) {
    Range r = chunkOf(a.count, chunk, c);
    ShmStage stage(ctx);
    for (int i = 0; i < ctx.nranks; ++i) {
      if (i == ctx.rank) continue;
      ctx.device->copy(stage.myIn() + i * r.count * esize,
                       bytesAt(a.send, i * a.count + r.offset, esize), r.count * esize);
    }
    stage.publishIn();
    for (int i = 0; i < ctx.nranks; ++i) {
      char* dst = bytesAt(a.recv, i * a.count + r.offset, esize);
      if (i == ctx.rank) {
        ctx.device->copy(dst, bytesAt(a.send, i * a.count + r.offset, esize), r.count * esize);
      } else {
        stage.waitIn(i);
        ctx.copyOut(dst, stage.in(i) + ctx.rank * r.count * esize, r.count * esize,
                    a.count * esize * ctx.nranks);
      }
    }
    stage.publishDone();
  }
}

void scatterDirect(const AlgoContext& ctx, const CollArgs& a) {
  size_t esize = dtypeSize(a.dtype);
  size_t chunk = ctx.arena->slotBytes() / (esize * ctx.nranks);
  for (size_t c = 0; c < chunkCount(a.count, chunk); ++c) {
    Range r = chunkOf(a.count, chunk, c);
    ShmStage stage(ctx);
    char* dst = bytesAt(a.recv, r.offset, esize);
    if (ctx.rank == a.root) {
      for (int i = 0; i < ctx.nranks; ++i)
        if (i != a.root)
          ctx.device->copy(stage.myIn() + i * r.count * esize,
                           bytesAt(a.send, i * a.count + r.offset, esize), r.count * esize);
      stage.publishIn();
      ctx.device->copy(dst, bytesAt(a.send, a.root * a.count + r.offset, esize), r.count * esize);
    } else {
      stage.publishIn();  // arrived (no input): carries the call's signature
      stage.waitIn(a.root);
      ctx.copyOut(dst, stage.in(a.root) + ctx.rank * r.count * esize, r.count * esize,
                  a.count * esize);
    }
    stage.publishDone();
  }
}

void barrierDirect(const AlgoContext& ctx, const CollArgs&) {
  ShmStage stage(ctx);
  stage.publishIn();
  stage.waitAllIn();
  stage.publishDone();
}

}  // namespace

void registerDirectAlgorithms(std::vector<Algorithm>& out) {
  out.push_back({loomFuncAllReduce, "direct", allReduceDirect, true, true});
  out.push_back({loomFuncBroadcast, "direct", broadcastDirect, true, true});
  out.push_back({loomFuncReduce, "direct", reduceDirect, true, true});
  out.push_back({loomFuncAllGather, "direct", allGatherDirect, true, true});
  out.push_back({loomFuncGather, "direct", gatherDirect, true, true});
  out.push_back({loomFuncReduceScatter, "direct", reduceScatterDirect, true, true});
  out.push_back({loomFuncAllToAll, "direct", allToAllDirect, true, true});
  out.push_back({loomFuncScatter, "direct", scatterDirect, true, true});
  out.push_back({loomFuncBarrier, "direct", barrierDirect, true, true});
}

}  // namespace loom
