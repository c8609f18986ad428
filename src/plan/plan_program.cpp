#include "plan/plan_program.hpp"

#include <algorithm>

#include "algorithms/partition.hpp"
#include "base/error.hpp"

namespace loom {

namespace {

// The buffer a chunk lives in; with `aliased`, input chunks are the output's (in place).
PlanBuffer memoryOf(const ChunkRef& r, bool aliased) {
  return aliased && r.buffer == PlanBuffer::kInput ? PlanBuffer::kOutput : r.buffer;
}

bool overlaps(const ChunkRef& a, const ChunkRef& b, bool aliased = false) {
  return memoryOf(a, aliased) == memoryOf(b, aliased) && a.index < b.index + b.count &&
         b.index < a.index + a.count;
}

bool sameChunks(const ChunkRef& a, const ChunkRef& b, bool aliased) {
  return memoryOf(a, aliased) == memoryOf(b, aliased) && a.index == b.index && a.count == b.count;
}

bool writes(const PlanOp& op) { return op.kind != PlanOpKind::kSend; }
bool receives(const PlanOp& op) {
  return op.kind == PlanOpKind::kRecv || op.kind == PlanOpKind::kRecvReduce;
}

// The dependency of `later` on `earlier`, if their chunks conflict. Streamed (byte i waits for
// byte i only) where one pass over exactly the same chunks follows another: a send of what a
// receive writes, and a write of what a send reads (in place: the reduction that overwrites the
// input a send is still reading), which would otherwise wait for the whole send and so for the
// peer's receive, itself waiting the same way: a deadlock on bounded channels.
bool conflict(const PlanOp& earlier, const PlanOp& later, bool aliased, bool& streamed) {
  bool readAfterWrite = false, writeAfterWrite = false, writeAfterRead = false;
  if (writes(earlier)) {
    for (const ChunkRef& r : later.srcs) readAfterWrite |= overlaps(earlier.dst, r, aliased);
    if (writes(later)) writeAfterWrite = overlaps(earlier.dst, later.dst, aliased);
  }
  if (writes(later))
    for (const ChunkRef& r : earlier.srcs) writeAfterRead |= overlaps(r, later.dst, aliased);
  const bool sendOfReceived = readAfterWrite && !writeAfterWrite && !writeAfterRead &&
                              later.kind == PlanOpKind::kSend && receives(earlier) &&
                              sameChunks(earlier.dst, later.srcs[0], aliased);
  const bool overwriteOfSent = writeAfterRead && !readAfterWrite && !writeAfterWrite &&
                               earlier.kind == PlanOpKind::kSend &&
                               sameChunks(earlier.srcs[0], later.dst, aliased);
  streamed = sendOfReceived || overwriteOfSent;
  return readAfterWrite || writeAfterWrite || writeAfterRead;
}

RankProgram compileRank(const PlanRank& rank, bool aliased) {
  RankProgram out;
  out.ops = rank.ops;
  out.depBegin.push_back(0);
  for (size_t i = 0; i < rank.ops.size(); ++i) {
    for (size_t j = 0; j < i; ++j) {
      bool streamed = false;
      if (conflict(rank.ops[j], rank.ops[i], aliased, streamed))
        out.deps.push_back({static_cast<uint32_t>(j), streamed});
    }
    out.depBegin.push_back(static_cast<uint32_t>(out.deps.size()));
  }
  return out;
}

// Byte offsets of the chunks of one part of a call.
struct ChunkLayout {
  uint64_t count;  // elements of a block
  size_t esize;
  uint32_t chunksPerBlock;
  Range part;  // this part's elements of each block

