#include "ep/ep_staged_calls.hpp"

namespace loom::ep {

namespace {

template <typename T>
T* bytes(const void* p) {
  return static_cast<T*>(const_cast<void*>(p));
}

}  // namespace

void stageDispatch(Staging& s, const Sizes& sizes, const NormalCall& call,
                   loomEpDispatchArgs_t& host, loomEpHandle_t& handle) {
  const loomEpDispatchArgs_t& a = *call.dispatch;
  const loomEpHandle_t& h = *a.handle;
  const size_t tokens = static_cast<size_t>(a.numTokens), n = sizes.nranks;
  const bool moves = call.shape.kind == CallKind::kDispatch;
  host = a;
  handle = h;
  host.handle = &handle;
  host.x = moves ? s.input(bytes<char>(a.x), tokens * call.rowBytes) : nullptr;
  host.xScales = s.input(a.xScales, tokens * a.numScales);
  host.topkIdx = s.input(a.topkIdx, tokens * a.topk);
  host.topkWeights = s.input(a.topkWeights, tokens * a.topk);
  host.numTokensPerExpert = s.input(a.numTokensPerExpert, sizes.numExperts);
  handle.isTokenInRank = s.input(h.isTokenInRank, tokens * n);
  if (call.counting) {
    handle.rankPrefixMatrix = s.output(h.rankPrefixMatrix, n * n);
    handle.sendHead = s.output(h.sendHead, tokens * n);
  } else {
    handle.rankPrefixMatrix = s.input(h.rankPrefixMatrix, n * n);
    handle.sendHead = nullptr;  // a dispatch reads no sendHead
  }
  if (!moves) return;
  const size_t rows = static_cast<size_t>(a.recvCapacity);
  host.recvX = s.output(bytes<char>(a.recvX), rows * call.rowBytes);
  host.recvXScales = s.output(a.recvXScales, rows * a.numScales);
  host.recvTopkIdx = s.output(a.recvTopkIdx, rows * a.topk);
  host.recvTopkWeights = s.output(a.recvTopkWeights, rows * a.topk);
  handle.recvSrcIdx = s.output(h.recvSrcIdx, rows);
}

void stageCombine(Staging& s, const Sizes& sizes, const NormalCall& call, loomEpCombineArgs_t& host,
                  loomEpHandle_t& handle) {
  const loomEpCombineArgs_t& a = *call.combine;
  const loomEpHandle_t& h = *a.handle;
  const size_t tokens = static_cast<size_t>(h.numTokens), n = sizes.nranks;
  const size_t received = static_cast<size_t>(h.numRecvTokens);
  host = a;
  handle = h;
  host.handle = &handle;
  host.x = s.input(bytes<char>(a.x), received * call.rowBytes);
  host.topkWeights = s.input(a.topkWeights, received * a.topk);
  host.bias0 = s.input(bytes<char>(a.bias0), tokens * call.rowBytes);
  host.bias1 = s.input(bytes<char>(a.bias1), tokens * call.rowBytes);
  handle.rankPrefixMatrix = s.input(h.rankPrefixMatrix, n * n);
  handle.recvSrcIdx = s.input(h.recvSrcIdx, received);
  handle.sendHead = s.input(h.sendHead, tokens * n);
  handle.isTokenInRank = nullptr;  // a combine reads no isTokenInRank
  host.combinedX = s.output(bytes<char>(a.combinedX), tokens * call.rowBytes);
  host.combinedTopkWeights = s.output(a.combinedTopkWeights, tokens * a.topk);
}

void stageLowLatencyDispatch(Staging& s, const Sizes& sizes,
                             const loomEpLowLatencyDispatchArgs_t& a,
                             loomEpLowLatencyDispatchArgs_t& host) {
  host = a;
  const size_t tokens = static_cast<size_t>(a.numTokens), local = sizes.localExperts;
  const size_t slots = static_cast<size_t>(sizes.maxTokens) * sizes.nranks;
  const size_t groups = (a.hidden + kScaleGroup - 1) / kScaleGroup;
  host.x = s.input(bytes<uint16_t>(a.x), tokens * a.hidden);
  host.topkIdx = s.input(a.topkIdx, tokens * a.topk);
  host.recvX = s.output(bytes<char>(a.recvX), local * slots * a.hidden * (a.useFp8 ? 1 : 2));
  const size_t scaleBytes = !a.useFp8    ? 0
                            : a.useUe8m0 ? local * ((groups + 3) / 4) * slots * 4
                                         : local * groups * slots * 4;
  host.recvScales = s.output(bytes<char>(a.recvScales), scaleBytes);
  host.recvCount = s.output(a.recvCount, local);
  host.recvSrcInfo = s.output(a.recvSrcInfo, local * slots);
  host.recvLayoutRange = s.output(a.recvLayoutRange, local * sizes.nranks);
  host.cumulativeRecvStats = s.inout(a.cumulativeRecvStats, local);
}

void stageLowLatencyCombine(Staging& s, const Sizes& sizes, const loomEpLowLatencyCombineArgs_t& a,
                            loomEpLowLatencyCombineArgs_t& host) {
  host = a;
  const size_t tokens = static_cast<size_t>(a.numTokens), local = sizes.localExperts;
  const size_t slots = static_cast<size_t>(sizes.maxTokens) * sizes.nranks;
  host.x = s.input(bytes<uint16_t>(a.x), local * slots * a.hidden);
  host.topkIdx = s.input(a.topkIdx, tokens * a.topk);
  host.topkWeights = s.input(a.topkWeights, tokens * a.topk);
  host.srcInfo = s.input(a.srcInfo, local * slots);
  host.layoutRange = s.input(a.layoutRange, local * sizes.nranks);
  host.combinedX = s.output(bytes<uint16_t>(a.combinedX), tokens * a.hidden);
}

}  // namespace loom::ep
