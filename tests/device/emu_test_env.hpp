// What every test of emu_collectives_test shares (emu_collectives_test.cpp, emu_plans_test.cpp):
// the world communicator and this rank's placement (set by main), buffers of this rank's memory,
// the configurations each test runs, and the comparison with the reference.
// LOOM_TEST_PLACEMENT makes the communicator heterogeneous: one letter per rank, E for an
// emulated-device rank, C for a CPU rank (host buffers), H for an emulated-device rank that passes
// host buffers (its calls run on device scratch) and, in a build with CUDA, G for a CUDA rank
// (device memory of the current GPU), e.g. "ECECC", "HCEH" or "GCEC".
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <string>
#include <vector>

#include "../api/expect_loom.hpp"
#include "../api/test_values.hpp"
#include "loom/loom.h"
#include "loom/loom_device_plugin.h"
#ifdef LOOM_HAVE_CUDA
#include <cuda_runtime.h>
#endif

namespace loom::test {

inline loomComm_t gWorld = nullptr;
inline int gRank = 0, gRanks = 1;
inline const loomDevicePlugin_v1* gPlugin = nullptr;  // the same library Loom loaded
inline std::string gPlacement;                        // LOOM_TEST_PLACEMENT: E, C, H or G per rank

inline bool onEmu() { return gPlacement[gRank] == 'E'; }  // the buffers are emulated-device memory
inline bool emuRank() { return gPlacement[gRank] == 'E' || gPlacement[gRank] == 'H'; }
inline bool onGpu() { return gPlacement[gRank] == 'G'; }
inline bool allEmu() { return gPlacement.find_first_not_of('E') == std::string::npos; }
// A CUDA communicator (emu_plans_gpu_GG...): its sends and receives are the CUDA kernels', which
// match in issue order per pair and ignore tags (as NCCL's).
inline bool allGpu() { return gPlacement.find_first_not_of('G') == std::string::npos; }

// One allocation of this rank's memory (emulated device memory on E ranks, host memory on C
// ranks), with host-side fill and read through the plug-in's copies.
class DeviceBuffer {
 public:
  explicit DeviceBuffer(size_t bytes) : bytes_(bytes) {
#ifdef LOOM_HAVE_CUDA
    if (onGpu()) {
      EXPECT_EQ(cudaMalloc(&ptr_, bytes + 1), cudaSuccess);
      return;
    }
#endif
    if (!onEmu()) {
      host_.resize(bytes + 1);
      ptr_ = host_.data();
      return;
    }
    EXPECT_EQ(gPlugin->memAlloc(0, bytes + 1, &ptr_), loomSuccess);
  }
  ~DeviceBuffer() {
#ifdef LOOM_HAVE_CUDA
    if (onGpu()) cudaFree(ptr_);
#endif
    if (onEmu()) gPlugin->memFree(0, ptr_);
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  char* get() const { return static_cast<char*>(ptr_); }
  // Waits for the copy: `host` may be gone before the device's stream would get to it.
  void upload(const std::vector<char>& host) {
#ifdef LOOM_HAVE_CUDA
    if (onGpu()) {
      EXPECT_EQ(cudaMemcpy(ptr_, host.data(), host.size(), cudaMemcpyHostToDevice), cudaSuccess);
      return;
    }
#endif
    if (!onEmu()) {
      std::copy(host.begin(), host.end(), host_.begin());
      return;
    }
    EXPECT_EQ(
        gPlugin->memcpyAsync(0, ptr_, host.data(), host.size(), loomMemcpyHostToDevice, nullptr),
        loomSuccess);
    EXPECT_EQ(gPlugin->streamSynchronize(0, nullptr), loomSuccess);
  }
  std::vector<char> download() const {
    std::vector<char> host(bytes_ + 1);
#ifdef LOOM_HAVE_CUDA
    if (onGpu()) {
      EXPECT_EQ(cudaMemcpy(host.data(), ptr_, host.size(), cudaMemcpyDeviceToHost), cudaSuccess);
      return host;
    }
#endif
    if (!onEmu()) return host_;
    EXPECT_EQ(
        gPlugin->memcpyAsync(0, host.data(), ptr_, host.size(), loomMemcpyDeviceToHost, nullptr),
        loomSuccess);
    EXPECT_EQ(gPlugin->streamSynchronize(0, nullptr), loomSuccess);
    return host;
  }

 private:
  size_t bytes_;
  void* ptr_ = nullptr;
  std::vector<char> host_;  // C ranks
};

struct Config {
  const char* name;
  const char* algo;  // LOOM_ALGO of the communicator
  std::vector<size_t> sizes;
};

// The default table, and every collective forced onto its algorithm over pair channels.
inline const Config kConfigs[] = {
    {"auto", "", {0, 1, 7, 4099, (1u << 20) + 3}},
    {"channels",
     "allreduce:ring,allgather:ring,reducescatter:ring,broadcast:ring,reduce:ring,"
     "gather:pairwise,scatter:pairwise,alltoall:pairwise,alltoallv:pairwise,barrier:pairwise",
     {0, 7, 4099}},
};
inline const Config kMultiNode[] = {{"auto", "", {0, 1, 7, 4099, 70001}}};

inline bool multiNode() { return std::getenv("LOOM_NODE_ID") != nullptr; }

// EMU_TEST_ALGO=<a LOOM_ALGO value> replaces the configs by that one (execution plans of
// LOOM_PLAN_DIR: the emu_plans_* tests); multi-node sizes there too.
inline const char* forcedAlgo() { return std::getenv("EMU_TEST_ALGO"); }

// Heterogeneous placements and execution plans compose collectives out of the reductions that
// the homogeneous runs (emu_collectives_n*, collectives_test) test on every type and op. What a
// composition adds is where chunks are cut (an element size) and how partial results combine: a
// chunk reduced twice or missed shows in a sum, a divisor applied per part in an average, and an
// op lost on the way (a phase that sums where it should take the max) in one type of each size.
// So there sum and avg run on every type, prod, max and min on kTypePerSize.
inline bool composedRunCovers(loomDataType_t t, loomRedOp_t op) {
  const bool composed = !allEmu() || forcedAlgo() != nullptr;
  if (!composed || op == loomSum || op == loomAvg) return true;
  return std::find(std::begin(kTypePerSize), std::end(kTypePerSize), t) != std::end(kTypePerSize);
}

inline std::vector<Config> configs() {
  if (const char* forced = forcedAlgo()) {
    const size_t large = multiNode() ? 70001 : (1u << 20) + 3;
    return {{"forced", forced, {0, 1, 7, 4099, large}}};
  }
  if (multiNode()) return {std::begin(kMultiNode), std::end(kMultiNode)};
  return {std::begin(kConfigs), std::end(kConfigs)};
}

struct EmuComm {
  loomComm_t comm = nullptr;
  explicit EmuComm(const Config& c) {
    setenv("LOOM_ALGO", c.algo, 1);
    loomConfig_t config = LOOM_CONFIG_INITIALIZER;
    config.device = emuRank() ? "loom-emu:0" : onGpu() ? "cuda" : "cpu";
    loomResult_t r = loomCommSplit(gWorld, 0, gRank, &comm, &config);
    unsetenv("LOOM_ALGO");
    if (r != loomSuccess) ADD_FAILURE() << c.name << ": " << loomGetLastError(nullptr);
  }
  ~EmuComm() {
    if (comm) loomCommDestroy(comm);
  }
};

inline const loomRedOp_t kOps[] = {loomSum, loomProd, loomMax, loomMin, loomAvg};

inline std::string what(const char* op, const Config& c, loomDataType_t t, loomRedOp_t r,
                        bool inPlace, size_t n) {
  return std::string(op) + " " + c.name + " " + dtypeName(t) + " " + opName(r) +
         (inPlace ? " in-place" : "") + " count " + std::to_string(n) + " ranks " +
         std::to_string(gRanks);
}

inline void expectMatch(const Pattern& want, const std::vector<char>& got, size_t offsetBytes,
                        size_t count, size_t first, const std::string& label) {
  EXPECT_EQ(want.firstMismatch(got.data() + offsetBytes, count, first), -1) << label;
}

}  // namespace loom::test
