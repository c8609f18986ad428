// The host work of the low-latency calls that every path shares: placing a source's tokens into
// the local experts' receive rows, and the origin's weighted sum of combine.
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

#include "base/dtype.hpp"
#include "ep/ep_tokens.hpp"

namespace loom::ep {

// The tokens of `source` (their indices, global expert ids [count][topk], rows `stride` apart in
// the dispatch's wire format: bf16, or e4m3 then fp32 scales at align64(hidden)) into the rows of
// the local experts they picked, from cursors[el] on (advanced). A token that picks an expert
// twice lands there once. Sets recvLayoutRange[el][source].
void placeLowLatencyTokens(const Sizes& sizes, const loomEpLowLatencyDispatchArgs_t& a, int source,
                           const int32_t* index, const int32_t* experts, const char* rows,
                           size_t stride, int count, int* cursors);
// After the last source: recvCount and the cumulative statistics.
void finishLowLatencyDispatch(const Sizes& sizes, const loomEpLowLatencyDispatchArgs_t& a,
                              const int* cursors);

// The rows of (rank, local expert) pairs that token t of this origin reaches: its k-th pick of
// expert e is the seen[e]-th of this origin's tokens picking e (counted over the tokens before,
// a repeated pick of one token sharing its row). locate(r, el, i) gives that row (bf16).
template <typename Locate>
void reduceLowLatency(const Sizes& sizes, const loomEpLowLatencyCombineArgs_t& a,
                      std::vector<int32_t>& seen, Locate&& locate) {
  const int local = sizes.localExperts;
  std::fill(seen.begin(), seen.end(), 0);
  constexpr int kBlock = 512, kMaxTopk = 64;
  alignas(64) float acc[kBlock];
  const uint16_t* rows[kMaxTopk];
  float weights[kMaxTopk];
  for (int t = 0; t < a.numTokens; ++t) {
    const int64_t* experts = a.topkIdx + static_cast<size_t>(t) * a.topk;
    int terms = 0;
    for (int k = 0; k < a.topk; ++k) {
      const int64_t e = experts[k];
      if (e < 0) continue;
      int first = 0;
      while (experts[first] != e) ++first;
      const int i = seen[e] - (first == k ? 0 : 1);
      if (first == k) ++seen[e];
      rows[terms] = reinterpret_cast<const uint16_t*>(
          locate(static_cast<int>(e / local), static_cast<int>(e % local), i));
      weights[terms++] = a.topkWeights[static_cast<size_t>(t) * a.topk + k];
    }
    uint16_t* out = static_cast<uint16_t*>(a.combinedX) + static_cast<size_t>(t) * a.hidden;
    for (int v = 0; v < a.hidden; v += kBlock) {
      const int len = std::min(kBlock, a.hidden - v);
      std::fill(acc, acc + len, 0.0f);
      for (int j = 0; j < terms; ++j) {
        const uint16_t* row = rows[j] + v;
        const float w = weights[j];
        for (int x = 0; x < len; ++x) acc[x] += w * bf16ToFloat(row[x]);
      }
      for (int x = 0; x < len; ++x) out[v + x] = floatToBf16(acc[x]);
    }
  }
}

// How many rows of this origin each (rank, local expert) pair holds after its dispatch, by
// global expert (repeated picks of one token counted once).
void countPicks(const Sizes& sizes, const int64_t* topkIdx, int numTokens, int topk,
                int32_t* perExpert);

}  // namespace loom::ep
