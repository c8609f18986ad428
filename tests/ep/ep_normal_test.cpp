// Normal-mode dispatch and combine against a reference every rank computes for itself from the
// seeded routing: the layout, the received rows (grouped by source rank, in token order) with
// their top-k ids and weights, the cached dispatch, and combine bit for bit (identity: the input
// times its destination count; scaled per holder: the sum in rank order in fp32). Routings:
// random, all experts on one rank, ranks receiving nothing, sparse with -1, empty batches;
// hidden sizes that are multiples of nothing; bf16 and fp32; one round and many rounds.
#include <numeric>

#include "ep_test_util.hpp"

namespace loom::test::ep {
namespace {

struct Case {
  const char* name;
  Shape shape;
  int hidden;
  loomDataType_t dtype;
  int topk, localExperts;
  bool weights;
  size_t bufferBytes;  // 0: the default (one round)
  bool emptyBatches;   // every rank dispatches nothing
};

const Case kCases[] = {
    {"random bf16", Shape::kRandom, 37, loomBfloat16, 3, 2, true, 0, false},
    {"one rank fp32", Shape::kOneRank, 19, loomFloat32, 2, 3, true, 0, false},
    {"half empty bf16", Shape::kHalfEmpty, 70, loomBfloat16, 2, 2, false, 0, false},
    {"sparse fp32 many rounds", Shape::kSparse, 53, loomFloat32, 4, 2, true, 24 << 10, false},
    {"random bf16 many rounds", Shape::kRandom, 129, loomBfloat16, 3, 1, true, 40 << 10, false},
    {"empty batches", Shape::kRandom, 8, loomBfloat16, 2, 1, true, 0, true},
};

// Tokens per rank: uneven, one rank with none (from 3 ranks on).
std::vector<int> tokenCounts(const Case& c) {
  std::vector<int> n(gRanks);
  for (int r = 0; r < gRanks; ++r)
    n[r] = c.emptyBatches ? 0 : (gRanks >= 3 && r == 1) ? 0 : 9 + 7 * r + (r % 2) * 13;
  return n;
}
constexpr int kMaxTokens = 64;

struct Ep {
  loomComm_t comm = nullptr;
  loomEp_t ep = nullptr;
  Ep(const Case& c) {
    comm = makeComm();
    loomEpConfig_t config = LOOM_EP_CONFIG_INITIALIZER;
    config.maxTokensPerRank = kMaxTokens;
    config.hidden = 160;
    config.dtype = loomFloat32;
    config.maxTopk = 8;
    config.numExperts = c.localExperts * gRanks;
    config.bufferBytes = c.bufferBytes;
    EXPECT_LOOM(loomEpCreate(&ep, comm, &config));
  }
  ~Ep() {
    if (ep) loomEpDestroy(ep);
    if (comm) loomCommDestroy(comm);
  }
};

// What this rank receives: (source, token) in the documented order.
std::vector<std::pair<int, int>> expectedRows(const Routing& rt) {
  std::vector<std::pair<int, int>> rows;
  for (int s = 0; s < rt.ranks; ++s)
    for (int t = 0; t < rt.tokens[s]; ++t)
      if (rt.goesTo(s, t, gRank)) rows.emplace_back(s, t);
  return rows;
}

// The layout of this rank's tokens.
void checkLayout(const Routing& rt, int k, Mem& perRank, Mem& perExpert) {
  const int me = gRank, n = gRanks, tokens = rt.tokens[me], experts = rt.experts();
  std::vector<int32_t> wantRank(n, 0), wantExpert(experts, 0);
  for (int t = 0; t < tokens; ++t) {
    for (int d = 0; d < n; ++d) wantRank[d] += rt.goesTo(me, t, d);
    for (int i = 0; i < k; ++i)
      if (rt.pick(me, t, i) >= 0) ++wantExpert[rt.pick(me, t, i)];
  }
  EXPECT_EQ(perRank.get<int32_t>(n), wantRank);
  EXPECT_EQ(perExpert.get<int32_t>(experts), wantExpert);
}

// The received rows, their source indices, local top-k ids and weights.
void checkReceived(const Case& c, const Routing& rt, const std::vector<std::pair<int, int>>& want,
                   const std::vector<char>& gotX, Mem& recvSrc, Mem& recvTopk, Mem& recvWeights,
                   uint64_t seed) {
  const int me = gRank, k = c.topk, received = static_cast<int>(want.size());
  const size_t row = static_cast<size_t>(c.hidden) * dtypeSize(c.dtype);
  const std::vector<int32_t> gotSrc = recvSrc.get<int32_t>(received);
  const std::vector<int64_t> gotTopk = recvTopk.get<int64_t>(received * k);
  const std::vector<float> gotWeights = recvWeights.get<float>(received * k);
  for (int i = 0; i < received; ++i) {
    const auto [s, t] = want[i];
    ASSERT_EQ(gotSrc[i], t) << "row " << i;
    const std::vector<char> wantRow = tokenBytes(s, t + 1, c.hidden, c.dtype, seed);
    ASSERT_EQ(std::memcmp(gotX.data() + i * row, wantRow.data() + t * row, row), 0) << "row " << i;
    for (int j = 0; j < k; ++j) {
      const int64_t e = rt.pick(s, t, j);
      const bool local = e >= 0 && e / c.localExperts == me;
      EXPECT_EQ(gotTopk[i * k + j], local ? e % c.localExperts : -1) << "row " << i;
      if (c.weights) {
        EXPECT_EQ(gotWeights[i * k + j], local ? rt.weights[s][t * k + j] : 0.0f) << "row " << i;
      }
    }
  }
}

// Combine twice: identity, then each holder scaling its rows and returning the weights.
void checkCombines(const Case& c, const Routing& rt, Ep& ep, loomEpHandle_t& h, Mem& recvX,
                   Mem& recvWeights, const std::vector<char>& gotX, uint64_t seed) {
  const int me = gRank, n = gRanks, tokens = rt.tokens[me], k = c.topk;
  const int received = h.numRecvTokens;
  const size_t row = static_cast<size_t>(c.hidden) * dtypeSize(c.dtype);
  // Combine, identity: each token comes back times the number of ranks it went to, exactly.
  Mem combined(tokens * row), combinedWeights(tokens * k * 4);
  loomEpCombineArgs_t cb{};
  cb.size = sizeof(cb);
  cb.x = recvX.as<char>();
  cb.dtype = c.dtype;
  cb.hidden = c.hidden;
  cb.handle = &h;
  cb.combinedX = combined.as<char>();
  ASSERT_LOOM(loomEpCombine(ep.ep, &cb, nullptr));
  std::vector<char> got = combined.download(tokens * row), wantSum(tokens * row);
  for (int t = 0; t < tokens; ++t)
    for (int col = 0; col < c.hidden; ++col)
      writeValue(wantSum.data() + t * row, col, c.dtype,  // a token sent nowhere is +0
                 rt.destinations(me, t) == 0
                     ? 0.0f
                     : static_cast<float>(rt.destinations(me, t)) * tokenValue(me, t, col, seed));
  EXPECT_EQ(got, wantSum) << "identity combine";
  // Combine, each holder scaling its rows (1 + r/8, rounded to the type) and returning the
  // weights: the sum in rank order, in fp32, rounded once.
  std::vector<char> scaled = gotX;
  for (int i = 0; i < received; ++i)
    for (int col = 0; col < c.hidden; ++col)
      writeValue(scaled.data() + i * row, col, c.dtype,
                 readValue(gotX.data() + i * row, col, c.dtype) * (1.0f + me / 8.0f));
  Mem holder(received * row);
  holder.upload(scaled);
  cb.x = holder.as<char>();
  cb.topkWeights = c.weights ? recvWeights.as<float>() : nullptr;
  cb.topk = c.weights ? k : 0;
  cb.combinedTopkWeights = c.weights ? combinedWeights.as<float>() : nullptr;
  ASSERT_LOOM(loomEpCombine(ep.ep, &cb, nullptr));
  got = combined.download(tokens * row);
  for (int t = 0; t < tokens; ++t)
    for (int col = 0; col < c.hidden; ++col) {
      float sum = 0.0f;
      for (int r = 0; r < n; ++r) {
        if (!rt.goesTo(me, t, r)) continue;
        std::vector<char> one(row);
        writeValue(one.data(), 0, c.dtype, tokenValue(me, t, col, seed) * (1.0f + r / 8.0f));
        sum += readValue(one.data(), 0, c.dtype);
      }
      writeValue(wantSum.data() + t * row, col, c.dtype, sum);
    }
  EXPECT_EQ(got, wantSum) << "scaled combine";
  if (c.weights) {
    const std::vector<float> w = combinedWeights.get<float>(tokens * k);
    for (int t = 0; t < tokens; ++t)
      for (int j = 0; j < k; ++j)
        EXPECT_EQ(w[t * k + j], rt.pick(me, t, j) >= 0 ? rt.weights[me][t * k + j] : 0.0f);
  }
}

void runCase(const Case& c, uint64_t seed) {
  SCOPED_TRACE(std::string(c.name) + " ranks " + std::to_string(gRanks));
  Ep ep(c);
  ASSERT_NE(ep.ep, nullptr);
  const Routing rt = makeRouting(c.shape, seed, c.localExperts, c.topk, tokenCounts(c));
  const int me = gRank, n = gRanks, tokens = rt.tokens[me], k = c.topk, experts = rt.experts();
  const size_t row = static_cast<size_t>(c.hidden) * dtypeSize(c.dtype);
  Mem x(tokens * row), topk(tokens * k * 8), weights(tokens * k * 4), inRank(tokens * n);
  Mem perRank(n * 4), perExpert(experts * 4);
  x.upload(tokenBytes(me, tokens, c.hidden, c.dtype, seed));
  topk.upload(rt.picks[me]);
  weights.upload(rt.weights[me]);
  ASSERT_LOOM(loomEpLayout(ep.ep, topk.as<int64_t>(), tokens, k, perRank.as<int32_t>(),
                           perExpert.as<int32_t>(), inRank.as<uint8_t>(), nullptr));
  checkLayout(rt, k, perRank, perExpert);
  // Counts, then the tokens into arrays of exactly that size.
  Mem prefix(n * n * 4), sendHead(tokens * n * 4);
  loomEpHandle_t h{
      tokens, -1, prefix.as<int32_t>(), nullptr, sendHead.as<int32_t>(), inRank.as<uint8_t>()};
  loomEpDispatchArgs_t a{};
  a.size = sizeof(a);
  a.x = x.as<char>();
  a.dtype = c.dtype;
  a.hidden = c.hidden;
  a.numTokens = tokens;
  a.topkIdx = topk.as<int64_t>();
  a.topkWeights = c.weights ? weights.as<float>() : nullptr;
  a.topk = k;
  a.numTokensPerExpert = perExpert.as<int32_t>();
  std::vector<int32_t> perLocal(c.localExperts, -1);
  a.recvTokensPerExpert = perLocal.data();
  a.handle = &h;
  ASSERT_LOOM(loomEpDispatchCounts(ep.ep, &a, nullptr));
  const std::vector<std::pair<int, int>> want = expectedRows(rt);
  const int received = static_cast<int>(want.size());
  ASSERT_EQ(h.numRecvTokens, received);
  for (int l = 0; l < c.localExperts; ++l) {
    int count = 0;
    for (int s = 0; s < n; ++s)
      for (int t = 0; t < rt.tokens[s]; ++t)
        for (int i = 0; i < k; ++i) count += rt.pick(s, t, i) == me * c.localExperts + l;
    EXPECT_EQ(perLocal[l], count) << "local expert " << l;
  }
  Mem recvX(received * row), recvTopk(received * k * 8), recvWeights(received * k * 4),
      recvSrc(received * 4);
  h.recvSrcIdx = recvSrc.as<int32_t>();
  a.recvX = recvX.as<char>();
  a.recvTopkIdx = recvTopk.as<int64_t>();
  a.recvTopkWeights = c.weights ? recvWeights.as<float>() : nullptr;
  a.recvCapacity = received;
  a.recvTokensPerExpert = nullptr;
  ASSERT_LOOM(loomEpDispatch(ep.ep, &a, nullptr));
  const std::vector<char> gotX = recvX.download(received * row);
  checkReceived(c, rt, want, gotX, recvSrc, recvTopk, recvWeights, seed);
  // A cached dispatch (the handle's layout, no top-k) receives the same rows.
  Mem again(received * row);
  loomEpDispatchArgs_t cached = a;
  cached.topkIdx = nullptr;
  cached.topkWeights = nullptr;
  cached.topk = 0;
  cached.numTokensPerExpert = nullptr;
  cached.recvTopkIdx = nullptr;
  cached.recvTopkWeights = nullptr;
  cached.recvX = again.as<char>();
  ASSERT_LOOM(loomEpDispatch(ep.ep, &cached, nullptr));
  EXPECT_EQ(again.download(received * row), gotX);
  checkCombines(c, rt, ep, h, recvX, recvWeights, gotX, seed);
}

TEST(EpNormal, Cases) {
  uint64_t seed = 11;
  for (const Case& c : kCases) runCase(c, seed++);
}

// The same call twice gives the same bytes.
TEST(EpNormal, Deterministic) {
  const Case c = kCases[0];
  std::vector<char> first;
  for (int run = 0; run < 2; ++run) {
    Ep ep(c);
    const Routing rt = makeRouting(c.shape, 99, c.localExperts, c.topk, tokenCounts(c));
    const int tokens = rt.tokens[gRank], n = gRanks;
    const size_t row = static_cast<size_t>(c.hidden) * 2;
    Mem x(tokens * row), topk(tokens * c.topk * 8), inRank(tokens * n), prefix(n * n * 4),
        head(tokens * n * 4), src(kMaxTokens * n * 4), recv(kMaxTokens * n * row),
        out(tokens * row);
    x.upload(tokenBytes(gRank, tokens, c.hidden, c.dtype, 99));
    topk.upload(rt.picks[gRank]);
    ASSERT_LOOM(loomEpLayout(ep.ep, topk.as<int64_t>(), tokens, c.topk, nullptr, nullptr,
                             inRank.as<uint8_t>(), nullptr));
    loomEpHandle_t h{tokens,
                     -1,
                     prefix.as<int32_t>(),
                     src.as<int32_t>(),
                     head.as<int32_t>(),
                     inRank.as<uint8_t>()};
    loomEpDispatchArgs_t a{};
    a.size = sizeof(a);
    a.x = x.as<char>();
    a.dtype = c.dtype;
    a.hidden = c.hidden;
    a.numTokens = tokens;
    a.topkIdx = topk.as<int64_t>();
    a.topk = c.topk;
    a.recvX = recv.as<char>();
    a.recvCapacity = kMaxTokens * n;  // the worst case: the dispatch counts itself
    a.handle = &h;
    ASSERT_LOOM(loomEpDispatch(ep.ep, &a, nullptr));
    loomEpCombineArgs_t cb{};
    cb.size = sizeof(cb);
    cb.x = recv.as<char>();
    cb.dtype = c.dtype;
    cb.hidden = c.hidden;
    cb.handle = &h;
    cb.combinedX = out.as<char>();
    ASSERT_LOOM(loomEpCombine(ep.ep, &cb, nullptr));
    std::vector<char> bytes = recv.download(h.numRecvTokens * row);
    const std::vector<char> combined = out.download(tokens * row);
    bytes.insert(bytes.end(), combined.begin(), combined.end());
    if (run == 0)
      first = bytes;
    else
      EXPECT_EQ(bytes, first);
  }
}

}  // namespace
}  // namespace loom::test::ep
