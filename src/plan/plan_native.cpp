#include "plan/plan_native.hpp"

#include <algorithm>
#include <map>
#include <utility>

namespace loom {

namespace {

NativeChunks nativeChunks(const ChunkRef& ref) {
  NativeChunks out;
  out.buffer = ref.buffer == PlanBuffer::kInput    ? NativeChunks::kInput
               : ref.buffer == PlanBuffer::kOutput ? NativeChunks::kOutput
                                                   : NativeChunks::kScratch;
  out.index = ref.index;
  out.count = ref.count;
  return out;
}

NativePlanOp::Kind nativeKind(PlanOpKind kind) {
  switch (kind) {
    case PlanOpKind::kSend:
      return NativePlanOp::kSend;
    case PlanOpKind::kRecv:
      return NativePlanOp::kRecv;
    case PlanOpKind::kRecvReduce:
      return NativePlanOp::kRecvReduce;
    case PlanOpKind::kCopy:
      return NativePlanOp::kCopy;
    case PlanOpKind::kReduce:
      return NativePlanOp::kReduce;
  }
  return NativePlanOp::kCopy;
}

NativePlanProgram nativeProgram(const RankProgram& rp) {
  NativePlanProgram out;
  for (size_t i = 0; i < rp.ops.size(); ++i) {
    const PlanOp& op = rp.ops[i];
    NativePlanOp n;
    n.kind = nativeKind(op.kind);
    n.final = op.final;
    n.peer = op.peer;
    n.lane = op.lane;
    n.dst = nativeChunks(op.dst);
    n.srcBegin = static_cast<uint32_t>(out.srcs.size());
    for (const ChunkRef& r : op.srcs) out.srcs.push_back(nativeChunks(r));
    n.srcEnd = static_cast<uint32_t>(out.srcs.size());
    n.depBegin = static_cast<uint32_t>(out.deps.size());
    for (uint32_t d = rp.depBegin[i]; d < rp.depBegin[i + 1]; ++d)
      out.deps.push_back({rp.deps[d].on, rp.deps[d].streamed});
    n.depEnd = static_cast<uint32_t>(out.deps.size());
    out.ops.push_back(n);
  }
  out.lanes = planLanesOf(rp);
  return out;
}

// The chunks an operation moves: what a send reads, what the others write.
uint32_t chunksMoved(const PlanOp& op) {
  return op.kind == PlanOpKind::kSend ? op.srcs[0].count : op.dst.count;
}

}  // namespace

std::vector<NativePlanLane> planLanesOf(const RankProgram& program) {
  std::vector<NativePlanLane> lanes;
  std::map<std::pair<int, int>, size_t> index;  // (kind, peer or local lane) -> lanes' index
  for (uint32_t i = 0; i < program.ops.size(); ++i) {
    const PlanOp& op = program.ops[i];
    const bool sends = op.kind == PlanOpKind::kSend;
    const bool local = !sends && op.kind != PlanOpKind::kRecv && op.kind != PlanOpKind::kRecvReduce;
    const NativePlanLane::Kind kind = sends   ? NativePlanLane::kSend
                                      : local ? NativePlanLane::kLocal
                                              : NativePlanLane::kReceive;
    auto [it, added] = index.emplace(std::make_pair(kind, local ? op.lane : op.peer), lanes.size());
    if (added) lanes.push_back({kind, local ? -1 : op.peer, {}});
    lanes[it->second].ops.push_back(i);
  }
  return lanes;
}

int planLanes(const RankProgram& program) {
  return std::max<int>(1, static_cast<int>(planLanesOf(program).size()));
}

NativePlan nativePlanOf(const PlanProgram& program, int rank) {
  const Plan& plan = program.plan;
  NativePlan out;
  out.name = plan.name;
  out.func = plan.func;
  out.nranks = plan.nranks;
  out.chunksPerBlock = plan.chunksPerBlock;
  out.inputBlocks = plan.inputBlocks();
  out.outputBlocks = plan.outputBlocks();
  out.scratchBlocks = plan.scratchChunks > 0 ? plan.blocksOf(PlanBuffer::kScratch) : 0;
  for (const RankProgram& rp : program.ranks) {
    out.mostLanes = std::max(out.mostLanes, planLanes(rp));
    for (const PlanOp& op : rp.ops) {
      out.mostChunksPerOp = std::max(out.mostChunksPerOp, chunksMoved(op));
      if (op.kind == PlanOpKind::kReduce)
        out.mostReduceSources =
            std::max(out.mostReduceSources, static_cast<uint32_t>(op.srcs.size()));
    }
  }
  out.program = nativeProgram(program.ranks.at(rank));
  if (!program.aliasedRanks.empty()) out.aliased = nativeProgram(program.aliasedRanks.at(rank));
  return out;
}

}  // namespace loom
