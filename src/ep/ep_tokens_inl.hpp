// The templates of ep_tokens.hpp.
#pragma once

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "base/error.hpp"

namespace loom::ep {

template <typename... Args>
void Verdict::fail(const Args&... args) {
  if (!ok()) return;  // the first reason is the one to report
  status = loomInvalidArgument;
  reason = ::loom::detail::concat(args...);
}

namespace detail {
// Row kernels over a block of `count` values of a combine's data type.
void addRow(float* acc, const char* row, loomDataType_t dtype, int count);
void storeRow(char* out, const float* acc, loomDataType_t dtype, int count);
}  // namespace detail

template <typename Wanted>
int buildDispatchChunk(char* chunk, const DispatchFormat& f, const NormalCall& call, int begin,
                       int end, Wanted&& wanted, bool withRows) {
  const loomEpDispatchArgs_t& a = *call.dispatch;
  const uint8_t* inRank = call.handle->isTokenInRank;
  int n = 0;
  for (int t = begin; t < end; ++t) n += wanted(t) ? 1 : 0;
  int32_t* index = reinterpret_cast<int32_t*>(chunk + f.indexOffset());
  uint8_t* ranks = reinterpret_cast<uint8_t*>(chunk + f.inRankOffset(n));
  int32_t* topk = reinterpret_cast<int32_t*>(chunk + f.topkOffset(n));
  float* weights = reinterpret_cast<float*>(chunk + f.weightsOffset(n));
  float* scales = reinterpret_cast<float*>(chunk + f.scalesOffset(n));
  char* rows = chunk + f.rowsOffset(n);
  const char* x = static_cast<const char*>(a.x);
  const size_t rankBytes = f.rankBytes(), stride = f.rowStride();
  int j = 0;
  for (int t = begin; t < end; ++t) {
    if (!wanted(t)) continue;
    index[j] = t;
    std::memcpy(ranks + j * rankBytes, inRank + static_cast<size_t>(t) * f.nranks, f.nranks);
    for (int k = 0; k < f.topk; ++k)
      topk[j * f.topk + k] = static_cast<int32_t>(a.topkIdx[static_cast<size_t>(t) * f.topk + k]);
    if (f.weights)
      std::memcpy(weights + j * f.topk, a.topkWeights + static_cast<size_t>(t) * f.topk,
                  sizeof(float) * f.topk);
    if (f.numScales > 0)
      std::memcpy(scales + j * f.numScales, a.xScales + static_cast<size_t>(t) * f.numScales,
                  sizeof(float) * f.numScales);
    if (withRows) std::memcpy(rows + j * stride, x + t * f.rowBytes, f.rowBytes);
    ++j;
  }
  return n;
}

template <typename Locate>
void reduceTokens(const NormalCall& call, int nranks, int begin, int end, Locate&& locate) {
  const loomEpCombineArgs_t& a = *call.combine;
  const loomEpHandle_t& h = *a.handle;
  const loomDataType_t dtype = a.dtype;
  const size_t rowBytes = call.rowBytes;
  const int hidden = a.hidden;
  constexpr int kBlock = 512;  // values per pass: the accumulator stays in L1
  alignas(64) float acc[kBlock];
  RowRef refs[64];
  RowRef* sources = refs;
  std::vector<RowRef> many;  // more ranks than the stack array (rare; grows once per call)
  if (nranks > 64) {
    many.resize(nranks);
    sources = many.data();
  }
  const size_t esize = hidden > 0 ? rowBytes / hidden : 0;
  for (int t = begin; t < end; ++t) {
    int n = 0;
    for (int r = 0; r < nranks; ++r) {
      const int row = h.sendHead[static_cast<size_t>(t) * nranks + r];
      if (row >= 0) sources[n++] = locate(r, t, row);
    }
    char* out = static_cast<char*>(a.combinedX) + t * rowBytes;
    for (int v = 0; v < hidden; v += kBlock) {
      const int len = std::min(kBlock, hidden - v);
      std::fill(acc, acc + len, 0.0f);
      if (a.bias0 != nullptr)
        detail::addRow(acc, static_cast<const char*>(a.bias0) + t * rowBytes + v * esize, dtype,
                       len);
      if (a.bias1 != nullptr)
        detail::addRow(acc, static_cast<const char*>(a.bias1) + t * rowBytes + v * esize, dtype,
                       len);
      for (int i = 0; i < n; ++i) detail::addRow(acc, sources[i].row + v * esize, dtype, len);
      detail::storeRow(out + v * esize, acc, dtype, len);
    }
    if (a.combinedTopkWeights != nullptr) {
      float* w = a.combinedTopkWeights + static_cast<size_t>(t) * a.topk;
      for (int k = 0; k < a.topk; ++k) {
        float sum = 0.0f;
        for (int i = 0; i < n; ++i)
          if (sources[i].weights != nullptr) sum += sources[i].weights[k];
        w[k] = sum;
      }
    }
  }
}

}  // namespace loom::ep
