#include "ep_test_util.hpp"

#include <dlfcn.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>

namespace loom::test::ep {

loomComm_t gWorld = nullptr;
int gRank = 0, gRanks = 1;
const loomDevicePlugin_v1* gPlugin = nullptr;
std::string gPlacement;

Mem::Mem(size_t bytes) {
  if (!onEmu()) {
    host_.resize(bytes + 8);
    ptr_ = host_.data();
    return;
  }
  EXPECT_EQ(gPlugin->memAlloc(0, bytes + 8, &ptr_), loomSuccess);
}

Mem::~Mem() {
  if (onEmu()) gPlugin->memFree(0, ptr_);
}

void Mem::upload(const void* data, size_t bytes) {
  if (bytes == 0) return;
  if (!onEmu()) {
    std::memcpy(ptr_, data, bytes);
    return;
  }
  EXPECT_EQ(gPlugin->memcpyAsync(0, ptr_, data, bytes, loomMemcpyHostToDevice, nullptr),
            loomSuccess);
  EXPECT_EQ(gPlugin->streamSynchronize(0, nullptr), loomSuccess);
}

std::vector<char> Mem::download(size_t bytes) const {
  std::vector<char> out(bytes);
  if (bytes == 0) return out;
  if (!onEmu()) {
    std::memcpy(out.data(), ptr_, bytes);
    return out;
  }
  EXPECT_EQ(gPlugin->memcpyAsync(0, out.data(), ptr_, bytes, loomMemcpyDeviceToHost, nullptr),
            loomSuccess);
  EXPECT_EQ(gPlugin->streamSynchronize(0, nullptr), loomSuccess);
  return out;
}

loomComm_t makeComm() {
  loomConfig_t config = LOOM_CONFIG_INITIALIZER;
  config.device = onEmu() ? "loom-emu:0" : "cpu";
  loomComm_t comm = nullptr;
  EXPECT_LOOM(loomCommSplit(gWorld, 0, gRank, &comm, &config));
  return comm;
}

uint64_t mix(uint64_t a, uint64_t b, uint64_t c, uint64_t d) {
  uint64_t x = a * 0x9e3779b97f4a7c15ull ^ (b + 0x632be59bd9b4e019ull) * 0xbf58476d1ce4e5b9ull ^
               (c + 0x8cb92ba72f3d8dd7ull) * 0x94d049bb133111ebull ^
               (d + 1) * 0xd6e8feb86659fd93ull;
  x ^= x >> 31;
  x *= 0xbf58476d1ce4e5b9ull;
  x ^= x >> 29;
  return x;
}

bool Routing::goesTo(int r, int t, int dest) const {
  for (int k = 0; k < topk; ++k) {
    const int64_t e = pick(r, t, k);
    if (e >= 0 && e / localExperts == dest) return true;
  }
  return false;
}

int Routing::destinations(int r, int t) const {
  int n = 0;
  for (int d = 0; d < ranks; ++d) n += goesTo(r, t, d) ? 1 : 0;
  return n;
}

Routing makeRouting(Shape shape, uint64_t seed, int localExperts, int topk,
                    const std::vector<int>& tokens) {
  Routing r;
  r.ranks = static_cast<int>(tokens.size());
  r.localExperts = localExperts;
  r.topk = topk;
  r.tokens = tokens;
  const int experts = r.experts();
  for (int s = 0; s < r.ranks; ++s) {
    std::vector<int64_t> picks;
    std::vector<float> weights;
    for (int t = 0; t < tokens[s]; ++t) {
      // Experts a token may pick, in a seeded order; the first `topk` distinct ones are its.
      int lo = 0, span = experts;
      if (shape == Shape::kOneRank) lo = ((s + 1) % r.ranks) * localExperts, span = localExperts;
      if (shape == Shape::kHalfEmpty) span = std::max(1, r.ranks / 2) * localExperts;
      std::vector<int64_t> mine;
      for (int k = 0; k < topk; ++k) {
        int64_t e = -1;
        for (int attempt = 0; attempt < 64 && e < 0; ++attempt) {
          const int64_t c = lo + static_cast<int64_t>(mix(seed, s, t, k * 64 + attempt) % span);
          if (std::find(mine.begin(), mine.end(), c) == mine.end()) e = c;
        }
        if (shape == Shape::kSparse && mix(seed + 7, s, t, k) % 10 < 4) e = -1;
        mine.push_back(e);
      }
      for (int k = 0; k < topk; ++k) {
        picks.push_back(mine[k]);
        weights.push_back(static_cast<float>(mix(seed + 3, s, t, k) % 1000) / 1000.0f);
      }
    }
    r.picks.push_back(std::move(picks));
    r.weights.push_back(std::move(weights));
  }
  return r;
}

float readValue(const char* row, int column, loomDataType_t dtype) {
  if (dtype == loomFloat32) {
    float v;
    std::memcpy(&v, row + 4 * column, 4);
    return v;
  }
  uint16_t b;
  std::memcpy(&b, row + 2 * column, 2);
  return bf16ToFloat(b);
}

void writeValue(char* row, int column, loomDataType_t dtype, float value) {
  if (dtype == loomFloat32) {
    std::memcpy(row + 4 * column, &value, 4);
    return;
  }
  const uint16_t b = floatToBf16(value);
  std::memcpy(row + 2 * column, &b, 2);
}

std::vector<char> tokenBytes(int rank, int tokens, int hidden, loomDataType_t dtype,
                             uint64_t seed) {
  const size_t row = static_cast<size_t>(hidden) * dtypeSize(dtype);
  std::vector<char> out(tokens * row);
  for (int t = 0; t < tokens; ++t)
    for (int h = 0; h < hidden; ++h)
      writeValue(out.data() + t * row, h, dtype, tokenValue(rank, t, h, seed));
  return out;
}

}  // namespace loom::test::ep

int main(int argc, char** argv) {
  using namespace loom::test::ep;
  ::testing::InitGoogleTest(&argc, argv);
  const char* path = std::getenv("LOOM_DEVICE_PLUGIN");
  if (path != nullptr) {
    void* library = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (library != nullptr)
      gPlugin = static_cast<const loomDevicePlugin_v1*>(dlsym(library, LOOM_DEVICE_PLUGIN_SYMBOL));
  }
  if (loomCommInitFromEnv(&gWorld, nullptr) != loomSuccess) {
    fprintf(stderr, "init failed: %s\n", loomGetLastError(nullptr));
    return 2;
  }
  loomCommUserRank(gWorld, &gRank);
  loomCommCount(gWorld, &gRanks);
  const char* placement = std::getenv("LOOM_TEST_PLACEMENT");
  gPlacement = placement != nullptr ? placement : std::string(gRanks, 'C');
  if (static_cast<int>(gPlacement.size()) != gRanks ||
      gPlacement.find_first_not_of("EC") != std::string::npos ||
      (gPlacement.find('E') != std::string::npos && gPlugin == nullptr)) {
    fprintf(stderr,
            "LOOM_TEST_PLACEMENT='%s' needs one letter E or C per rank (%d), and E "
            "ranks LOOM_DEVICE_PLUGIN\n",
            gPlacement.c_str(), gRanks);
    return 2;
  }
  const int result = RUN_ALL_TESTS();
  loomCommDestroy(gWorld);
  return result;
}
