// The network path (ranks on several hosts): every call is two executor schedules over the
// communicator's collective channels (node mates' shared-memory pair channels, TCP or rudp
// between hosts), one lane per peer and direction, all in flight together:
//   1. every rank's header block (its call, its verdict, its counts) to every other rank, so that
//      a bad argument or a disagreement fails every rank before any data moves;
//   2. the data, each byte once per destination rank:
//      dispatch: to each rank, the metadata of the tokens it gets (built like a shared-memory
//        chunk, ep_format.hpp), then their rows straight from the input in runs of consecutive
//        tokens; a receiver takes the rows straight into its receive rows (each source's tokens
//        are consecutive there) and the metadata into scratch;
//      combine: to each origin, the rows received from it (consecutive in the input) and their
//        weights; the origin sums them from scratch in rank order;
//      low latency: the same, with the fixed per-expert rows (FP8 rows quantized once).
// A low-latency call runs whole at the call (a channel's bytes move only while both ends drive
// it): its hook has nothing left to do. Scratch grows to the largest call and is reused.
#include <algorithm>
#include <cstring>
#include <memory>
#include <new>

#include "base/error.hpp"
#include "comm/comm.hpp"
#include "ep/ep_low_latency.hpp"
#include "ep/ep_path.hpp"
#include "exec/executor.hpp"

namespace loom::ep {

namespace {

// Bytes aligned to 64 (chunks start with 64-byte-aligned headers), grown to the largest call and
// reused; growing drops the contents.
class Scratch {
 public:
  char* data() const { return data_.get(); }
  size_t size() const { return size_; }
  void growTo(size_t bytes) {
    if (bytes <= size_) return;
    data_.reset(static_cast<char*>(::operator new(bytes, std::align_val_t(kAlign))));
    size_ = bytes;
  }

 private:
  struct Free {
    void operator()(char* p) const { ::operator delete(p, std::align_val_t(kAlign)); }
  };
  std::unique_ptr<char, Free> data_;
  size_t size_ = 0;
};

void growTo(Scratch& scratch, size_t bytes) { scratch.growTo(bytes); }

class WirePath final : public Path {
 public:
  WirePath(Comm& comm, const Sizes& sizes);
  void dispatchCounts(NormalCall& call) override;
  void dispatch(NormalCall& call) override;
  void combine(NormalCall& call) override;
  // The whole exchange runs at the call (a channel's bytes move only while both ends drive it),
  // so a hook has nothing left to do.
  void lowLatencySend(LowLatencyCall& call) override {
    call.isDispatch() ? lowLatencyDispatch(call) : lowLatencyCombine(call);
    call.received = true;
  }
  void lowLatencyReceive(LowLatencyCall&) override {}
  char* nextCombineBuffer(int hidden) override;

 private:
  // Phase 1: this rank's header (and counts) to every rank and theirs here; throws on a
  // disagreement or a bad argument anywhere.
  void exchangeHeaders(const CallShape& shape, const Verdict& verdict, int numTokens, int count);
  int32_t* myCounts() { return reinterpret_cast<int32_t*>(mine_.data() + sizeof(CallHeader)); }
  // Phase 2 on the schedule built into schedule_, with bindings_.
  void run();
  void clearSchedule() { schedule_.clear(sizes_.nranks); }
  // Sends the selected rows of `count` rows `stride` apart from `base` (at `address`) on, in runs
  // of consecutive ones. A channel pads every transfer to 8 bytes and the receiver takes the
  // rows as one transfer, so rows of another size are gathered at `gather` (`gatherAddress`)
  // and sent in one transfer.
  template <typename Selected>
  void sendRows(int peer, BufferRef base, const char* address, int count, size_t stride,
                Selected&& selected, BufferRef gather, char* gatherAddress);
  void lowLatencyDispatch(LowLatencyCall& call);
  void placeLowLatency(const loomEpLowLatencyDispatchArgs_t& a, int count, const char* ownRows,
                       size_t stride);
  void lowLatencyCombine(LowLatencyCall& call);

