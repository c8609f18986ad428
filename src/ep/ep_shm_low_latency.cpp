// The low-latency calls over shared memory: one round each on the low-latency lane, whose two
// buffers alternate between consecutive calls (as DeepEP's two low-latency buffers do).
//   dispatch, send: the rank writes all its tokens (index, expert ids, bf16 row or e4m3 row and
//     scales) into its buffer and posts it. receive: for each source in rank order, each token
//     that picked a local expert is copied into that expert's rows, so every expert's rows come
//     grouped by source rank, in token order (recvLayoutRange says where each source's start).
//   combine, send: the holder copies its experts' rows (or finds them there: zero copy) into its
//     buffer, laid out as the dispatch received them, with its layout ranges, and posts it.
//     receive: each origin token sums weight * row over its top-k entries, in k order, in fp32.
#include <algorithm>
#include <cstring>
#include <new>

#include "base/dtype.hpp"
#include "base/error.hpp"
#include "ep/ep_low_latency.hpp"
#include "ep/ep_shm_path.hpp"

namespace loom::ep {

void ShmPath::lowLatencySend(LowLatencyCall& call) {
  const uint64_t step = ++lowLatencyStep_;
  call.step = step;
  regions_.begin(Lane::kLowLatency, step);
  const int me = sizes_.rank;
  if (call.isDispatch()) {
    const loomEpLowLatencyDispatchArgs_t& a = call.dispatch;
    char* chunk = regions_.llDispatch(me, step);
    const LowLatencyDispatchFormat f{a.topk, a.hidden, a.useFp8 != 0};
    const int count = call.verdict.ok() ? a.numTokens : 0;
    int32_t* index = reinterpret_cast<int32_t*>(chunk + f.indexOffset());
    int32_t* experts = reinterpret_cast<int32_t*>(chunk + f.topkOffset(count));
    char* rows = chunk + f.rowsOffset(count);
    const uint16_t* x = static_cast<const uint16_t*>(a.x);
    for (int t = 0; t < count; ++t) {
      index[t] = t;
      for (int k = 0; k < a.topk; ++k)
        experts[t * a.topk + k] =
            static_cast<int32_t>(a.topkIdx[static_cast<size_t>(t) * a.topk + k]);
      char* row = rows + t * f.rowStride();
      const uint16_t* in = x + static_cast<size_t>(t) * a.hidden;
      if (f.fp8)
        quantizeRow(in, a.hidden, a.roundScale != 0, reinterpret_cast<uint8_t*>(row),
                    reinterpret_cast<float*>(row + align64(a.hidden)));
      else
        std::memcpy(row, in, sizeof(uint16_t) * a.hidden);
    }
    fillHeader(*new (chunk) CallHeader(), step, call.shape, call.verdict, a.numTokens, count);
  } else {
    const loomEpLowLatencyCombineArgs_t& a = call.combine;
    char* chunk = regions_.llCombine(me, step);
    const LowLatencyCombineFormat f{sizes_.nranks, sizes_.localExperts, sizes_.maxTokens, a.hidden};
    if (call.verdict.ok()) {
      std::memcpy(chunk + f.rangesOffset(), a.layoutRange,
                  sizeof(int64_t) * sizes_.localExperts * sizes_.nranks);
      if (a.x != nullptr)  // else zero copy: the rows are in place already
        for (int el = 0; el < sizes_.localExperts; ++el) {
          int rows = 0;
          for (int s = 0; s < sizes_.nranks; ++s)
            rows = std::max(rows, rangeBegin(a.layoutRange[el * sizes_.nranks + s]) +
                                      rangeCount(a.layoutRange[el * sizes_.nranks + s]));
          const size_t offset = el * f.expertRows() * f.rowBytes();
          std::memcpy(chunk + f.rowsOffset() + offset, static_cast<const char*>(a.x) + offset,
                      rows * f.rowBytes());
        }
    }
    fillHeader(*new (chunk) CallHeader(), step, call.shape, call.verdict, a.numTokens, 0);
  }
  regions_.post(Lane::kLowLatency, step);
  if (call.verdict.ok()) return;
  // A bad argument fails here, on this rank, once the peers could see it; they fail in their
  // receive.
  lowLatencyReceive(call);
}

void ShmPath::lowLatencyReceive(LowLatencyCall& call) {
  for (int r = 0; r < sizes_.nranks; ++r)
    headers_[r] = reinterpret_cast<const CallHeader*>(
        call.isDispatch() ? regions_.llDispatch(r, call.step) : regions_.llCombine(r, call.step));
  exchange(Lane::kLowLatency, call.step, call.shape);
  if (call.isDispatch())
    lowLatencyDispatchReceive(call);
  else
    lowLatencyCombineReceive(call);
  regions_.consume(Lane::kLowLatency, call.step);
}

void ShmPath::lowLatencyDispatchReceive(LowLatencyCall& call) {
  const loomEpLowLatencyDispatchArgs_t& a = call.dispatch;
  const LowLatencyDispatchFormat f{a.topk, a.hidden, a.useFp8 != 0};
  std::fill(cursors_.begin(), cursors_.begin() + sizes_.localExperts, 0);
  for (int s = 0; s < sizes_.nranks; ++s) {
    const char* chunk = regions_.llDispatch(s, call.step);
    const int count = headers_[s]->count;
    placeLowLatencyTokens(sizes_, a, s, reinterpret_cast<const int32_t*>(chunk + f.indexOffset()),
                          reinterpret_cast<const int32_t*>(chunk + f.topkOffset(count)),
                          chunk + f.rowsOffset(count), f.rowStride(), count, cursors_.data());
  }
  finishLowLatencyDispatch(sizes_, a, cursors_.data());
}

void ShmPath::lowLatencyCombineReceive(LowLatencyCall& call) {
  const loomEpLowLatencyCombineArgs_t& a = call.combine;
  const int n = sizes_.nranks, me = sizes_.rank;
  const LowLatencyCombineFormat f{n, sizes_.localExperts, sizes_.maxTokens, a.hidden};
  reduceLowLatency(sizes_, a, seen_, [&](int r, int el, int i) {
    const char* chunk = regions_.llCombine(r, call.step);
    const int64_t range = reinterpret_cast<const int64_t*>(chunk + f.rangesOffset())[el * n + me];
    return chunk + f.rowsOffset() + (el * f.expertRows() + rangeBegin(range) + i) * f.rowBytes();
  });
}

char* ShmPath::nextCombineBuffer(int hidden) {
  const uint64_t next = lowLatencyStep_ + 1;
  regions_.begin(Lane::kLowLatency, next);  // no peer reads it any more
  const LowLatencyCombineFormat f{sizes_.nranks, sizes_.localExperts, sizes_.maxTokens, hidden};
  return regions_.llCombine(sizes_.rank, next) + f.rowsOffset();
}

}  // namespace loom::ep
