#include "ep/ep_tokens.hpp"

#include <cmath>
#include <cstring>
#include <sstream>

#include "base/dtype.hpp"

namespace loom::ep {

size_t Sizes::maxRowBytes() const { return static_cast<size_t>(hidden) * dtypeSize(dtype); }

std::string Sizes::describe() const {
  std::ostringstream out;
  out << nranks << " ranks, " << numExperts << " experts (" << localExperts << " per rank), "
      << "up to " << maxTokens << " tokens per rank of hidden " << hidden << " " << dtypeName(dtype)
      << ", top-" << maxTopk << ((modes & LOOM_EP_NORMAL) ? ", normal" : "")
      << ((modes & LOOM_EP_LOW_LATENCY) ? ", low latency" : "");
  return out.str();
}

std::string badExperts(const int64_t* topkIdx, int numTokens, int topk, int numExperts) {
  for (int t = 0; t < numTokens; ++t)
    for (int k = 0; k < topk; ++k) {
      const int64_t e = topkIdx[static_cast<size_t>(t) * topk + k];
      if (e < -1 || e >= numExperts)
        return ::loom::detail::concat("token ", t, " names expert ", e, " (topk column ", k,
                                      "), outside [0, ", numExperts, ") and not -1");
    }
  return {};
}

namespace {

bool combineType(loomDataType_t t) {
  return t == loomBfloat16 || t == loomFloat16 || t == loomFloat32;
}

// What every call checks of its hidden size and data type against the sizes given at creation.
void checkRow(const Sizes& sizes, loomDataType_t dtype, int hidden, Verdict& v) {
  if (!dtypeValid(dtype)) return v.fail("unknown data type ", static_cast<int>(dtype));
  if (hidden <= 0) return v.fail("hidden ", hidden, " must be positive");
  if (static_cast<size_t>(hidden) * dtypeSize(dtype) > sizes.maxRowBytes())
    v.fail("a token of hidden ", hidden, " ", dtypeName(dtype), " (",
           static_cast<size_t>(hidden) * dtypeSize(dtype), " bytes) exceeds the ",
           sizes.maxRowBytes(), " bytes given at creation (hidden ", sizes.hidden, " ",
           dtypeName(sizes.dtype), ")");
}

void checkTopk(const Sizes& sizes, const int64_t* topkIdx, const float* weights, int topk,
               Verdict& v) {
  if (topkIdx == nullptr && weights != nullptr) return v.fail("topkWeights without topkIdx");
  if (topkIdx == nullptr) return;
  if (topk < 1 || topk > sizes.maxTopk)
    v.fail("topk ", topk, " is outside [1, ", sizes.maxTopk, "] (maxTopk at creation)");
}

}  // namespace

void checkExpertIds(const Sizes& sizes, const int64_t* topkIdx, int numTokens, int topk,
                    Verdict& v) {
  if (!v.ok() || topkIdx == nullptr || numTokens <= 0) return;
  const std::string bad = badExperts(topkIdx, numTokens, topk, sizes.numExperts);
  if (!bad.empty()) v.fail(bad);
}

NormalCall checkDispatch(const Sizes& sizes, const loomEpDispatchArgs_t& a, CallKind kind) {
  NormalCall call;
  call.dispatch = &a;
  call.handle = a.handle;
  call.numTokens = a.numTokens;
  Verdict& v = call.verdict;
  const bool moves = kind == CallKind::kDispatch;
  if (!(sizes.modes & LOOM_EP_NORMAL)) v.fail("this object was created without LOOM_EP_NORMAL");
  if (a.handle == nullptr) {
    v.fail("handle is NULL");
    return call;
  }
  const loomEpHandle_t& h = *a.handle;
  call.counting = !moves || h.numRecvTokens < 0;
  if (a.numTokens < 0 || a.numTokens > sizes.maxTokens)
    v.fail(a.numTokens, " tokens exceed the ", sizes.maxTokens, " per rank given at creation");
  checkRow(sizes, a.dtype, a.hidden, v);
  if (v.ok()) call.rowBytes = static_cast<size_t>(a.hidden) * dtypeSize(a.dtype);
  if (v.ok()) checkTopk(sizes, a.topkIdx, a.topkWeights, a.topk, v);
  if (a.numTokens > 0 && h.isTokenInRank == nullptr) v.fail("handle->isTokenInRank is NULL");
  if (a.numTokens > 0 && moves && a.x == nullptr) v.fail("x is NULL");
  if ((a.xScales != nullptr) != (a.numScales > 0))
    v.fail("xScales and numScales > 0 go together (numScales ", a.numScales, ")");
  if (call.counting) {
    if (h.rankPrefixMatrix == nullptr) v.fail("handle->rankPrefixMatrix is NULL");
    if (a.numTokens > 0 && h.sendHead == nullptr) v.fail("handle->sendHead is NULL");
    if (a.recvTokensPerExpert != nullptr && a.topkIdx == nullptr && a.numTokensPerExpert == nullptr)
      v.fail("recvTokensPerExpert needs topkIdx or numTokensPerExpert");
  } else if (h.numTokens != a.numTokens) {
    v.fail("the handle was made for ", h.numTokens, " tokens, the call has ", a.numTokens);
  } else if (h.numRecvTokens > a.recvCapacity) {
    v.fail("the handle receives ", h.numRecvTokens, " tokens, recvCapacity is ", a.recvCapacity);
  }
  if (moves) {
    if (a.recvCapacity < 0) v.fail("recvCapacity ", a.recvCapacity, " is negative");
    if (a.recvCapacity > 0 && (a.recvX == nullptr || h.recvSrcIdx == nullptr))
      v.fail("recvX and handle->recvSrcIdx must hold recvCapacity rows");
    if (a.recvCapacity > 0 && (a.xScales != nullptr) != (a.recvXScales != nullptr))
      v.fail("recvXScales goes with xScales");
    if (a.recvTopkIdx != nullptr && a.topkIdx == nullptr) v.fail("recvTopkIdx without topkIdx");
    if (a.recvTopkWeights != nullptr && a.topkWeights == nullptr)
      v.fail("recvTopkWeights without topkWeights");
    if (a.recvTopkWeights != nullptr && a.recvTopkIdx == nullptr)
      v.fail("recvTopkWeights without recvTopkIdx");
  }
  CallShape& s = call.shape;
  s.kind = kind;
  s.hidden = a.hidden;
  s.dtype = a.dtype;
  s.topk = a.topkIdx != nullptr ? a.topk : 0;
  s.numScales = a.numScales;
  s.flags = (a.topkWeights != nullptr ? kHasWeights : 0) | (a.topkIdx == nullptr ? kCached : 0);
  return call;
}

NormalCall checkCombine(const Sizes& sizes, const loomEpCombineArgs_t& a) {
  NormalCall call;
  call.combine = &a;
  call.handle = const_cast<loomEpHandle_t*>(a.handle);
  Verdict& v = call.verdict;
  if (!(sizes.modes & LOOM_EP_NORMAL)) v.fail("this object was created without LOOM_EP_NORMAL");
  if (a.handle == nullptr) {
    v.fail("handle is NULL");
    return call;
  }
  const loomEpHandle_t& h = *a.handle;
  call.numTokens = h.numTokens;
  if (h.numRecvTokens < 0) v.fail("the handle was not counted by a dispatch");
  if (h.numTokens < 0 || h.numTokens > sizes.maxTokens)
    v.fail("the handle's ", h.numTokens, " tokens exceed the ", sizes.maxTokens,
           " per rank given at creation");
  checkRow(sizes, a.dtype, a.hidden, v);
  if (v.ok() && !combineType(a.dtype))
    v.fail("combine sums bfloat16, float16 or float32, not ", dtypeName(a.dtype));
  if (v.ok()) call.rowBytes = static_cast<size_t>(a.hidden) * dtypeSize(a.dtype);
  if (h.rankPrefixMatrix == nullptr) v.fail("handle->rankPrefixMatrix is NULL");
  if (h.numRecvTokens > 0 && (a.x == nullptr || h.recvSrcIdx == nullptr))
    v.fail("x and handle->recvSrcIdx must hold the handle's received tokens");
  if (h.numTokens > 0 && (a.combinedX == nullptr || h.sendHead == nullptr))
    v.fail("combinedX and handle->sendHead must hold the handle's tokens");
  if (a.topkWeights != nullptr && (a.topk < 1 || a.topk > sizes.maxTopk))
    v.fail("topk ", a.topk, " is outside [1, ", sizes.maxTopk, "]");
  if (a.combinedTopkWeights != nullptr && a.topkWeights == nullptr)
    v.fail("combinedTopkWeights without topkWeights");
  CallShape& s = call.shape;
  s.kind = CallKind::kCombine;
  s.hidden = a.hidden;
  s.dtype = a.dtype;
  s.topk = a.topkWeights != nullptr ? a.topk : 0;
  s.flags = a.topkWeights != nullptr ? kHasWeights : 0;
  return call;
}

void computeLayout(const Sizes& sizes, const int64_t* topkIdx, int numTokens, int topk,
                   int32_t* perRank, int32_t* perExpert, uint8_t* inRank) {
  const int n = sizes.nranks, local = sizes.localExperts;
  if (perRank != nullptr) std::fill(perRank, perRank + n, 0);
  if (perExpert != nullptr) std::fill(perExpert, perExpert + sizes.numExperts, 0);
  uint8_t seen[1024];
  std::vector<uint8_t> many(n > 1024 ? n : 0);
  uint8_t* row = n > 1024 ? many.data() : seen;
  for (int t = 0; t < numTokens; ++t) {
    std::fill(row, row + n, 0);
    for (int k = 0; k < topk; ++k) {
      const int64_t e = topkIdx[static_cast<size_t>(t) * topk + k];
      if (e < 0) continue;
      row[e / local] = 1;
      if (perExpert != nullptr) ++perExpert[e];
    }
    for (int r = 0; r < n; ++r) {
      if (perRank != nullptr) perRank[r] += row[r];
      if (inRank != nullptr) inRank[static_cast<size_t>(t) * n + r] = row[r];
    }
  }
}

void fillCounts(const Sizes& sizes, const NormalCall& call, int32_t* counts) {
  const loomEpDispatchArgs_t& a = *call.dispatch;
  const int n = sizes.nranks;
  std::fill(counts, counts + n + sizes.numExperts, 0);
  const uint8_t* inRank = call.handle->isTokenInRank;
  for (int t = 0; t < a.numTokens; ++t)
    for (int r = 0; r < n; ++r) counts[r] += inRank[static_cast<size_t>(t) * n + r] != 0;
  int32_t* experts = counts + n;
  if (a.numTokensPerExpert != nullptr) {
    std::memcpy(experts, a.numTokensPerExpert, sizeof(int32_t) * sizes.numExperts);
  } else if (a.topkIdx != nullptr) {
    for (size_t i = 0; i < static_cast<size_t>(a.numTokens) * a.topk; ++i)
      if (a.topkIdx[i] >= 0) ++experts[a.topkIdx[i]];
  }
}

void planHandle(const Sizes& sizes, const NormalCall& call,
                std::span<const int32_t* const> countsOf) {
  const loomEpDispatchArgs_t& a = *call.dispatch;
  loomEpHandle_t& h = *call.handle;
  const int n = sizes.nranks, me = sizes.rank;
  for (int j = 0; j < n; ++j) {
    int32_t sum = 0;
    for (int i = 0; i < n; ++i) {
      sum += countsOf[i][j];
      h.rankPrefixMatrix[i * n + j] = sum;
    }
  }
  h.numTokens = a.numTokens;
  h.numRecvTokens = h.rankPrefixMatrix[(n - 1) * n + me];
  std::vector<int32_t> next(n, 0);
  if (me > 0)
    for (int r = 0; r < n; ++r) next[r] = h.rankPrefixMatrix[(me - 1) * n + r];
  for (int t = 0; t < a.numTokens; ++t)
    for (int r = 0; r < n; ++r) {
      const size_t i = static_cast<size_t>(t) * n + r;
      h.sendHead[i] = h.isTokenInRank[i] != 0 ? next[r]++ : -1;
    }
  if (a.recvTokensPerExpert == nullptr) return;
  const int align = std::max(a.expertAlignment, 1);
  for (int l = 0; l < sizes.localExperts; ++l) {
    int32_t sum = 0;
    for (int s = 0; s < n; ++s) sum += countsOf[s][n + me * sizes.localExperts + l];
    a.recvTokensPerExpert[l] = (sum + align - 1) / align * align;
  }
}

DispatchFormat dispatchFormat(const Sizes& sizes, const NormalCall& call) {
  DispatchFormat f;
  f.nranks = sizes.nranks;
  f.numExperts = sizes.numExperts;
  f.topk = call.shape.topk;
  f.numScales = call.shape.numScales;
  f.weights = (call.shape.flags & kHasWeights) != 0;
  f.rowBytes = call.rowBytes;
  return f;
}

CombineFormat combineFormat(const Sizes& sizes, const NormalCall& call) {
  CombineFormat f;
  f.nranks = sizes.nranks;
  f.topk = call.shape.topk;
  f.weights = (call.shape.flags & kHasWeights) != 0;
  f.rowBytes = call.rowBytes;
  return f;
}

namespace {

// Received row `pos` of a dispatch: everything but the row itself.
void writeMeta(const Sizes& sizes, const NormalCall& call, int pos, int token,
               const int32_t* experts, const int64_t* experts64, const float* weights,
               const float* scales) {
  const loomEpDispatchArgs_t& a = *call.dispatch;
  call.handle->recvSrcIdx[pos] = token;
  const int k = call.shape.topk, base = sizes.rank * sizes.localExperts;
  if (a.recvTopkIdx != nullptr) {
    for (int i = 0; i < k; ++i) {
      const int64_t e = experts != nullptr ? experts[i] : experts64[i];
      const bool here = e >= base && e < base + sizes.localExperts;
      a.recvTopkIdx[static_cast<size_t>(pos) * k + i] = here ? e - base : -1;
      if (a.recvTopkWeights != nullptr)
        a.recvTopkWeights[static_cast<size_t>(pos) * k + i] = here ? weights[i] : 0.0f;
    }
  }
  if (a.recvXScales != nullptr)
    std::memcpy(a.recvXScales + static_cast<size_t>(pos) * a.numScales, scales,
                sizeof(float) * a.numScales);
}

}  // namespace

void takeDispatchChunk(const char* chunk, const DispatchFormat& f, int count, const Sizes& sizes,
                       const NormalCall& call, int& cursor, bool rowsInPlace) {
  const loomEpDispatchArgs_t& a = *call.dispatch;
  const int32_t* index = reinterpret_cast<const int32_t*>(chunk + f.indexOffset());
  const uint8_t* ranks = reinterpret_cast<const uint8_t*>(chunk + f.inRankOffset(count));
  const int32_t* topk = reinterpret_cast<const int32_t*>(chunk + f.topkOffset(count));
  const float* weights = reinterpret_cast<const float*>(chunk + f.weightsOffset(count));
  const float* scales = reinterpret_cast<const float*>(chunk + f.scalesOffset(count));
  const char* rows = chunk + f.rowsOffset(count);
  char* out = static_cast<char*>(a.recvX);
  for (int j = 0; j < count; ++j) {
    if (ranks[j * f.rankBytes() + sizes.rank] == 0) continue;
    const int pos = cursor++;
    if (pos >= a.recvCapacity) continue;  // the caller reports the overflow
    writeMeta(sizes, call, pos, index[j], topk + j * f.topk, nullptr, weights + j * f.topk,
              scales + j * f.numScales);
    if (!rowsInPlace) std::memcpy(out + pos * f.rowBytes, rows + j * f.rowStride(), f.rowBytes);
  }
}

void takeOwnTokens(const Sizes& sizes, const NormalCall& call, int begin, int end, int& cursor) {
  const loomEpDispatchArgs_t& a = *call.dispatch;
  const int n = sizes.nranks, k = call.shape.topk;
  const char* x = static_cast<const char*>(a.x);
  char* out = static_cast<char*>(a.recvX);
  for (int t = begin; t < end; ++t) {
    if (call.handle->isTokenInRank[static_cast<size_t>(t) * n + sizes.rank] == 0) continue;
    const int pos = cursor++;
    if (pos >= a.recvCapacity) continue;
    writeMeta(sizes, call, pos, t, nullptr,
              a.topkIdx != nullptr ? a.topkIdx + static_cast<size_t>(t) * k : nullptr,
              a.topkWeights != nullptr ? a.topkWeights + static_cast<size_t>(t) * k : nullptr,
              a.xScales != nullptr ? a.xScales + static_cast<size_t>(t) * a.numScales : nullptr);
    std::memcpy(out + pos * call.rowBytes, x + t * call.rowBytes, call.rowBytes);
  }
}

void finishDispatch(const NormalCall& call, int received) {
  const loomEpDispatchArgs_t& a = *call.dispatch;
  if (a.recvTopkIdx == nullptr) return;
  const size_t k = static_cast<size_t>(call.shape.topk);
  for (size_t i = static_cast<size_t>(received) * k; i < static_cast<size_t>(a.recvCapacity) * k;
       ++i) {
    a.recvTopkIdx[i] = -1;
    if (a.recvTopkWeights != nullptr) a.recvTopkWeights[i] = 0.0f;
  }
}

namespace detail {

void addRow(float* acc, const char* row, loomDataType_t dtype, int count) {
  switch (dtype) {
    case loomBfloat16: {
      const uint16_t* p = reinterpret_cast<const uint16_t*>(row);
      for (int i = 0; i < count; ++i) acc[i] += bf16ToFloat(p[i]);
      return;
    }
    case loomFloat16: {
      const uint16_t* p = reinterpret_cast<const uint16_t*>(row);
      for (int i = 0; i < count; ++i) acc[i] += halfToFloat(p[i]);
      return;
    }
    default: {
      const float* p = reinterpret_cast<const float*>(row);
      for (int i = 0; i < count; ++i) acc[i] += p[i];
      return;
    }
  }
}

void storeRow(char* out, const float* acc, loomDataType_t dtype, int count) {
  switch (dtype) {
    case loomBfloat16: {
      uint16_t* p = reinterpret_cast<uint16_t*>(out);
      for (int i = 0; i < count; ++i) p[i] = floatToBf16(acc[i]);
      return;
    }
    case loomFloat16: {
      uint16_t* p = reinterpret_cast<uint16_t*>(out);
      for (int i = 0; i < count; ++i) p[i] = floatToHalf(acc[i]);
      return;
    }
    default:
      std::memcpy(out, acc, sizeof(float) * count);
      return;
  }
}

}  // namespace detail

namespace {

constexpr float kFp8Max = 448.0f;    // e4m3's largest finite value
constexpr float kAmaxFloor = 1e-4f;  // DeepEP's margin: an all-zero group still gets a scale

// 2^ceil(log2(v)) for a positive normal float.
float powerOfTwoCeil(float v) {
  int exponent = 0;
  const float mantissa =
      std::frexp(v, &exponent);  // v = mantissa * 2^exponent, mantissa in [0.5, 1)
  return std::ldexp(1.0f, mantissa == 0.5f ? exponent - 1 : exponent);
}

}  // namespace

void quantizeRow(const uint16_t* bf16, int hidden, bool roundScale, uint8_t* values,
                 float* scales) {
  for (int g = 0; g * kScaleGroup < hidden; ++g) {
    const int begin = g * kScaleGroup, end = std::min(hidden, begin + kScaleGroup);
    float amax = kAmaxFloor;
    for (int i = begin; i < end; ++i) amax = std::max(amax, std::fabs(bf16ToFloat(bf16[i])));
    float scale = kFp8Max / amax, scaleInv = amax / kFp8Max;
    if (roundScale) {
      scaleInv = powerOfTwoCeil(amax / kFp8Max);
      scale = 1.0f / scaleInv;
    }
    for (int i = begin; i < end; ++i) values[i] = floatToE4m3(bf16ToFloat(bf16[i]) * scale);
    scales[g] = scaleInv;
  }
}

}  // namespace loom::ep