  const AlgoContext& ctx_;
  Sizes sizes_;
  size_t blockBytes_;
  Scratch mine_, theirs_;  // header blocks: this rank's, every rank's
  std::vector<const CallHeader*> headers_;
  std::vector<const int32_t*> counts_;
  Schedule schedule_;
  Executor executor_;
  std::vector<char*> bindings_;
  Scratch sendScratch_, recvScratch_, discard_, combineBuffer_;
  std::vector<size_t> sendAt_, recvAt_;  // by rank: where its part of the scratch starts
  std::vector<int> cursors_;
  std::vector<int32_t> picks_, seen_, expertAt_;
};

WirePath::WirePath(Comm& comm, const Sizes& sizes)
    : ctx_(comm.hostContext()),
      sizes_(sizes),
      blockBytes_(DispatchFormat{sizes.nranks, sizes.numExperts}.fixedBytes()) {
  mine_.growTo(blockBytes_);
  theirs_.growTo(blockBytes_ * sizes.nranks);
  std::memset(mine_.data(), 0, blockBytes_);
  headers_.resize(sizes.nranks);
  counts_.resize(sizes.nranks);
  for (int r = 0; r < sizes.nranks; ++r) {
    headers_[r] = reinterpret_cast<const CallHeader*>(theirs_.data() + r * blockBytes_);
    counts_[r] =
        reinterpret_cast<const int32_t*>(theirs_.data() + r * blockBytes_ + sizeof(CallHeader));
  }
  sendAt_.resize(sizes.nranks + 1);
  recvAt_.resize(sizes.nranks + 1);
  cursors_.resize(std::max(sizes.nranks, sizes.localExperts));
  picks_.resize(sizes.numExperts);
  seen_.resize(sizes.numExperts);
  expertAt_.resize(sizes.numExperts);
}

void WirePath::run() {
  schedule_.finish();
  ExecEnv env;
  env.device = ctx_.device;
  env.channels = std::span<Channel* const>(ctx_.channels->data(), ctx_.channels->size());
  env.check = &ctx_.check;
  env.pollSet = ctx_.pollSet;
  env.corePeers = ctx_.peers;
  env.streamingMinBytes = ctx_.streamingMinBytes;
  executor_.run(schedule_, std::span<char* const>(bindings_.data(), bindings_.size()), env);
}

void WirePath::exchangeHeaders(const CallShape& shape, const Verdict& verdict, int numTokens,
                               int count) {
  fillHeader(*new (mine_.data()) CallHeader(), 0, shape, verdict, numTokens, count);
  clearSchedule();
  schedule_.setExtents(blockBytes_, blockBytes_ * sizes_.nranks);
  for (int p = 0; p < sizes_.nranks; ++p) {
    if (p == sizes_.rank) continue;
    schedule_.send(p, schedule_.input(), blockBytes_);
    schedule_.recv(p, schedule_.output(p * blockBytes_), blockBytes_);
  }
  bindings_.assign({mine_.data(), theirs_.data()});
  run();
  std::memcpy(theirs_.data() + sizes_.rank * blockBytes_, mine_.data(), blockBytes_);
  compareHeaders(headers_, shape);
}

template <typename Selected>
void WirePath::sendRows(int peer, BufferRef base, const char* address, int count, size_t stride,
                        Selected&& selected, BufferRef gather, char* gatherAddress) {
  if (stride % 8 != 0) {
    size_t bytes = 0;
    for (int t = 0; t < count; ++t)
      if (selected(t))
        std::memcpy(gatherAddress + bytes, address + t * stride, stride), bytes += stride;
    schedule_.send(peer, gather, bytes);
    return;
  }
  for (int t = 0; t < count;) {
    if (!selected(t)) {
      ++t;
      continue;
    }
    int end = t + 1;
    while (end < count && selected(end)) ++end;
    schedule_.send(peer, base.at(t * stride), (end - t) * stride);
    t = end;
  }
}

// Bytes of gathered rows (see sendRows) for `rows` rows of `stride` bytes.
size_t gathered(int rows, size_t stride) { return stride % 8 != 0 ? align64(rows * stride) : 0; }

void WirePath::dispatchCounts(NormalCall& call) {
  if (call.verdict.ok()) fillCounts(sizes_, call, myCounts());
  exchangeHeaders(call.shape, call.verdict, call.numTokens, 0);
  planHandle(sizes_, call, counts_);
}

void WirePath::dispatch(NormalCall& call) {
  const int n = sizes_.nranks, me = sizes_.rank;
  if (call.verdict.ok()) fillCounts(sizes_, call, myCounts());
  exchangeHeaders(call.shape, call.verdict, call.numTokens, 0);
  if (call.counting) planHandle(sizes_, call, counts_);
  const loomEpDispatchArgs_t& a = *call.dispatch;
  const int32_t* prefix = call.handle->rankPrefixMatrix;
  const int received = prefix[(n - 1) * n + me];
  const bool overflow = received > a.recvCapacity;
  const DispatchFormat f = dispatchFormat(sizes_, call);
  const uint8_t* inRank = call.handle->isTokenInRank;
  // The metadata chunk for each peer (its tokens, in order), and room for each source's.
  sendAt_[0] = recvAt_[0] = 0;
  for (int r = 0; r < n; ++r) {
    sendAt_[r + 1] = sendAt_[r] + (r == me ? 0
                                           : align64(f.rowsOffset(myCounts()[r])) +
                                                 gathered(myCounts()[r], call.rowBytes));
    recvAt_[r + 1] = recvAt_[r] + (r == me ? 0 : align64(f.rowsOffset(counts_[r][me])));
  }
  growTo(sendScratch_, sendAt_[n]);
  growTo(recvScratch_, recvAt_[n]);
  if (overflow) growTo(discard_, static_cast<size_t>(received) * call.rowBytes);
  clearSchedule();
  schedule_.setExtents(static_cast<size_t>(a.numTokens) * call.rowBytes,
                       static_cast<size_t>(a.recvCapacity) * call.rowBytes);
  const uint16_t sendMeta = schedule_.addScratch("send metadata", sendAt_[n]);
  const uint16_t recvMeta = schedule_.addScratch("receive metadata", recvAt_[n]);
  const uint16_t sink = schedule_.addScratch("overflow", discard_.size());
  for (int p = 0; p < n; ++p) {
    if (p == me) continue;
    auto toPeer = [&](int t) { return inRank[static_cast<size_t>(t) * n + p] != 0; };
    const int count = buildDispatchChunk(sendScratch_.data() + sendAt_[p], f, call, 0, a.numTokens,
                                         toPeer, false);
    schedule_.send(p, schedule_.scratch(sendMeta, sendAt_[p] + f.indexOffset()),
                   f.rowsOffset(count) - f.indexOffset());
    const size_t gatherAt = sendAt_[p] + align64(f.rowsOffset(count));
    sendRows(p, schedule_.input(), static_cast<const char*>(a.x), a.numTokens, call.rowBytes,
             toPeer, schedule_.scratch(sendMeta, gatherAt), sendScratch_.data() + gatherAt);
    const int from = counts_[p][me], at = p == 0 ? 0 : prefix[(p - 1) * n + me];
    schedule_.recv(p, schedule_.scratch(recvMeta, recvAt_[p] + f.indexOffset()),
                   f.rowsOffset(from) - f.indexOffset());
    schedule_.recv(p,
                   overflow ? schedule_.scratch(sink, at * call.rowBytes)
                            : schedule_.output(at * call.rowBytes),
                   static_cast<size_t>(from) * call.rowBytes, !overflow);
  }
  bindings_.assign({static_cast<char*>(const_cast<void*>(a.x)), static_cast<char*>(a.recvX),
                    sendScratch_.data(), recvScratch_.data(), discard_.data()});
  run();
  for (int s = 0; s < n; ++s) {
    cursors_[s] = s == 0 ? 0 : prefix[(s - 1) * n + me];
    if (s == me)
      takeOwnTokens(sizes_, call, 0, a.numTokens, cursors_[s]);
    else if (!overflow)
      takeDispatchChunk(recvScratch_.data() + recvAt_[s], f, counts_[s][me], sizes_, call,
                        cursors_[s], true);
  }
  finishDispatch(call, std::min(received, a.recvCapacity));
  if (overflow)
    LOOM_THROW(loomInvalidArgument, "dispatch: this rank receives ", received,
               " tokens, more than recvCapacity ", a.recvCapacity,
               " (nothing was received; the peers' calls succeeded)");
}

void WirePath::combine(NormalCall& call) {
  exchangeHeaders(call.shape, call.verdict, call.numTokens, 0);
  const loomEpCombineArgs_t& a = *call.combine;
  const loomEpHandle_t& h = *a.handle;
  const int n = sizes_.nranks, me = sizes_.rank;
  const int32_t* prefix = h.rankPrefixMatrix;
  const size_t k = static_cast<size_t>(call.shape.topk);
  const bool weights = (call.shape.flags & kHasWeights) != 0;
  // Per holder r: the rows it sends back here (this rank's tokens that went to r), then weights.
  auto mineAt = [&](int r) { return me == 0 ? 0 : prefix[(me - 1) * n + r]; };
  auto rowsFrom = [&](int r) { return prefix[me * n + r] - mineAt(r); };
  recvAt_[0] = 0;
  for (int r = 0; r < n; ++r) {
    const size_t rows = r == me ? 0 : static_cast<size_t>(rowsFrom(r));
    recvAt_[r + 1] = recvAt_[r] + align64(rows * call.rowBytes) +
                     (weights ? align64(rows * k * sizeof(float)) : 0);
  }
  growTo(recvScratch_, recvAt_[n]);
  clearSchedule();
  schedule_.setExtents(static_cast<size_t>(h.numRecvTokens) * call.rowBytes, 0);
  const uint16_t sentWeights =
      schedule_.addScratch("weights", static_cast<size_t>(h.numRecvTokens) * k * sizeof(float));
  const uint16_t back = schedule_.addScratch("returned rows", recvAt_[n]);
  for (int p = 0; p < n; ++p) {
    if (p == me) continue;
    const int first = p == 0 ? 0 : prefix[(p - 1) * n + me], rows = prefix[p * n + me] - first;
    schedule_.send(p, schedule_.input(first * call.rowBytes), rows * call.rowBytes);
    if (weights)
      schedule_.send(p, schedule_.scratch(sentWeights, first * k * sizeof(float)),
                     rows * k * sizeof(float));
    const size_t from = static_cast<size_t>(rowsFrom(p));
    schedule_.recv(p, schedule_.scratch(back, recvAt_[p]), from * call.rowBytes);
    if (weights)
      schedule_.recv(p, schedule_.scratch(back, recvAt_[p] + align64(from * call.rowBytes)),
                     from * k * sizeof(float));
  }
  bindings_.assign({static_cast<char*>(const_cast<void*>(a.x)), nullptr,
                    reinterpret_cast<char*>(const_cast<float*>(a.topkWeights)),
                    recvScratch_.data()});
  run();
  const char* x = static_cast<const char*>(a.x);
  reduceTokens(call, n, 0, call.numTokens, [&](int r, int, int row) {
    if (r == me)
      return RowRef{x + row * call.rowBytes, weights ? a.topkWeights + row * k : nullptr};
    const char* base = recvScratch_.data() + recvAt_[r];
    const int i = row - mineAt(r);
    const size_t rows = static_cast<size_t>(rowsFrom(r));
    return RowRef{base + i * call.rowBytes,
                  weights
                      ? reinterpret_cast<const float*>(base + align64(rows * call.rowBytes)) + i * k
                      : nullptr};
  });
}

void WirePath::lowLatencyDispatch(LowLatencyCall& call) {
  const loomEpLowLatencyDispatchArgs_t& a = call.dispatch;
  const int n = sizes_.nranks, me = sizes_.rank, local = sizes_.localExperts;
  const int count = call.verdict.ok() ? a.numTokens : 0;
  // A token goes to every rank it picked an expert of.
  auto picksRank = [&](int t, int r) {
    for (int k = 0; k < a.topk; ++k) {
      const int64_t e = a.topkIdx[static_cast<size_t>(t) * a.topk + k];
      if (e >= 0 && e / local == r) return true;
    }
    return false;
  };
  int32_t* mine = myCounts();
  for (int r = 0; r < n; ++r) {
    mine[r] = 0;
    for (int t = 0; t < count; ++t) mine[r] += picksRank(t, r) ? 1 : 0;
  }
  exchangeHeaders(call.shape, call.verdict, a.numTokens, count);
  const LowLatencyDispatchFormat f{a.topk, a.hidden, a.useFp8 != 0};
  // Rows as they travel: bf16 straight from the input, or quantized once into scratch.
  const size_t stride = f.fp8 ? f.rowStride() : sizeof(uint16_t) * a.hidden;
  // Send scratch: every peer's metadata (index, experts), then the quantized rows.
  auto metaBytes = [&](int tokens) { return f.rowsOffset(tokens) - f.indexOffset(); };
  sendAt_[0] = recvAt_[0] = 0;
  for (int r = 0; r < n; ++r) {
    sendAt_[r + 1] = sendAt_[r] + align64(metaBytes(r == me ? count : mine[r])) +
                     (r == me ? 0 : gathered(mine[r], stride));
    const int from = r == me ? 0 : counts_[r][me];
    recvAt_[r + 1] = recvAt_[r] + align64(metaBytes(from)) + align64(from * stride);
  }
  const size_t quantized = sendAt_[n];
  growTo(sendScratch_, quantized + (f.fp8 ? count * stride : 0));
  growTo(recvScratch_, recvAt_[n]);
  char* send = sendScratch_.data();
  const uint16_t* x = static_cast<const uint16_t*>(a.x);
  if (f.fp8)
    for (int t = 0; t < count; ++t) {
      char* row = send + quantized + t * stride;
      quantizeRow(x + static_cast<size_t>(t) * a.hidden, a.hidden, a.roundScale != 0,
                  reinterpret_cast<uint8_t*>(row),
                  reinterpret_cast<float*>(row + align64(a.hidden)));
    }
  clearSchedule();
  schedule_.setExtents(static_cast<size_t>(count) * sizeof(uint16_t) * a.hidden, 0);
  const uint16_t out = schedule_.addScratch("send", sendScratch_.size());
  const uint16_t in = schedule_.addScratch("receive", recvAt_[n]);
  for (int p = 0; p < n; ++p) {
    // The metadata of the tokens for p (for this rank itself: all of them).
    int32_t* index = reinterpret_cast<int32_t*>(send + sendAt_[p]);
    const int tokens = p == me ? count : mine[p];
    int32_t* experts = reinterpret_cast<int32_t*>(send + sendAt_[p] + metaBytes(tokens) -
                                                  align64(sizeof(int32_t) * a.topk * tokens));
    int j = 0;
    for (int t = 0; t < count; ++t) {
      if (p != me && !picksRank(t, p)) continue;
      index[j] = t;
      for (int k = 0; k < a.topk; ++k)
        experts[j * a.topk + k] =
            static_cast<int32_t>(a.topkIdx[static_cast<size_t>(t) * a.topk + k]);
      ++j;
    }
    if (p == me) continue;
    schedule_.send(p, schedule_.scratch(out, sendAt_[p]), metaBytes(tokens));
    const size_t gatherAt = sendAt_[p] + align64(metaBytes(tokens));
    sendRows(
        p, f.fp8 ? schedule_.scratch(out, quantized) : schedule_.input(),
        f.fp8 ? send + quantized : static_cast<const char*>(a.x), count, stride,
        [&](int t) { return picksRank(t, p); }, schedule_.scratch(out, gatherAt), send + gatherAt);
    const int from = counts_[p][me];
    schedule_.recv(p, schedule_.scratch(in, recvAt_[p]), metaBytes(from));
    schedule_.recv(p, schedule_.scratch(in, recvAt_[p] + align64(metaBytes(from))), from * stride);
  }
  bindings_.assign(
      {static_cast<char*>(const_cast<void*>(a.x)), nullptr, send, recvScratch_.data()});
  run();
  placeLowLatency(a, count, f.fp8 ? send + quantized : static_cast<const char*>(a.x), stride);
}

void WirePath::placeLowLatency(const loomEpLowLatencyDispatchArgs_t& a, int count,
                               const char* ownRows, size_t stride) {
  // Every source's tokens (this rank's from its send scratch and input) into the receive arrays.
  const int me = sizes_.rank;
  const LowLatencyDispatchFormat f{a.topk, a.hidden, a.useFp8 != 0};
  auto metaBytes = [&](int tokens) { return f.rowsOffset(tokens) - f.indexOffset(); };
  std::fill(cursors_.begin(), cursors_.begin() + sizes_.localExperts, 0);
  for (int s = 0; s < sizes_.nranks; ++s) {
    const bool self = s == me;
    const int from = self ? count : counts_[s][me];
    const char* meta = self ? sendScratch_.data() + sendAt_[me] : recvScratch_.data() + recvAt_[s];
    const char* rows = self ? ownRows : meta + align64(metaBytes(from));
    placeLowLatencyTokens(sizes_, a, s, reinterpret_cast<const int32_t*>(meta),
                          reinterpret_cast<const int32_t*>(
                              meta + metaBytes(from) - align64(sizeof(int32_t) * a.topk * from)),
                          rows, stride, from, cursors_.data());
  }
  finishLowLatencyDispatch(sizes_, a, cursors_.data());
}

void WirePath::lowLatencyCombine(LowLatencyCall& call) {
  const loomEpLowLatencyCombineArgs_t& a = call.combine;
  exchangeHeaders(call.shape, call.verdict, a.numTokens, 0);
  const int n = sizes_.nranks, me = sizes_.rank, local = sizes_.localExperts;
  const size_t rowBytes = sizeof(uint16_t) * a.hidden;
  const size_t slots = static_cast<size_t>(sizes_.maxTokens) * n;
  const char* x = a.x != nullptr ? static_cast<const char*>(a.x) : combineBuffer_.data();
  countPicks(sizes_, a.topkIdx, a.numTokens, a.topk, picks_.data());
  recvAt_[0] = 0;
  for (int r = 0; r < n; ++r) {
    int rows = 0;
    for (int el = 0; el < local; ++el) {
      expertAt_[r * local + el] = rows;
      rows += r == me ? 0 : picks_[r * local + el];
    }
    recvAt_[r + 1] = recvAt_[r] + align64(rows * rowBytes);
  }
  growTo(recvScratch_, recvAt_[n]);
  clearSchedule();
  schedule_.setExtents(local * slots * rowBytes, 0);
  const uint16_t in = schedule_.addScratch("returned rows", recvAt_[n]);
  for (int p = 0; p < n; ++p) {
    if (p == me) continue;
    for (int el = 0; el < local; ++el) {
      const int64_t range = a.layoutRange[el * n + p];
      schedule_.send(p, schedule_.input((el * slots + rangeBegin(range)) * rowBytes),
                     rangeCount(range) * rowBytes);
    }
    size_t at = recvAt_[p];
    for (int el = 0; el < local; ++el) {
      schedule_.recv(p, schedule_.scratch(in, at), picks_[p * local + el] * rowBytes);
      at += picks_[p * local + el] * rowBytes;
    }
  }
  bindings_.assign({const_cast<char*>(x), nullptr, recvScratch_.data()});
  run();
  reduceLowLatency(sizes_, a, seen_, [&](int r, int el, int i) -> const char* {
    if (r == me) return x + (el * slots + rangeBegin(a.layoutRange[el * n + me]) + i) * rowBytes;
    return recvScratch_.data() + recvAt_[r] + (expertAt_[r * local + el] + i) * rowBytes;
  });
}

char* WirePath::nextCombineBuffer(int hidden) {
  growTo(combineBuffer_, static_cast<size_t>(sizes_.localExperts) * sizes_.maxTokens *
                             sizes_.nranks * hidden * sizeof(uint16_t));
  return combineBuffer_.data();
}

}  // namespace

std::unique_ptr<Path> makeWirePath(Comm& comm, const Sizes& sizes) {
  return std::make_unique<WirePath>(comm, sizes);
}

}  // namespace loom::ep
