// Bad arguments on one rank fail the call on every rank with loomInvalidArgument (the ranks
// exchange their checks before data moves), nothing hangs, and the communicator and the object
// stay usable: an expert id out of range, more tokens than the sizes given at creation, hidden
// sizes that differ across ranks, a bad low-latency call with and without hooks, and creation
// with sizes that differ.
#include "ep_test_util.hpp"

namespace loom::test::ep {
namespace {

constexpr int kBadCallTokens = 6, kBadCallHidden = 24, kBadCallTopk = 2;

struct Fixture {
  loomComm_t comm = nullptr;
  loomEp_t ep = nullptr;
  explicit Fixture(int modes = LOOM_EP_NORMAL | LOOM_EP_LOW_LATENCY) {
    comm = makeComm();
    loomEpConfig_t config = LOOM_EP_CONFIG_INITIALIZER;
    config.modes = modes;
    config.maxTokensPerRank = kBadCallTokens;
    config.hidden = kBadCallHidden;
    config.maxTopk = kBadCallTopk;
    config.numExperts = 2 * gRanks;
    EXPECT_LOOM(loomEpCreate(&ep, comm, &config));
  }
  ~Fixture() {
    if (ep) loomEpDestroy(ep);
    if (comm) loomCommDestroy(comm);
  }
};

// A dispatch-counts call with this rank's tokens, ids and hidden size; returns its result.
loomResult_t counts(Fixture& f, int tokens, int64_t badId, int hidden) {
  std::vector<int64_t> picks(kBadCallTokens * kBadCallTopk);
  for (int t = 0; t < kBadCallTokens; ++t)
    for (int k = 0; k < kBadCallTopk; ++k) picks[t * kBadCallTopk + k] = (t + k * 3) % (2 * gRanks);
  if (badId != 0) picks[1] = badId;
  Mem topk(picks.size() * 8), inRank(kBadCallTokens * gRanks), prefix(gRanks * gRanks * 4),
      head(kBadCallTokens * gRanks * 4);
  topk.upload(picks);
  std::vector<uint8_t> in(kBadCallTokens * gRanks, 0);
  for (int t = 0; t < kBadCallTokens; ++t)
    for (int k = 0; k < kBadCallTopk; ++k) {
      const int64_t e = picks[t * kBadCallTopk + k];
      if (e >= 0 && e < 2 * gRanks) in[t * gRanks + e / 2] = 1;
    }
  inRank.upload(in);
  loomEpHandle_t h{
      tokens, -1, prefix.as<int32_t>(), nullptr, head.as<int32_t>(), inRank.as<uint8_t>()};
  loomEpDispatchArgs_t a{};
  a.size = sizeof(a);
  a.dtype = loomBfloat16;
  a.hidden = hidden;
  a.numTokens = tokens;
  a.topkIdx = topk.as<int64_t>();
  a.topk = kBadCallTopk;
  a.handle = &h;
  return loomEpDispatchCounts(f.ep, &a, nullptr);
}

void expectEveryRankFails(loomResult_t result, const char* words) {
  EXPECT_EQ(result, loomInvalidArgument);
  EXPECT_NE(std::string(loomGetLastError(nullptr)).find(words), std::string::npos)
      << loomGetLastError(nullptr);
}

TEST(EpErrors, NormalCalls) {
  Fixture f;
  ASSERT_NE(f.ep, nullptr);
  const int last = gRanks - 1;
  expectEveryRankFails(counts(f, kBadCallTokens, gRank == last ? 2 * gRanks : 0, kBadCallHidden),
                       "'s arguments: token 0 names expert");
  expectEveryRankFails(
      counts(f, gRank == 0 ? kBadCallTokens + 1 : kBadCallTokens, 0, kBadCallHidden),
      "exceed the 6 per rank");
  if (gRanks > 1)
    expectEveryRankFails(
        counts(f, kBadCallTokens, 0, gRank == 1 ? kBadCallHidden - 1 : kBadCallHidden),
        "calls differ across ranks");
  expectEveryRankFails(counts(f, kBadCallTokens, gRank == 0 ? -2 : 0, kBadCallHidden),
                       "outside [0,");
  // Usable afterwards.
  EXPECT_LOOM(counts(f, kBadCallTokens, 0, kBadCallHidden));
  EXPECT_LOOM(loomBarrier(f.comm, nullptr));
}

TEST(EpErrors, LowLatencyCalls) {
  Fixture f;
  ASSERT_NE(f.ep, nullptr);
  const size_t slots = static_cast<size_t>(kBadCallTokens) * gRanks;
  Mem x(kBadCallTokens * kBadCallHidden * 2), topk(kBadCallTokens * kBadCallTopk * 8),
      recv(2 * slots * kBadCallHidden * 2), count(8), src(2 * slots * 4), range(2 * gRanks * 8);
  for (bool hook : {false, true}) {
    std::vector<int64_t> picks(kBadCallTokens * kBadCallTopk, 0);
    if (gRank == 0) picks[3] = 2 * gRanks + 5;
    topk.upload(picks);
    loomEpLowLatencyDispatchArgs_t d{};
    d.size = sizeof(d);
    d.x = x.as<char>();
    d.hidden = kBadCallHidden;
    d.numTokens = kBadCallTokens;
    d.topkIdx = topk.as<int64_t>();
    d.topk = kBadCallTopk;
    d.recvX = recv.as<char>();
    d.recvCount = count.as<int32_t>();
    d.recvSrcInfo = src.as<int32_t>();
    d.recvLayoutRange = range.as<int64_t>();
    int id = 0;
    loomResult_t r = loomEpLowLatencyDispatch(f.ep, &d, hook ? &id : nullptr, nullptr);
    if (r == loomSuccess && hook) r = loomEpHookWait(f.ep, id, nullptr);
    expectEveryRankFails(r, "names expert");
    picks[3] = 0;
    topk.upload(picks);
    r = loomEpLowLatencyDispatch(f.ep, &d, hook ? &id : nullptr, nullptr);
    EXPECT_EQ(r, loomSuccess) << loomGetLastError(nullptr);
    if (r == loomSuccess && hook) {
      EXPECT_LOOM(loomEpHookWait(f.ep, id, nullptr));
    }
  }
  // A wrongly sized argument struct is a bad argument like any other.
  loomEpLowLatencyDispatchArgs_t bad{};
  bad.size = gRank == 0 ? 3 : sizeof(bad);
  expectEveryRankFails(loomEpLowLatencyDispatch(f.ep, &bad, nullptr, nullptr),
                       gRank == 0 ? "sizeof" : "arguments");
}

// Any call above the sizes given at creation, on one rank only, fails on every rank.
TEST(EpErrors, AboveCreationSizes) {
  Fixture f;
  ASSERT_NE(f.ep, nullptr);
  const int last = gRanks - 1;
  expectEveryRankFails(
      counts(f, kBadCallTokens, 0, gRank == last ? 4 * kBadCallHidden + 1 : kBadCallHidden),
      "given at creation");
  const size_t slots = static_cast<size_t>(kBadCallTokens) * gRanks;
  Mem x((kBadCallTokens + 1) * (kBadCallHidden + 8) * 2),
      topk((kBadCallTokens + 1) * (kBadCallTopk + 1) * 8),
      recv(2 * slots * (kBadCallHidden + 8) * 2), count(8), src(2 * slots * 4),
      range(2 * gRanks * 8);
  topk.upload(std::vector<int64_t>((kBadCallTokens + 1) * (kBadCallTopk + 1), 0));
  auto lowLatency = [&](int tokens, int hidden, int k) {
    loomEpLowLatencyDispatchArgs_t d{};
    d.size = sizeof(d);
    d.x = x.as<char>();
    d.hidden = hidden;
    d.numTokens = tokens;
    d.topkIdx = topk.as<int64_t>();
    d.topk = k;
    d.recvX = recv.as<char>();
    d.recvCount = count.as<int32_t>();
    d.recvSrcInfo = src.as<int32_t>();
    d.recvLayoutRange = range.as<int64_t>();
    return loomEpLowLatencyDispatch(f.ep, &d, nullptr, nullptr);
  };
  const bool odd = gRank == last;
  expectEveryRankFails(
      lowLatency(odd ? kBadCallTokens + 1 : kBadCallTokens, kBadCallHidden, kBadCallTopk),
      "per rank given at creation");
  expectEveryRankFails(
      lowLatency(kBadCallTokens, odd ? kBadCallHidden + 8 : kBadCallHidden, kBadCallTopk),
      "(hidden at creation)");
  expectEveryRankFails(
      lowLatency(kBadCallTokens, kBadCallHidden, odd ? kBadCallTopk + 1 : kBadCallTopk),
      "(maxTopk at creation)");
  // Usable afterwards.
  EXPECT_LOOM(lowLatency(kBadCallTokens, kBadCallHidden, kBadCallTopk));
  EXPECT_LOOM(counts(f, kBadCallTokens, 0, kBadCallHidden));
}

TEST(EpErrors, CreationSizesDiffer) {
  loomComm_t comm = makeComm();
  loomEpConfig_t config = LOOM_EP_CONFIG_INITIALIZER;
  config.maxTokensPerRank = kBadCallTokens;
  config.hidden = gRank == 0 ? kBadCallHidden + 8 : kBadCallHidden;
  config.maxTopk = kBadCallTopk;
  config.numExperts = 2 * gRanks;
  loomEp_t ep = nullptr;
  const loomResult_t r = loomEpCreate(&ep, comm, &config);
  if (gRanks > 1) {
    expectEveryRankFails(r, "sizes differ across ranks");
    EXPECT_EQ(ep, nullptr);
  }
  loomEpDestroy(ep);  // one rank: nothing differs, it was made (LeakSanitizer saw it lost)
  ep = nullptr;
  config.hidden = kBadCallHidden;
  config.numExperts = gRank == 0 ? 0 : 2 * gRanks;
  expectEveryRankFails(loomEpCreate(&ep, comm, &config), "config");
  loomEpDestroy(ep);
  loomCommDestroy(comm);
}

}  // namespace
}  // namespace loom::test::ep
