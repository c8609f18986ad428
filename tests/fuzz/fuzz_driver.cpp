// The fuzz targets' main where libFuzzer is not used (GCC builds, CI): a bounded random driver.
// It runs the target's seeds (loomFuzzSeeds, inputs made with Loom's own encoders), then mutates
// them (bit flips, byte overwrites with interesting values, inserts, deletes, truncations, splices
// of two inputs, random bytes) for -runs=N inputs or -max_total_time=S seconds, whichever ends
// first. A crash, a sanitizer report or an exception other than the ones the target expects ends
// the process with a non-zero status, like libFuzzer. Flags as libFuzzer's: -runs, -seed,
// -max_len, -max_total_time; --write-seeds DIR writes the seeds as libFuzzer's starting corpus.
#include <sys/stat.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "fuzz_target.hpp"

namespace {

using Bytes = std::vector<uint8_t>;

Bytes mutate(const std::vector<Bytes>& pool, std::mt19937_64& rng, size_t maxLen) {
  Bytes b = pool.empty() ? Bytes() : pool[rng() % pool.size()];
  const int steps = 1 + static_cast<int>(rng() % 4);
  static const uint8_t interesting[] = {0, 1, 2, 0x7f, 0x80, 0xff, 0xfe, 16, 32, 64};
  for (int s = 0; s < steps; ++s) {
    const size_t at = b.empty() ? 0 : rng() % b.size();
    switch (rng() % 8) {
      case 0:
        if (!b.empty()) b[at] ^= static_cast<uint8_t>(1u << (rng() % 8));
        break;
      case 1:
        if (!b.empty()) b[at] = interesting[rng() % sizeof(interesting)];
        break;
      case 2:
        b.insert(b.begin() + static_cast<long>(at), static_cast<uint8_t>(rng()));
        break;
      case 3:
        if (!b.empty()) b.erase(b.begin() + static_cast<long>(at));
        break;
      case 4:
        b.resize(b.empty() ? 0 : rng() % (b.size() + 1));
        break;
      case 5: {  // splice: a piece of another input
        if (pool.empty()) break;
        const Bytes& other = pool[rng() % pool.size()];
        if (other.empty()) break;
        const size_t from = rng() % other.size(), n = 1 + rng() % (other.size() - from);
        b.insert(b.begin() + static_cast<long>(at), other.begin() + static_cast<long>(from),
                 other.begin() + static_cast<long>(from + n));
        break;
      }
      case 6:  // a little-endian 64-bit word of an extreme value
        if (b.size() >= 8) {
          const uint64_t words[] = {0, 1, UINT64_MAX, UINT64_MAX / 2, 1ull << 32, 1ull << 63};
          std::memcpy(&b[rng() % (b.size() - 7)], &words[rng() % 6], 8);
        }
        break;
      default: {  // random bytes appended
        const size_t n = rng() % 64;
        for (size_t i = 0; i < n; ++i) b.push_back(static_cast<uint8_t>(rng()));
      }
    }
  }
  if (b.size() > maxLen) b.resize(maxLen);
  return b;
}

}  // namespace

int main(int argc, char** argv) {
  uint64_t runs = 10000, seed = 1;
  size_t maxLen = 4096;
  double maxSeconds = 0;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a.rfind("-runs=", 0) == 0) runs = std::strtoull(a.c_str() + 6, nullptr, 10);
    if (a.rfind("-seed=", 0) == 0) seed = std::strtoull(a.c_str() + 6, nullptr, 10);
    if (a.rfind("-max_len=", 0) == 0) maxLen = std::strtoull(a.c_str() + 9, nullptr, 10);
    if (a.rfind("-max_total_time=", 0) == 0) maxSeconds = std::atof(a.c_str() + 16);
    if (a == "--write-seeds" && i + 1 < argc) {
      const std::string dir = argv[++i];
      ::mkdir(dir.c_str(), 0755);
      std::vector<std::string> seeds;
      loomFuzzSeeds(seeds);
      for (size_t k = 0; k < seeds.size(); ++k)
        std::ofstream(dir + "/seed-" + std::to_string(k), std::ios::binary) << seeds[k];
      std::printf("%zu seeds written to %s\n", seeds.size(), dir.c_str());
      return 0;
    }
  }
  std::vector<std::string> seeds;
  loomFuzzSeeds(seeds);
  std::vector<Bytes> pool;
  for (const std::string& s : seeds) pool.emplace_back(s.begin(), s.end());
  std::mt19937_64 rng(seed);
  const auto start = std::chrono::steady_clock::now();
  uint64_t done = 0;
  for (const Bytes& b : pool) {
    LLVMFuzzerTestOneInput(b.data(), b.size());
    ++done;
  }
  for (; done < runs; ++done) {
    if (maxSeconds > 0 && (done & 255) == 0 &&
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() >
            maxSeconds)
      break;
    const Bytes b = mutate(pool, rng, maxLen);
    LLVMFuzzerTestOneInput(b.data(), b.size());
    // Inputs that parsed far enough to be worth mutating further join the pool, a little.
    if (pool.size() < 4096 && rng() % 64 == 0) pool.push_back(b);
  }
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf("Done %llu runs in %.1f s (%.0f exec/s), seed %llu\n",
              static_cast<unsigned long long>(done), seconds, done / std::max(seconds, 1e-9),
              static_cast<unsigned long long>(seed));
  return 0;
}
