// main() of gpu_collectives_test, run by every rank under loomrun: skips (exit 77) on a host
// without a GPU per local rank, else selects LOCAL_RANK's GPU, creates the world communicator on
// it and runs the tests.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cstdio>
#include <string>

#include "gpu_env.hpp"
#include "gpu_harness.hpp"
#include "loom/loom.h"

int main(int argc, char** argv) {
  using namespace loom::gputest;
  for (int i = 1; i < argc; ++i) {
    if (std::string(argv[i]) == "--gtest_list_tests") {  // needs no GPU
      ::testing::InitGoogleTest(&argc, argv);
      return RUN_ALL_TESTS();
    }
  }
  const bool cpu = cpuReferenceMode();
  const std::string why = cpu ? "" : gpuSkipReason(localRanks());
  if (!why.empty()) {
    std::printf("SKIPPED: %s\n", why.c_str());
    return kSkipExitCode;
  }
  int device = -1;
  if (cudaError_t e = cpu ? cudaSuccess : selectRankDevice(&device); e != cudaSuccess) {
    std::fprintf(stderr, "cudaSetDevice: %s\n", cudaErrorText(e).c_str());
    return 2;
  }
  ::testing::InitGoogleTest(&argc, argv);
  loomConfig_t config = LOOM_CONFIG_INITIALIZER;
  config.device = cpu ? "cpu" : "cuda";
  if (loomCommInitFromEnv(&gWorld, &config) != loomSuccess) {
    std::fprintf(stderr, "init on cuda:%d failed: %s\n", device, loomGetLastError(nullptr));
    return 2;
  }
  loomCommUserRank(gWorld, &gRank);
  loomCommCount(gWorld, &gRanks);
  cudaDeviceProp prop{};
  if (cpu) {
    std::printf("rank %d of %d on the CPU (GPUTEST_CPU_REFERENCE)\n", gRank, gRanks);
  } else if (cudaGetDeviceProperties(&prop, device) == cudaSuccess) {
    std::printf("rank %d of %d on cuda:%d (%s, PCI %04x:%02x:%02x)\n", gRank, gRanks, device,
                prop.name, prop.pciDomainID, prop.pciBusID, prop.pciDeviceID);
  }
  std::fflush(stdout);
  const int result = RUN_ALL_TESTS();
  loomCommDestroy(gWorld);
  return result;
}
