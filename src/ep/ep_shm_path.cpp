#include "ep/ep_shm_path.hpp"

#include <algorithm>
#include <cstring>
#include <new>

#include "base/error.hpp"

namespace loom::ep {

ShmPath::ShmPath(Comm& comm, const Sizes& sizes) : sizes_(sizes), regions_(comm, sizes) {
  headers_.resize(sizes.nranks);
  counts_.resize(sizes.nranks);
  cursors_.resize(std::max(sizes.nranks, sizes.localExperts));
  ends_.resize(sizes.nranks);
  seen_.resize(sizes.numExperts);
}

std::unique_ptr<Path> makeShmPath(Comm& comm, const Sizes& sizes) {
  return std::make_unique<ShmPath>(comm, sizes);
}

char* ShmPath::chunkOf(Lane lane, int rank, uint64_t step) const {
  return lane == Lane::kNormal ? regions_.normal(rank, step) : regions_.llDispatch(rank, step);
}

void ShmPath::exchange(Lane lane, uint64_t step, const CallShape& shape) {
  for (int r = 0; r < sizes_.nranks; ++r) regions_.waitPosted(lane, r, step);
  try {
    compareHeaders(headers_, shape);
  } catch (...) {
    regions_.consume(lane, step);
    throw;
  }
}

namespace {

int32_t* countsBlock(char* chunk, const DispatchFormat& f) {
  return reinterpret_cast<int32_t*>(chunk + f.countsOffset());
}

int roundsFor(std::span<const CallHeader* const> headers, size_t perRound) {
  int most = 0;
  for (const CallHeader* h : headers) most = std::max(most, h->numTokens);
  return std::max<int>(1, static_cast<int>((most + perRound - 1) / perRound));
}

}  // namespace

void ShmPath::dispatchCounts(NormalCall& call) {
  const uint64_t step = ++normalStep_;
  regions_.begin(Lane::kNormal, step);
  char* chunk = regions_.normal(sizes_.rank, step);
  const DispatchFormat f = dispatchFormat(sizes_, call);
  fillHeader(*new (chunk) CallHeader(), step, call.shape, call.verdict, call.numTokens, 0);
  if (call.verdict.ok()) fillCounts(sizes_, call, countsBlock(chunk, f));
  regions_.post(Lane::kNormal, step);
  for (int r = 0; r < sizes_.nranks; ++r) {
    headers_[r] = reinterpret_cast<const CallHeader*>(regions_.normal(r, step));
    counts_[r] = countsBlock(regions_.normal(r, step), f);
  }
  exchange(Lane::kNormal, step, call.shape);
  planHandle(sizes_, call, counts_);
  regions_.consume(Lane::kNormal, step);
}

void ShmPath::dispatch(NormalCall& call) {
  const DispatchFormat f = dispatchFormat(sizes_, call);
  const size_t perRound = f.capacity(regions_.layout().normalBytes);
  if (perRound == 0)
    call.verdict.fail("a token of this dispatch (", f.tokenBytes(),
                      " bytes with its metadata) does not fit the ", regions_.layout().normalBytes,
                      "-byte buffer (bufferBytes at creation)");
  const int n = sizes_.nranks, me = sizes_.rank;
  const uint8_t* inRank = call.verdict.ok() ? call.handle->isTokenInRank : nullptr;
  // Staged: the tokens some other rank needs (this rank takes its own from its input).
  auto remote = [&](int t) {
    const uint8_t* row = inRank + static_cast<size_t>(t) * n;
    for (int r = 0; r < n; ++r)
      if (r != me && row[r] != 0) return true;
    return false;
  };
  int rounds = 1, received = 0;
  bool overflow = false;
  for (int k = 0; k < rounds; ++k) {
    const uint64_t step = ++normalStep_;
    regions_.begin(Lane::kNormal, step);
    char* chunk = regions_.normal(me, step);
    const int begin = call.verdict.ok() ? std::min<int>(call.numTokens, k * perRound) : 0;
    const int end = call.verdict.ok() ? std::min<int>(call.numTokens, begin + perRound) : 0;
    const int count =
        call.verdict.ok() ? buildDispatchChunk(chunk, f, call, begin, end, remote, true) : 0;
    fillHeader(*new (chunk) CallHeader(), step, call.shape, call.verdict, call.numTokens, count);
    if (k == 0 && call.counting && call.verdict.ok())
      fillCounts(sizes_, call, countsBlock(chunk, f));
    regions_.post(Lane::kNormal, step);
    for (int r = 0; r < n; ++r) {
      headers_[r] = reinterpret_cast<const CallHeader*>(regions_.normal(r, step));
      counts_[r] = countsBlock(regions_.normal(r, step), f);
    }
    if (k == 0) {
      exchange(Lane::kNormal, step, call.shape);
      rounds = roundsFor(headers_, perRound);
      if (call.counting) planHandle(sizes_, call, counts_);
      const int32_t* prefix = call.handle->rankPrefixMatrix;
      for (int s = 0; s < n; ++s) cursors_[s] = s == 0 ? 0 : prefix[(s - 1) * n + me];
      received = prefix[(n - 1) * n + me];
      overflow = received > call.dispatch->recvCapacity;
    } else {
      for (int r = 0; r < n; ++r) regions_.waitPosted(Lane::kNormal, r, step);
    }
    for (int s = 0; s < n; ++s) {
      if (s == me)
        takeOwnTokens(sizes_, call, begin, end, cursors_[s]);
      else
        takeDispatchChunk(regions_.normal(s, step), f, headers_[s]->count, sizes_, call,
                          cursors_[s], false);
    }
    regions_.consume(Lane::kNormal, step);
  }
  finishDispatch(call, std::min(received, call.dispatch->recvCapacity));
  if (overflow)
    LOOM_THROW(loomInvalidArgument, "dispatch: this rank receives ", received,
               " tokens, more than recvCapacity ", call.dispatch->recvCapacity,
               " (the rows that fit were received; the peers' calls succeeded)");
}

void ShmPath::combine(NormalCall& call) {
  const CombineFormat f = combineFormat(sizes_, call);
  const size_t perRound = f.tokensPerRound(regions_.layout().normalBytes);
  if (perRound == 0)
    call.verdict.fail("a combine row of this call (", f.rowStride(),
                      " bytes) for every rank does "
                      "not fit the ",
                      regions_.layout().normalBytes, "-byte buffer (bufferBytes at creation)");
  const loomEpCombineArgs_t& a = *call.combine;
  const int n = sizes_.nranks, me = sizes_.rank;
  const loomEpHandle_t* h = a.handle;  // null only with a failed verdict
  if (call.verdict.ok())
    for (int o = 0; o < n; ++o) {  // the rows received from origin o: [cursor, end)
      cursors_[o] = o == 0 ? 0 : h->rankPrefixMatrix[(o - 1) * n + me];
      ends_[o] = h->rankPrefixMatrix[o * n + me];
    }
  const char* x = static_cast<const char*>(a.x);
  const size_t weightsPerRow = static_cast<size_t>(call.shape.topk);
  int rounds = 1;
  for (int k = 0; k < rounds; ++k) {
    const uint64_t step = ++normalStep_;
    regions_.begin(Lane::kNormal, step);
    char* chunk = regions_.normal(me, step);
    const int lo = static_cast<int>(k * perRound), hi = static_cast<int>(lo + perRound);
    int32_t* table = reinterpret_cast<int32_t*>(chunk + f.originsOffset());
    // Rows first (their count sets where the rows start): per origin, its rows of this round.
    int total = 0;
    for (int o = 0; o < n && call.verdict.ok(); ++o) {
      const int first = cursors_[o];
      if (o != me)
        while (cursors_[o] < ends_[o] && h->recvSrcIdx[cursors_[o]] < hi) ++cursors_[o];
      table[3 * o] = total;
      table[3 * o + 1] = first;
      table[3 * o + 2] = o == me ? 0 : cursors_[o] - first;
      total += table[3 * o + 2];
    }
    char* rows = chunk + f.rowsOffset(total);
    float* weights = reinterpret_cast<float*>(chunk + f.weightsOffset());
    for (int o = 0; o < n && call.verdict.ok(); ++o)
      for (int i = 0; i < table[3 * o + 2]; ++i) {
        const int row = table[3 * o + 1] + i, at = table[3 * o] + i;
        std::memcpy(rows + at * f.rowStride(), x + row * call.rowBytes, call.rowBytes);
        if (f.weights)
          std::memcpy(weights + at * weightsPerRow, a.topkWeights + row * weightsPerRow,
                      sizeof(float) * weightsPerRow);
      }
    fillHeader(*new (chunk) CallHeader(), step, call.shape, call.verdict, call.numTokens, total);
    regions_.post(Lane::kNormal, step);
    for (int r = 0; r < n; ++r)
      headers_[r] = reinterpret_cast<const CallHeader*>(regions_.normal(r, step));
    if (k == 0) {
      exchange(Lane::kNormal, step, call.shape);
      rounds = roundsFor(headers_, perRound);
    } else {
      for (int r = 0; r < n; ++r) regions_.waitPosted(Lane::kNormal, r, step);
    }
    auto locate = [&](int r, int, int row) {
      if (r == me)
        return RowRef{x + row * call.rowBytes,
                      f.weights ? a.topkWeights + row * weightsPerRow : nullptr};
      const char* theirs = regions_.normal(r, step);
      const int32_t* t = reinterpret_cast<const int32_t*>(theirs + f.originsOffset());
      const int at = t[3 * me] + (row - t[3 * me + 1]);
      const int count = headers_[r]->count;
      return RowRef{theirs + f.rowsOffset(count) + at * f.rowStride(),
                    f.weights ? reinterpret_cast<const float*>(theirs + f.weightsOffset()) +
                                    at * weightsPerRow
                              : nullptr};
    };
    reduceTokens(call, n, std::min(lo, call.numTokens), std::min(hi, call.numTokens), locate);
    regions_.consume(Lane::kNormal, step);
  }
}

}  // namespace loom::ep
