// Shared pieces of the expert-parallel tests (run by every rank under loomrun): this rank's
// memory on its device (LOOM_TEST_PLACEMENT: E an emulated-device rank, C a CPU rank), routings
// and token values made from a seed that every rank can recompute for every rank, so that each
// rank checks its results against a reference computed independently of Loom's path.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "../api/expect_loom.hpp"
#include "base/dtype.hpp"
#include "loom/loom.h"
#include "loom/loom_device_plugin.h"

namespace loom::test::ep {

extern loomComm_t gWorld;
extern int gRank, gRanks;
extern const loomDevicePlugin_v1* gPlugin;
extern std::string gPlacement;
inline bool onEmu() { return gPlacement[gRank] == 'E'; }

// This rank's memory: emulated device memory on E ranks, host memory on C ranks.
class Mem {
 public:
  explicit Mem(size_t bytes);
  ~Mem();
  Mem(const Mem&) = delete;
  Mem& operator=(const Mem&) = delete;
  template <typename T>
  T* as() const {
    return static_cast<T*>(ptr_);
  }
  void upload(const void* data, size_t bytes);
  template <typename T>
  void upload(const std::vector<T>& v) {
    upload(v.data(), v.size() * sizeof(T));
  }
  std::vector<char> download(size_t bytes) const;
  template <typename T>
  std::vector<T> get(size_t count) const {
    std::vector<char> raw = download(count * sizeof(T));
    std::vector<T> out(count);
    if (count > 0) std::memcpy(out.data(), raw.data(), count * sizeof(T));
    return out;
  }

 private:
  void* ptr_ = nullptr;
  std::vector<char> host_;
};

// The test's communicator: this rank on its placement's device.
loomComm_t makeComm();

uint64_t mix(uint64_t a, uint64_t b = 0, uint64_t c = 0, uint64_t d = 0);

// A token's value at (rank, token, column): small multiples of 1/8, exact in bf16 and fp32.
inline float tokenValue(int rank, int token, int column, uint64_t seed) {
  return static_cast<float>(static_cast<int>(mix(seed, rank, token, column) % 61) - 30) / 8.0f;
}

// Every rank's routing of one case.
struct Routing {
  int ranks = 0, localExperts = 0, topk = 0;
  std::vector<int> tokens;                  // by rank
  std::vector<std::vector<int64_t>> picks;  // by rank: [tokens][topk], -1: none
  std::vector<std::vector<float>> weights;  // by rank: [tokens][topk]
  int experts() const { return ranks * localExperts; }
  int64_t pick(int r, int t, int k) const { return picks[r][static_cast<size_t>(t) * topk + k]; }
  bool goesTo(int r, int t, int dest) const;
  int destinations(int r, int t) const;
};

enum class Shape {
  kRandom,     // distinct random experts
  kOneRank,    // every token's experts on one rank (the next one)
  kHalfEmpty,  // experts only on the first half of the ranks: the rest receive nothing
  kSparse,     // many -1 picks, some tokens with none
};
Routing makeRouting(Shape shape, uint64_t seed, int localExperts, int topk,
                    const std::vector<int>& tokens);

// A rank's tokens as bytes of `dtype` (bf16 or fp32), [tokens][hidden].
std::vector<char> tokenBytes(int rank, int tokens, int hidden, loomDataType_t dtype, uint64_t seed);
float readValue(const char* row, int column, loomDataType_t dtype);
void writeValue(char* row, int column, loomDataType_t dtype, float value);

}  // namespace loom::test::ep
