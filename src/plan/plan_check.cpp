#include "plan/plan_check.hpp"

#include <algorithm>
#include <cstring>
#include <map>
#include <random>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "algorithms/partition.hpp"
#include "base/error.hpp"
#include "exec/simulate.hpp"

namespace loom {

namespace {

constexpr unsigned char kPoison = 0x5a;

struct Trial {
  uint64_t count;
  uint32_t parts;
  loomRedOp_t op;
  PlanCall::InPlace inPlace;
};

bool reduces(loomFunc_t func) { return func == loomFuncAllReduce || func == loomFuncReduceScatter; }

// Rank r's expected output (int64 elements) from every rank's input.
std::vector<int64_t> expectedOutput(const Plan& plan, const Trial& t,
                                    const std::vector<std::vector<int64_t>>& ins, int r) {
  const int n = plan.nranks;
  const uint64_t c = t.count;
  std::vector<int64_t> out(plan.outputBlocks() * c);
  for (uint64_t i = 0; i < c; ++i) {
    switch (plan.func) {
      case loomFuncAllReduce:
      case loomFuncReduceScatter: {
        const uint64_t at = plan.func == loomFuncAllReduce ? i : r * c + i;
        int64_t sum = 0;
        for (int p = 0; p < n; ++p) sum += ins[p][at];
        out[i] = t.op == loomAvg ? sum / n : sum;
        break;
      }
      case loomFuncAllGather:
        for (int p = 0; p < n; ++p) out[p * c + i] = ins[p][i];
        break;
      default:  // alltoall
        for (int p = 0; p < n; ++p) out[p * c + i] = ins[p][r * c + i];
        break;
    }
  }
  return out;
}

// "output chunk 5 (block 1, chunk 1)" for an element of a buffer, with one part.
std::string chunkOfElement(const Plan& plan, uint64_t count, uint64_t element) {
  const uint64_t block = count == 0 ? 0 : element / count, within = element - block * count;
  uint32_t chunk = 0;
  for (uint32_t j = 0; j < plan.chunksPerBlock; ++j) {
    const Range s = sliceOf(count, static_cast<int>(plan.chunksPerBlock), static_cast<int>(j));
    if (within >= s.offset && within < s.offset + s.count) chunk = j;
  }
  return "output chunk " + std::to_string(block * plan.chunksPerBlock + chunk);
}

[[noreturn]] void failTrial(const Plan& plan, const Trial& t, const std::string& what) {
  LOOM_THROW(loomInvalidArgument, "plan '", plan.name, "' fails its check (", t.count,
             " elements a block, ", t.parts, t.parts == 1 ? " part, " : " parts, ",
             t.op == loomAvg ? "average" : "sum",
             t.inPlace == PlanCall::InPlace::kNo        ? ""
             : t.inPlace == PlanCall::InPlace::kAliased ? ", in place"
                                                        : ", in place through a copy",
             "): ", what);
}

void runTrial(const PlanProgram& program, const Trial& t, std::mt19937_64& random) {
  const Plan& plan = program.plan;
  const int n = plan.nranks;
  const size_t esize = sizeof(int64_t);
  std::vector<Schedule> schedules(n);
  std::vector<std::vector<int64_t>> ins(n);
  std::vector<std::vector<std::vector<char>>> memory(n);
  std::vector<SimulatedRank> ranks(n);
  PlanCall call;
  call.count = t.count;
  call.elementSize = esize;
  call.reduction = {loomInt64, loomSum, -1, t.op == loomAvg ? n : 1};
  call.parts = t.parts;
  call.inPlace = t.inPlace;
  for (int r = 0; r < n; ++r) {
    ins[r].resize(plan.inputBlocks() * t.count);
    // Averages: multiples of n, so that only a division in the wrong place changes the result.
    for (int64_t& v : ins[r]) v = static_cast<int64_t>(random() >> 40) * (t.op == loomAvg ? n : 1);
    Schedule& s = schedules[r];
    s.clear(n);
    s.setExtents(ins[r].size() * esize, plan.outputBlocks() * t.count * esize);
    buildPlanSchedule(program, r, call, s);
    s.finish();
    for (const ScheduleBuffer& b : s.buffers()) memory[r].emplace_back(b.bytes, kPoison);
    std::memcpy(memory[r][0].data(), ins[r].data(), ins[r].size() * esize);
    for (auto& m : memory[r]) ranks[r].buffers.push_back(m.data());
    if (t.inPlace != PlanCall::InPlace::kNo) {
      std::memcpy(memory[r][1].data(), ins[r].data(), ins[r].size() * esize);
      ranks[r].buffers[0] = ranks[r].buffers[1];
    }
    ranks[r].schedule = &s;
  }
  const SimulationResult result = simulateSchedules(ranks);
  if (!result.ok) failTrial(plan, t, result.problem);
  for (int r = 0; r < n; ++r) {
    const std::vector<uint8_t>& writes = result.outputWrites[r];
    for (size_t b = 0; b < writes.size(); ++b)
      if (writes[b] != 1)
        failTrial(plan, t,
                  "rank " + std::to_string(r) + " writes " +
                      chunkOfElement(plan, t.count, b / esize) + " " + std::to_string(writes[b]) +
                      " times (each output byte must be " + "written exactly once)");
    const std::vector<int64_t> want = expectedOutput(plan, t, ins, r);
    const auto* got = reinterpret_cast<const int64_t*>(memory[r][1].data());
    for (size_t i = 0; i < want.size(); ++i) {
      if (got[i] == want[i]) continue;
      std::ostringstream why;
      why << "rank " << r << " " << chunkOfElement(plan, t.count, i) << " is wrong at element " << i
          << " (";
      int64_t poison;
      std::memset(&poison, kPoison, sizeof poison);
      if (got[i] == poison)
        why << "never computed: a chunk read before it was written";
      else if (t.op == loomAvg)
        why << "the sum is right but the division is not where the reduction completes: mark "
               "exactly the reductions that complete a chunk final";
      else
        why << "not the " << (reduces(plan.func) ? "reduction of every rank's" : "expected")
            << " input";
      why << ")";
      failTrial(plan, t, why.str());
    }
  }
}

[[noreturn]] void failOp(const Plan& plan, int rank, size_t op, const std::string& what) {
  LOOM_THROW(loomInvalidArgument, "plan '", plan.name, "': rank ", rank, " op ", op, " (",
             planOpName(plan.ranks[rank].ops[op].kind), "): ", what);
}

// A block's chunks are near-equal slices (the first count % chunksPerBlock one element longer),
// so two references cover the same number of bytes at every call size only when they have the
// same chunk count and start at the same position in their blocks. The trials see a few
// remainders only, and the CUDA kernel sizes each end of a transfer from its own reference. With
// references inside one block (plan_format), it also keeps an op from writing over its own
// operand at another offset, which the executor's and the kernel's parallel pieces would race on.
bool sameShape(const Plan& plan, const ChunkRef& a, const ChunkRef& b) {
  return a.count == b.count && a.index % plan.chunksPerBlock == b.index % plan.chunksPerBlock;
}

// Why two references covering different bytes at some call size do: other chunk counts differ at
// every size, other positions in a block at some.
std::string sizeMismatch(const ChunkRef& a, const ChunkRef& b) {
  return a.count != b.count ? "they differ in size (other chunk counts)"
                            : "they differ in size at some call sizes (chunks at different "
                              "positions of a block)";
}

void checkOperands(const Plan& plan, int r, size_t i) {
  const PlanOp& op = plan.ranks[r].ops[i];
  if (op.kind == PlanOpKind::kSend) return;
  for (const ChunkRef& src : op.srcs) {
    if (!sameShape(plan, op.dst, src))
      failOp(
          plan, r, i,
          planChunkText(op.dst) + " and " + planChunkText(src) + ": " + sizeMismatch(op.dst, src));
  }
}

// The k-th send from r to p meets the k-th receive of p from r: both must move the same bytes at
// every call size. (A send without its receive is the simulation's to explain.) Ops are listed
// by (sender, receiver) pair, so the memory is the plan's ops, not ranks squared.
void checkTransfers(const Plan& plan) {
  std::map<std::pair<int, int>, std::vector<size_t>> sends, receives;  // (from, to): op indices
  for (int r = 0; r < plan.nranks; ++r)
    for (size_t i = 0; i < plan.ranks[r].ops.size(); ++i) {
      const PlanOp& op = plan.ranks[r].ops[i];
      if (op.kind == PlanOpKind::kSend) sends[{r, op.peer}].push_back(i);
      if (op.kind == PlanOpKind::kRecv || op.kind == PlanOpKind::kRecvReduce)
        receives[{op.peer, r}].push_back(i);
    }
  for (const auto& [pair, sent] : sends) {
    const auto [r, p] = pair;
    const auto found = receives.find(pair);
    if (found == receives.end()) continue;
    const std::vector<size_t>& taken = found->second;
    for (size_t k = 0; k < std::min(sent.size(), taken.size()); ++k) {
      const ChunkRef& from = plan.ranks[r].ops[sent[k]].srcs[0];
      const ChunkRef& into = plan.ranks[p].ops[taken[k]].dst;
      if (!sameShape(plan, from, into))
        failOp(plan, r, sent[k],
               "sends " + planChunkText(from) + " to rank " + std::to_string(p) + ", whose op " +
                   std::to_string(taken[k]) + " receives it into " + planChunkText(into) + ": " +
                   sizeMismatch(from, into));
    }
  }
}

}  // namespace

void checkPlan(const PlanProgram& program) {
  const Plan& plan = program.plan;
  for (int r = 0; r < plan.nranks; ++r)
    for (size_t i = 0; i < plan.ranks[r].ops.size(); ++i) checkOperands(plan, r, i);
  checkTransfers(plan);
  const uint64_t cpb = plan.chunksPerBlock;
  std::mt19937_64 random(0x5eed);
  using InPlace = PlanCall::InPlace;
  std::vector<Trial> trials = {{3 * cpb + 1, 1, loomSum, InPlace::kNo},
                               {2 * cpb + 3, 2, loomSum, InPlace::kNo}};
  if (reduces(plan.func)) trials.push_back({cpb + 2, 1, loomAvg, InPlace::kNo});
  if (plan.func == loomFuncAllReduce) {
    trials.push_back({2 * cpb + 1, 2, loomSum, InPlace::kAliased});
    trials.push_back({2 * cpb + 1, 1, loomSum, InPlace::kCopy});
  }
  for (const Trial& t : trials) runTrial(program, t, random);
}

}  // namespace loom
