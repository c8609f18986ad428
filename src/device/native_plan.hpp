// An execution plan (docs/plans.md, src/plan/) as a backend's native collectives run it on their
// own, e.g. a GPU kernel that interprets it: one rank's operations on chunks of the call's
// buffers, with the dependencies the plan layer derived, as plain data. The plan layer makes it
// (plan/plan_native.cpp); nothing here knows the JSON format or how a plan was checked.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "loom/loom.h"

namespace loom {

// `count` consecutive chunks of one block of a buffer, from `index`: chunk i of a call is slice
// i % chunksPerBlock of block i / chunksPerBlock, in each part (NativePlanCall::parts) of the
// block's elements.
struct NativeChunks {
  enum Buffer : uint8_t { kInput, kOutput, kScratch } buffer = kInput;
  uint32_t index = 0;
  uint32_t count = 1;
};

struct NativePlanOp {
  enum Kind : uint8_t { kSend, kRecv, kRecvReduce, kCopy, kReduce } kind = kCopy;
  bool final = false;  // a reduction that completes its chunk: average divides here
  int peer = -1;       // send, recv, recvReduce
  int lane = 0;        // copy, reduce: the plan's local lane
  NativeChunks dst;    // what recv, recvReduce, copy and reduce write
  // srcs[srcBegin, srcEnd): what send and copy read; recvReduce: its local operand (reduced
  // first, then what arrives); reduce: the operands in order.
  uint32_t srcBegin = 0, srcEnd = 0;
  // deps[depBegin, depEnd): earlier operations of this rank it waits for.
  uint32_t depBegin = 0, depEnd = 0;
};

struct NativePlanDep {
  uint32_t on = 0;  // the index of an earlier operation
  // Byte by byte: the operation may move its byte i once `on` moved its byte i (both cover the
  // same bytes); otherwise it waits for the whole of `on`.
  bool streamed = false;
};

// A sequence of a rank's operations that runs in program order: a sending lane per peer, a
// receiving lane per peer (the order both ends of a pair agree on), one per local lane of copies
// and reductions.
struct NativePlanLane {
  enum Kind : uint8_t { kSend, kReceive, kLocal } kind = kLocal;
  int peer = -1;              // sending and receiving lanes
  std::vector<uint32_t> ops;  // indices into NativePlanProgram::ops, in program order
};

struct NativePlanProgram {
  std::vector<NativePlanOp> ops;  // in program order
  std::vector<NativeChunks> srcs;
  std::vector<NativePlanDep> deps;
  std::vector<NativePlanLane> lanes;  // in order of first use
};

struct NativePlan {
  std::string name;
  loomFunc_t func = loomFuncAllReduce;
  int nranks = 1;
  uint32_t chunksPerBlock = 1;
  uint32_t inputBlocks = 1, outputBlocks = 1, scratchBlocks = 0;
  // Over every rank's program, so that choices made from them (and refusals) are the same on
  // every rank: the most lanes one rank runs (a sending and a receiving lane per peer, one per
  // local lane), the most chunks one operation moves, the most operands of one reduction.
  int mostLanes = 1;
  uint32_t mostChunksPerOp = 1;
  uint32_t mostReduceSources = 0;
  NativePlanProgram program;  // this rank's
  NativePlanProgram aliased;  // allreduce in place: input chunks are the output's (else empty)
};

// How one call applies the plan (the plan layer decides, as for its host schedules).
struct NativePlanCall {
  uint32_t parts = 1;  // the plan runs once per part of each block (pipelining)
  enum class InPlace : uint8_t {
    kNo,
    kAliased,  // allreduce with send == recv: the aliased program
    kCopy,     // other overlap of send and recv: the plan reads a copy of the input made first
  } inPlace = InPlace::kNo;
};

}  // namespace loom
