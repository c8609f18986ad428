// The host work of expert-parallel calls, independent of how chunks travel (ep_format.hpp): the
// checks of a call's arguments, the layout and counts, chunks built from a rank's tokens, tokens
// taken out of a source's chunk, and the fixed-order fp32 sums of combine. Pointers are host
// memory (a device rank's arrays are staged before, ep/ep_staging.*).
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "device/ep_format.hpp"
#include "loom/loom.h"

namespace loom::ep {

struct Sizes {
  int rank = 0, nranks = 1;
  int modes = 0;
  int maxTokens = 0, hidden = 0, maxTopk = 0, numExperts = 0, localExperts = 0;
  loomDataType_t dtype = loomBfloat16;
  size_t bufferBytes = 0;  // normal mode: one of a rank's two staging buffers
  size_t maxRowBytes() const;
  std::string describe() const;
};

// A rank's own verdict on its arguments, exchanged before any data moves.
struct Verdict {
  int32_t status = loomSuccess;
  std::string reason;
  bool ok() const { return status == loomSuccess; }
  template <typename... Args>
  void fail(const Args&... args);
};

// A checked normal dispatch or combine on this rank.
struct NormalCall {
  CallShape shape;
  size_t rowBytes = 0;
  int numTokens = 0;
  bool counting = false;  // the handle is counted by this call
  const loomEpDispatchArgs_t* dispatch = nullptr;
  const loomEpCombineArgs_t* combine = nullptr;
  loomEpHandle_t* handle = nullptr;
  Verdict verdict;
};

// The checks of a call's sizes and pointers, not of what its arrays hold (a device rank's are
// staged first): checkExpertIds reads the expert ids.
NormalCall checkDispatch(const Sizes& sizes, const loomEpDispatchArgs_t& a, CallKind kind);
NormalCall checkCombine(const Sizes& sizes, const loomEpCombineArgs_t& a);
void checkExpertIds(const Sizes& sizes, const int64_t* topkIdx, int numTokens, int topk,
                    Verdict& v);

// The expert ids of a token list that fall outside [0, numExperts) or below -1, in words ("" when
// none).
std::string badExperts(const int64_t* topkIdx, int numTokens, int topk, int numExperts);

// loomEpLayout (any output may be null); the ids must have been checked.
void computeLayout(const Sizes& sizes, const int64_t* topkIdx, int numTokens, int topk,
                   int32_t* perRank, int32_t* perExpert, uint8_t* inRank);

// The counts block of a dispatch chunk: tokens to each rank (from isTokenInRank) and to each
// expert (from topkIdx, when the call has it).
void fillCounts(const Sizes& sizes, const NormalCall& call, int32_t* counts);

// Sets the handle of a counting dispatch from every rank's counts block (by rank), and the
// received tokens per local expert.
void planHandle(const Sizes& sizes, const NormalCall& call,
                std::span<const int32_t* const> countsOf);

DispatchFormat dispatchFormat(const Sizes& sizes, const NormalCall& call);
CombineFormat combineFormat(const Sizes& sizes, const NormalCall& call);

// Writes the chunk of the tokens in [begin, end) that `wanted` selects (withRows: their rows too,
// else only their metadata) after the header and counts block; returns how many it holds.
template <typename Wanted>
int buildDispatchChunk(char* chunk, const DispatchFormat& f, const NormalCall& call, int begin,
                       int end, Wanted&& wanted, bool withRows);

// Takes this rank's tokens out of a source's chunk of `count` tokens, in order, writing received
// row `cursor` onward (rowsInPlace: the rows already landed in recvX, on the network path).
void takeDispatchChunk(const char* chunk, const DispatchFormat& f, int count, const Sizes& sizes,
                       const NormalCall& call, int& cursor, bool rowsInPlace);
// The same for this rank's own tokens in [begin, end), from its arguments.
void takeOwnTokens(const Sizes& sizes, const NormalCall& call, int begin, int end, int& cursor);
// After the last round: the receive rows past the received ones get recvTopkIdx -1.
void finishDispatch(const NormalCall& call, int received);

// Combine's origin side: token t's result is bias0 + bias1 + the rows of the ranks it went to
// (handle->sendHead[t][r] >= 0), in ascending rank, summed in fp32 (fp64 for fp64) and rounded
// once; its top-k weights likewise. locate(r, t, row) gives rank r's row of token t, received
// row `row` there, and its weights.
struct RowRef {
  const char* row = nullptr;
  const float* weights = nullptr;
};
template <typename Locate>
void reduceTokens(const NormalCall& call, int nranks, int begin, int end, Locate&& locate);

// FP8 (e4m3, one fp32 scale per 128 values, DeepEP's recipe): a bf16 row into values and scales.
void quantizeRow(const uint16_t* bf16, int hidden, bool roundScale, uint8_t* values, float* scales);

}  // namespace loom::ep

#include "ep/ep_tokens_inl.hpp"