  // Offset and length in bytes of `ref` within its buffer.
  std::pair<uint64_t, uint64_t> bytesOf(const ChunkRef& ref) const {
    const uint64_t block = ref.index / chunksPerBlock;
    const int first = static_cast<int>(ref.index % chunksPerBlock);
    const Range a = sliceOf(part.count, static_cast<int>(chunksPerBlock), first);
    const Range b = sliceOf(part.count, static_cast<int>(chunksPerBlock),
                            first + static_cast<int>(ref.count) - 1);
    const uint64_t begin = block * count + part.offset + a.offset;
    return {begin * esize, (b.offset + b.count - a.offset) * esize};
  }
};

struct BufferIds {
  uint16_t input = Schedule::kInput, output = Schedule::kOutput, scratch = 0;
};

BufferRef refOf(const ChunkLayout& layout, const BufferIds& ids, const ChunkRef& ref) {
  const uint16_t buffer = ref.buffer == PlanBuffer::kInput    ? ids.input
                          : ref.buffer == PlanBuffer::kOutput ? ids.output
                                                              : ids.scratch;
  return {buffer, layout.bytesOf(ref).first};
}

uint32_t addOp(Schedule& s, const PlanOp& op, const ChunkLayout& layout, const BufferIds& ids,
               const PlanCall& call, std::vector<BufferRef>& sources) {
  const uint64_t bytes = op.kind == PlanOpKind::kSend ? layout.bytesOf(op.srcs[0]).second
                                                      : layout.bytesOf(op.dst).second;
  const bool toOutput = op.kind != PlanOpKind::kSend && op.dst.buffer == PlanBuffer::kOutput;
  Reduction reduction = call.reduction;
  if (!op.final) reduction.divisor = 1;
  switch (op.kind) {
    case PlanOpKind::kSend:
      return s.send(op.peer, refOf(layout, ids, op.srcs[0]), bytes);
    case PlanOpKind::kRecv:
      return s.recv(op.peer, refOf(layout, ids, op.dst), bytes, toOutput);
    case PlanOpKind::kRecvReduce:
      return s.recvReduce(op.peer, refOf(layout, ids, op.dst), refOf(layout, ids, op.srcs[0]),
                          bytes, reduction, toOutput);
    case PlanOpKind::kCopy:
      return s.copy(refOf(layout, ids, op.dst), refOf(layout, ids, op.srcs[0]), bytes, toOutput,
                    op.lane);
    case PlanOpKind::kReduce:
      sources.clear();
      for (const ChunkRef& r : op.srcs) sources.push_back(refOf(layout, ids, r));
      return s.reduce(refOf(layout, ids, op.dst), sources.data(), static_cast<int>(sources.size()),
                      bytes, reduction, toOutput, op.lane);
  }
  return 0;
}

bool readsInput(const PlanOp& op) {
  return std::any_of(op.srcs.begin(), op.srcs.end(),
                     [](const ChunkRef& r) { return r.buffer == PlanBuffer::kInput; });
}

}  // namespace

PlanProgram compilePlan(Plan plan) {
  PlanProgram program;
  program.hash = planHash(plan);
  for (const PlanRank& rank : plan.ranks) {
    program.ranks.push_back(compileRank(rank, false));
    if (plan.func == loomFuncAllReduce) program.aliasedRanks.push_back(compileRank(rank, true));
  }
  program.plan = std::move(plan);
  return program;
}

uint32_t planParts(const Plan& plan, uint64_t count, size_t elementSize) {
  if (plan.partBytes == 0 || plan.maxParts <= 1) return 1;
  const uint64_t chunkBytes = count * elementSize / plan.chunksPerBlock;
  const uint64_t parts = (chunkBytes + plan.partBytes - 1) / plan.partBytes;
  return static_cast<uint32_t>(std::clamp<uint64_t>(parts, 1, plan.maxParts));
}

void buildPlanSchedule(const PlanProgram& program, int rank, const PlanCall& call, Schedule& s) {
  const Plan& plan = program.plan;
  LOOM_CHECK_INTERNAL(rank >= 0 && rank < plan.nranks && call.parts >= 1, "plan '", plan.name,
                      "' built for rank ", rank, " in ", call.parts, " parts");
  const bool aliased = call.inPlace == PlanCall::InPlace::kAliased;
  LOOM_CHECK_INTERNAL(!aliased || !program.aliasedRanks.empty(), "plan '", plan.name,
                      "' has no in-place form");
  const RankProgram& rp = aliased ? program.aliasedRanks[rank] : program.ranks[rank];
  const uint64_t blockBytes = call.count * call.elementSize;
  BufferIds ids;
  if (plan.scratchChunks > 0)
    ids.scratch = s.addScratch("scratch", plan.blocksOf(PlanBuffer::kScratch) * blockBytes);
  uint32_t inputCopy = UINT32_MAX;
  if (call.inPlace == PlanCall::InPlace::kCopy) {
    const uint64_t inputBytes = plan.inputBlocks() * blockBytes;
    ids.input = s.addScratch("input copy", inputBytes);
    inputCopy = s.copy(s.scratch(ids.input), s.input(), inputBytes);
  }
  std::vector<uint32_t> index(rp.ops.size());
  std::vector<BufferRef> sources;
  for (uint32_t p = 0; p < call.parts; ++p) {
    const ChunkLayout layout{
        call.count, call.elementSize, plan.chunksPerBlock,
        sliceOf(call.count, static_cast<int>(call.parts), static_cast<int>(p))};
    for (size_t i = 0; i < rp.ops.size(); ++i) {
      index[i] = addOp(s, rp.ops[i], layout, ids, call, sources);
      for (uint32_t d = rp.depBegin[i]; d < rp.depBegin[i + 1]; ++d) {
        if (rp.deps[d].streamed)
          s.streamAfter(index[i], index[rp.deps[d].on]);
        else
          s.after(index[i], index[rp.deps[d].on]);
      }
      if (inputCopy != UINT32_MAX && readsInput(rp.ops[i])) s.after(index[i], inputCopy);
    }
  }
}

}  // namespace loom
