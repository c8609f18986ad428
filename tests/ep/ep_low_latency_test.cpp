// Low-latency dispatch and combine against a reference every rank computes from the seeded
// routing: each local expert's rows grouped by source rank in token order (recvCount,
// recvLayoutRange, recvSrcInfo), bf16 rows exactly and FP8 rows within e4m3's error with DeepEP's
// scales (plain, rounded to powers of two, as UE8M0 exponents), and the weighted combine bit for
// bit (k order, fp32), with and without hooks, and zero copy.
#include <algorithm>
#include <cmath>

#include "ep_test_util.hpp"

namespace loom::test::ep {
namespace {

constexpr int kLowLatencyMaxTokens = 12, kLowLatencyHidden = 200, kLowLatencyTopk = 3,
              kLowLatencyLocal = 2;

struct LowLatencyEp {
  loomComm_t comm = nullptr;
  loomEp_t ep = nullptr;
  LowLatencyEp() {
    comm = makeComm();
    loomEpConfig_t config = LOOM_EP_CONFIG_INITIALIZER;
    config.modes = LOOM_EP_LOW_LATENCY;
    config.maxTokensPerRank = kLowLatencyMaxTokens;
    config.hidden = kLowLatencyHidden;
    config.maxTopk = kLowLatencyTopk;
    config.numExperts = kLowLatencyLocal * gRanks;
    EXPECT_LOOM(loomEpCreate(&ep, comm, &config));
  }
  ~LowLatencyEp() {
    if (ep) loomEpDestroy(ep);
    if (comm) loomCommDestroy(comm);
  }
};

std::vector<int> counts() {
  std::vector<int> n(gRanks);
  for (int r = 0; r < gRanks; ++r) n[r] = (r * 5 + 3) % (kLowLatencyMaxTokens + 1);
  return n;
}

// The rows expert (me, el) receives, in order: (source, token).
std::vector<std::pair<int, int>> expertRows(const Routing& rt, int el) {
  std::vector<std::pair<int, int>> rows;
  const int64_t e = gRank * kLowLatencyLocal + el;
  for (int s = 0; s < rt.ranks; ++s)
    for (int t = 0; t < rt.tokens[s]; ++t)
      for (int k = 0; k < rt.topk; ++k)
        if (rt.pick(s, t, k) == e) rows.emplace_back(s, t);
  return rows;
}

// A holder's result for a row of expert e: the token scaled by 1 + (e % 4) / 4, in bf16.
float expertOutput(float v, int64_t e) {
  return bf16ToFloat(floatToBf16(v * (1.0f + static_cast<float>(e % 4) / 4.0f)));
}

struct Outputs {
  size_t slots = static_cast<size_t>(kLowLatencyMaxTokens) * gRanks;
  Mem x, recvX, scales, count, src, range;
  explicit Outputs(int tokens)
      : x(tokens * kLowLatencyHidden * 2),
        recvX(kLowLatencyLocal * slots * kLowLatencyHidden * 2),
        scales(kLowLatencyLocal * ((kLowLatencyHidden + 127) / 128) * slots * 4),
        count(kLowLatencyLocal * 4),
        src(kLowLatencyLocal * slots * 4),
        range(kLowLatencyLocal * gRanks * 8) {}
};

void checkDispatch(const Routing& rt, Outputs& o, bool fp8, bool round, bool ue8m0, uint64_t seed) {
  const std::vector<int32_t> count = o.count.get<int32_t>(kLowLatencyLocal);
  const std::vector<int32_t> src = o.src.get<int32_t>(kLowLatencyLocal * o.slots);
  const std::vector<int64_t> range = o.range.get<int64_t>(kLowLatencyLocal * gRanks);
  const int groups = (kLowLatencyHidden + 127) / 128;
  const std::vector<char> x =
      o.recvX.download(kLowLatencyLocal * o.slots * kLowLatencyHidden * (fp8 ? 1 : 2));
  const std::vector<char> scales = o.scales.download(kLowLatencyLocal * groups * o.slots * 4);
  for (int el = 0; el < kLowLatencyLocal; ++el) {
    const auto rows = expertRows(rt, el);
    ASSERT_EQ(count[el], static_cast<int>(rows.size())) << "expert " << el;
    int at = 0;
    for (int s = 0; s < gRanks; ++s) {
      int here = 0;
      for (const auto& [source, token] : rows) here += source == s;
      EXPECT_EQ(range[el * gRanks + s], (static_cast<int64_t>(at) << 32) | here);
      at += here;
    }
    for (size_t i = 0; i < rows.size(); ++i) {
      const auto [s, t] = rows[i];
      const size_t slot = el * o.slots + i;
      ASSERT_EQ(src[slot], t);
      for (int h = 0; h < kLowLatencyHidden; ++h) {
        const float want = tokenValue(s, t, h, seed);
        if (!fp8) {
          ASSERT_EQ(readValue(x.data() + slot * kLowLatencyHidden * 2, h, loomBfloat16), want);
          continue;
        }
        // The group's scale: amax / 448 (amax at least 1e-4), or its power-of-two ceiling.
        const int g = h / 128;
        float amax = 1e-4f;
        for (int j = g * 128; j < std::min(kLowLatencyHidden, g * 128 + 128); ++j)
          amax = std::max(amax, std::fabs(tokenValue(s, t, j, seed)));
        float scale = amax / 448.0f;
        if (round) scale = std::exp2(std::ceil(std::log2(scale)));
        float got;
        if (ue8m0) {
          const uint8_t e = static_cast<uint8_t>(
              scales[((el * ((groups + 3) / 4) + g / 4) * o.slots + i) * 4 + g % 4]);
          got = std::ldexp(1.0f, e - 127);
        } else {
          std::memcpy(&got, scales.data() + ((el * groups + g) * o.slots + i) * 4, 4);
        }
        ASSERT_EQ(got, scale) << "scale of group " << g;
        const float value =
            e4m3ToFloat(static_cast<uint8_t>(x[slot * kLowLatencyHidden + h])) * scale;
        // e4m3 keeps 3 mantissa bits: half a step is 2^-4 of the value; subnormals step 2^-9.
        ASSERT_LE(std::fabs(value - want), std::max(std::fabs(want) / 16, scale / 512) * 1.0001f)
            << "value " << want << " came back as " << value;
      }
    }
  }
}

// The experts' outputs, at the rows the dispatch gave them.
std::vector<char> expertResults(Outputs& o) {
  const std::vector<char> received =
      o.recvX.download(kLowLatencyLocal * o.slots * kLowLatencyHidden * 2);
  std::vector<char> results(received.size());
  for (int el = 0; el < kLowLatencyLocal; ++el)
    for (size_t i = 0; i < o.slots; ++i)
      for (int h = 0; h < kLowLatencyHidden; ++h) {
        const size_t at = (el * o.slots + i) * kLowLatencyHidden * 2;
        writeValue(results.data() + at, h, loomBfloat16,
                   expertOutput(readValue(received.data() + at, h, loomBfloat16),
                                gRank * kLowLatencyLocal + el));
      }
  return results;
}

void runDispatchCombine(bool fp8, bool round, bool ue8m0, bool hook, bool zeroCopy, uint64_t seed) {
  SCOPED_TRACE(std::string(fp8 ? "fp8" : "bf16") + (round ? " round" : "") +
               (ue8m0 ? " ue8m0" : "") + (hook ? " hook" : "") + (zeroCopy ? " zero-copy" : ""));
  LowLatencyEp ep;
  ASSERT_NE(ep.ep, nullptr);
  const Routing rt = makeRouting(Shape::kSparse, seed, kLowLatencyLocal, kLowLatencyTopk, counts());
  const int tokens = rt.tokens[gRank];
  Outputs o(tokens);
  Mem topk(tokens * kLowLatencyTopk * 8), weights(tokens * kLowLatencyTopk * 4),
      out(tokens * kLowLatencyHidden * 2);
  o.x.upload(tokenBytes(gRank, tokens, kLowLatencyHidden, loomBfloat16, seed));
  topk.upload(rt.picks[gRank]);
  weights.upload(rt.weights[gRank]);
  loomEpLowLatencyDispatchArgs_t d{};
  d.size = sizeof(d);
  d.x = o.x.as<char>();
  d.hidden = kLowLatencyHidden;
  d.numTokens = tokens;
  d.topkIdx = topk.as<int64_t>();
  d.topk = kLowLatencyTopk;
  d.useFp8 = fp8;
  d.roundScale = round;
  d.useUe8m0 = ue8m0;
  d.recvX = o.recvX.as<char>();
  d.recvScales = o.scales.as<char>();
  d.recvCount = o.count.as<int32_t>();
  d.recvSrcInfo = o.src.as<int32_t>();
  d.recvLayoutRange = o.range.as<int64_t>();
  int id = 0;
  ASSERT_LOOM(loomEpLowLatencyDispatch(ep.ep, &d, hook ? &id : nullptr, nullptr));
  if (hook) {
    ASSERT_LOOM(loomEpHookWait(ep.ep, id, nullptr));
  }
  checkDispatch(rt, o, fp8, round, ue8m0, seed);
  if (fp8 || ::testing::Test::HasFatalFailure()) return;
  const std::vector<char> results = expertResults(o);
  Mem y(results.size());
  loomEpLowLatencyCombineArgs_t c{};
  c.size = sizeof(c);
  if (zeroCopy) {
    void* buffer = nullptr;
    ASSERT_LOOM(loomEpLowLatencyCombineBuffer(ep.ep, kLowLatencyHidden, &buffer));
    std::memcpy(buffer, results.data(), results.size());
  } else {
    y.upload(results);
    c.x = y.as<char>();
  }
  c.hidden = kLowLatencyHidden;
  c.numTokens = tokens;
  c.topkIdx = topk.as<int64_t>();
  c.topkWeights = weights.as<float>();
  c.topk = kLowLatencyTopk;
  c.srcInfo = o.src.as<int32_t>();
  c.layoutRange = o.range.as<int64_t>();
  c.combinedX = out.as<char>();
  ASSERT_LOOM(loomEpLowLatencyCombine(ep.ep, &c, hook ? &id : nullptr, nullptr));
  if (hook) {
    ASSERT_LOOM(loomEpHookWait(ep.ep, id, nullptr));
  }
  const std::vector<char> got = out.download(tokens * kLowLatencyHidden * 2);
  for (int t = 0; t < tokens; ++t)
    for (int h = 0; h < kLowLatencyHidden; ++h) {
      float acc = 0.0f;
      for (int k = 0; k < kLowLatencyTopk; ++k) {
        const int64_t e = rt.pick(gRank, t, k);
        if (e < 0) continue;
        acc += rt.weights[gRank][t * kLowLatencyTopk + k] *
               expertOutput(tokenValue(gRank, t, h, seed), e);
      }
      ASSERT_EQ(readValue(got.data() + t * kLowLatencyHidden * 2, h, loomBfloat16),
                bf16ToFloat(floatToBf16(acc)))
          << "token " << t << " column " << h;
    }
}

TEST(EpLowLatency, Bf16) { runDispatchCombine(false, false, false, false, false, 5); }
TEST(EpLowLatency, Bf16Hooks) { runDispatchCombine(false, false, false, true, false, 6); }
TEST(EpLowLatency, ZeroCopy) {
  if (gPlacement.find('E') != std::string::npos)  // every rank skips alike
    GTEST_SKIP() << "no zero-copy buffer on staged device ranks";
  runDispatchCombine(false, false, false, false, true, 7);
}
TEST(EpLowLatency, Fp8) { runDispatchCombine(true, false, false, false, false, 8); }
TEST(EpLowLatency, Fp8RoundScale) { runDispatchCombine(true, true, false, true, false, 9); }
TEST(EpLowLatency, Fp8Ue8m0) { runDispatchCombine(true, true, true, false, false, 10); }

}  // namespace
}  // namespace loom::test::ep
