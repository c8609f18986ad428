// The checks every path shares: a low-latency call's arguments, and the comparison of the ranks'
// headers that makes one rank's bad argument (or a disagreement) every rank's error.
#include <cstring>
#include <sstream>

#include "base/dtype.hpp"
#include "base/error.hpp"
#include "ep/ep_path.hpp"

namespace loom::ep {

namespace {

void checkCommon(const Sizes& sizes, int numTokens, int hidden, const int64_t* topkIdx, int topk,
                 Verdict& v) {
  if (!(sizes.modes & LOOM_EP_LOW_LATENCY))
    v.fail("this object was created without LOOM_EP_LOW_LATENCY");
  if (numTokens < 0 || numTokens > sizes.maxTokens)
    v.fail(numTokens, " tokens exceed the ", sizes.maxTokens, " per rank given at creation");
  if (hidden <= 0 || hidden > sizes.hidden)
    v.fail("hidden ", hidden, " is outside [1, ", sizes.hidden, "] (hidden at creation)");
  if (topk < 1 || topk > sizes.maxTopk)
    v.fail("topk ", topk, " is outside [1, ", sizes.maxTopk, "] (maxTopk at creation)");
  if (numTokens > 0 && topkIdx == nullptr) v.fail("topkIdx is NULL");
}

std::string describeShape(const CallShape& s) {
  std::ostringstream out;
  out << callKindName(s.kind) << "(hidden " << s.hidden;
  if (s.kind != CallKind::kLowLatencyDispatch && s.kind != CallKind::kLowLatencyCombine)
    out << " " << dtypeName(static_cast<loomDataType_t>(s.dtype));
  out << ", topk " << s.topk;
  if (s.numScales > 0) out << ", " << s.numScales << " scales";
  if (s.flags & kHasWeights) out << ", weights";
  if (s.flags & kCached) out << ", cached";
  if (s.flags & kFp8) out << ", fp8";
  if (s.flags & kRoundScale) out << ", round_scale";
  if (s.flags & kUe8m0) out << ", ue8m0";
  out << ")";
  return out.str();
}

}  // namespace

LowLatencyCall checkLowLatencyDispatch(const Sizes& sizes,
                                       const loomEpLowLatencyDispatchArgs_t& a) {
  LowLatencyCall call;
  call.dispatch = a;
  Verdict& v = call.verdict;
  checkCommon(sizes, a.numTokens, a.hidden, a.topkIdx, a.topk, v);
  if (a.numTokens > 0 && a.x == nullptr) v.fail("x is NULL");
  if (a.useUe8m0 && !(a.useFp8 && a.roundScale)) v.fail("useUe8m0 needs useFp8 and roundScale");
  if (a.recvX == nullptr || a.recvCount == nullptr || a.recvSrcInfo == nullptr ||
      a.recvLayoutRange == nullptr)
    v.fail("recvX, recvCount, recvSrcInfo and recvLayoutRange must be given");
  if (a.useFp8 && a.recvScales == nullptr) v.fail("recvScales must be given with useFp8");
  CallShape& s = call.shape;
  s.kind = CallKind::kLowLatencyDispatch;
  s.hidden = a.hidden;
  s.dtype = loomBfloat16;
  s.topk = a.topk;
  s.flags = (a.useFp8 ? kFp8 : 0) | (a.roundScale ? kRoundScale : 0) | (a.useUe8m0 ? kUe8m0 : 0);
  return call;
}

LowLatencyCall checkLowLatencyCombine(const Sizes& sizes, const loomEpLowLatencyCombineArgs_t& a) {
  LowLatencyCall call;
  call.combine = a;
  Verdict& v = call.verdict;
  checkCommon(sizes, a.numTokens, a.hidden, a.topkIdx, a.topk, v);
  if (a.numTokens > 0 && (a.topkWeights == nullptr || a.combinedX == nullptr))
    v.fail("topkWeights and combinedX must be given");
  if (a.srcInfo == nullptr || a.layoutRange == nullptr)
    v.fail("srcInfo and layoutRange (the dispatch's) must be given");
  CallShape& s = call.shape;
  s.kind = CallKind::kLowLatencyCombine;
  s.hidden = a.hidden;
  s.dtype = loomBfloat16;
  s.topk = a.topk;
  return call;
}

void fillHeader(CallHeader& h, uint64_t step, const CallShape& shape, const Verdict& verdict,
                int numTokens, int count) {
  h.step = step;
  h.shape = shape;
  h.status = verdict.status;
  h.numTokens = verdict.ok() ? numTokens : 0;
  h.count = verdict.ok() ? count : 0;
  h.first = 0;
  std::memset(h.reason, 0, sizeof(h.reason));
  verdict.reason.copy(h.reason, sizeof(h.reason) - 1);
}

void compareHeaders(std::span<const CallHeader* const> headers, const CallShape& mine) {
  const int n = static_cast<int>(headers.size());
  for (int r = 0; r < n; ++r)
    if (headers[r]->shape.kind != mine.kind) {
      std::ostringstream msg;
      msg << "expert-parallel calls differ across ranks:";
      for (int q = 0; q < n; ++q)
        msg << " rank " << q << " " << callKindName(headers[q]->shape.kind) << ";";
      LOOM_THROW(loomInvalidUsage, msg.str());
    }
  int bad = -1, others = 0;
  for (int r = 0; r < n; ++r)
    if (headers[r]->status != loomSuccess) (bad < 0 ? bad = r : ++others);
  if (bad >= 0) {
    const CallHeader& h = *headers[bad];
    LOOM_THROW(loomInvalidArgument, callKindName(mine.kind), ": rank ", bad,
               "'s arguments: ", std::string(h.reason, strnlen(h.reason, sizeof(h.reason))),
               others > 0 ? " (and " + std::to_string(others) + " other ranks')" : "");
  }
  for (int r = 1; r < n; ++r)
    if (!(headers[r]->shape == headers[0]->shape)) {
      std::ostringstream msg;
      msg << "expert-parallel calls differ across ranks (hidden size, data type, topk, scales and "
             "flags must agree):";
      for (int q = 0; q < n; ++q)
        msg << " rank " << q << " " << describeShape(headers[q]->shape) << ";";
      LOOM_THROW(loomInvalidArgument, msg.str());
    }
}

}  // namespace loom::ep
