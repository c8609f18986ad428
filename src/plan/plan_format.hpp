// Execution plans (docs/plans.md): a collective written as data, per rank an ordered list of
// operations on chunks of the call's buffers, loaded from versioned JSON (the Python DSL,
// loom.plan, writes it). This file is the format: the parsed plan and its schema checks. What a
// plan means at run time (dependencies, sizes) is plan_program.hpp; whether it is right,
// plan_check.hpp.
//
// Buffers are cut into blocks of the call's element count (allreduce: input and output one block;
// allgather: output one block per rank; reduce-scatter: input one per rank; alltoall: both one
// per rank), each block into `chunksPerBlock` chunks (slices of as equal size as the count
// allows), so one plan serves every size. Scratch is `scratchChunks` chunks laid out the same.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "base/json.hpp"
#include "loom/loom.h"

namespace loom {

constexpr int kPlanFormatVersion = 1;

enum class PlanBuffer : uint8_t { kInput, kOutput, kScratch };
const char* planBufferName(PlanBuffer buffer);

// `count` consecutive chunks of one block of a buffer, from `index`.
struct ChunkRef {
  PlanBuffer buffer = PlanBuffer::kInput;
  uint32_t index = 0;
  uint32_t count = 1;
};
// As the DSL writes chunks (p.input[2], p.output[0:4]: Python's slices), for plan errors.
std::string planChunkText(const ChunkRef& ref);

enum class PlanOpKind : uint8_t { kSend, kRecv, kRecvReduce, kCopy, kReduce };
const char* planOpName(PlanOpKind kind);

struct PlanOp {
  PlanOpKind kind = PlanOpKind::kCopy;
  int peer = -1;  // send, recv, recv_reduce
  int lane = 0;   // copy, reduce: the local lane (thread) that runs it
  ChunkRef dst;   // recv, recv_reduce, copy, reduce
  // send, copy: what is read; recv_reduce: what the incoming data is reduced with (may be dst);
  // reduce: the operands, in order.
  std::vector<ChunkRef> srcs;
  bool final = false;  // a reduction that completes its chunk (average divides there)
};

struct PlanRank {
  std::vector<PlanOp> ops;  // in program order: what an op reads was written by earlier ones
};

struct Plan {
  int version = kPlanFormatVersion;
  std::string name;
  loomFunc_t func = loomFuncAllReduce;
  int nranks = 1;
  uint64_t minBytes = 0, maxBytes = UINT64_MAX;  // call sizes (bytes as the C API counts them)
  uint32_t chunksPerBlock = 1;
  uint32_t scratchChunks = 0;
  // Pipelining: each block is cut into parts of about partBytes * chunksPerBlock bytes, at most
  // maxParts, and the plan runs once per part (0: one part).
  uint64_t partBytes = 0;
  uint32_t maxParts = 1;
  std::vector<PlanRank> ranks;

  uint32_t inputBlocks() const;
  uint32_t outputBlocks() const;
  uint32_t blocksOf(PlanBuffer buffer) const;
};

// The collectives a plan may implement, and their names in the format.
bool planSupports(loomFunc_t func);
loomFunc_t planFuncByName(std::string_view name);  // loomNumFuncs when unknown

// Parses and checks the schema (names, ranges, chunk indices, peers). Throws loom::Error
// (loomInvalidArgument) naming the place: "plan 'x': rank 2 op 5: ...".
Plan parsePlan(std::string_view text);
Plan planFromJson(const JsonValue& json);
// The plan as canonical JSON (members in a fixed order, no spaces): equal plans give equal text.
std::string planToJson(const Plan& plan);
// SHA-256 of the canonical text, as 16 hex digits: what ranks compare.
std::string planHash(const Plan& plan);

}  // namespace loom
