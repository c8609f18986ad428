#include "ep/ep_low_latency.hpp"

#include <cstring>

namespace loom::ep {

namespace {

bool firstPick(const int32_t* experts, int k, int e) {
  for (int i = 0; i < k; ++i)
    if (experts[i] == e) return false;
  return true;
}

}  // namespace

void placeLowLatencyTokens(const Sizes& sizes, const loomEpLowLatencyDispatchArgs_t& a, int source,
                           const int32_t* index, const int32_t* experts, const char* rows,
                           size_t stride, int count, int* cursors) {
  const int n = sizes.nranks, local = sizes.localExperts, base = sizes.rank * local;
  const bool fp8 = a.useFp8 != 0;
  const size_t slots = static_cast<size_t>(sizes.maxTokens) * n;  // rows per expert
  const int groups = (a.hidden + kScaleGroup - 1) / kScaleGroup;
  const size_t outRow = fp8 ? static_cast<size_t>(a.hidden) : sizeof(uint16_t) * a.hidden;
  int begins[1024];
  std::vector<int> many(local > 1024 ? local : 0);
  int* begin = local > 1024 ? many.data() : begins;
  for (int el = 0; el < local; ++el) begin[el] = cursors[el];
  for (int j = 0; j < count; ++j) {
    const int32_t* picks = experts + static_cast<size_t>(j) * a.topk;
    const char* row = rows + j * stride;
    for (int k = 0; k < a.topk; ++k) {
      const int e = picks[k];
      if (e < base || e >= base + local || !firstPick(picks, k, e)) continue;
      const int el = e - base, pos = cursors[el]++;
      const size_t slot = el * slots + pos;
      std::memcpy(static_cast<char*>(a.recvX) + slot * outRow, row, outRow);
      a.recvSrcInfo[slot] = index[j];
      if (!fp8) continue;
      const float* scales = reinterpret_cast<const float*>(row + align64(a.hidden));
      if (a.useUe8m0) {
        // Four exponents per int32, column-major per expert: [el][group / 4][slot].
        uint8_t* packed = static_cast<uint8_t*>(a.recvScales);
        const size_t words = (groups + 3) / 4;
        for (int g = 0; g < groups; ++g) {
          uint32_t bits;
          std::memcpy(&bits, &scales[g], sizeof(bits));
          packed[((el * words + g / 4) * slots + pos) * 4 + g % 4] =
              static_cast<uint8_t>(bits >> 23);
        }
      } else {
        float* out = static_cast<float*>(a.recvScales);
        for (int g = 0; g < groups; ++g) out[(el * groups + g) * slots + pos] = scales[g];
      }
    }
  }
  for (int el = 0; el < local; ++el)
    a.recvLayoutRange[el * n + source] = packRange(begin[el], cursors[el] - begin[el]);
}

void finishLowLatencyDispatch(const Sizes& sizes, const loomEpLowLatencyDispatchArgs_t& a,
                              const int* cursors) {
  for (int el = 0; el < sizes.localExperts; ++el) {
    a.recvCount[el] = cursors[el];
    if (a.cumulativeRecvStats != nullptr) a.cumulativeRecvStats[el] += cursors[el];
  }
}

void countPicks(const Sizes& sizes, const int64_t* topkIdx, int numTokens, int topk,
                int32_t* perExpert) {
  std::fill(perExpert, perExpert + sizes.numExperts, 0);
  for (int t = 0; t < numTokens; ++t) {
    const int64_t* picks = topkIdx + static_cast<size_t>(t) * topk;
    for (int k = 0; k < topk; ++k) {
      if (picks[k] < 0) continue;
      bool first = true;
      for (int i = 0; i < k && first; ++i) first = picks[i] != picks[k];
      if (first) ++perExpert[picks[k]];
    }
  }
}

}  // namespace loom::ep
