// The GPU-native algorithms in the selector's table: for every collective, "ll" (LL packets, one
// network step; allreduce is one-shot) and "simple" (bulk chunks with flags; allreduce is two-shot
// reduce-scatter + all-gather). Both run as kernels driven by the communicator's CudaEngine.
#include "algorithms/families.hpp"
#include "device/cuda/cuda_engine.hpp"

namespace loom {

namespace {

template <CudaEngine::Protocol kProtocol>
void runOnGpu(const AlgoContext& ctx, const CollArgs& args) {
  static_cast<CudaEngine*>(ctx.deviceEngine)->run(args, kProtocol);
}

}  // namespace

void registerCudaAlgorithms(std::vector<Algorithm>& out) {
  const loomFunc_t funcs[] = {loomFuncAllReduce, loomFuncBroadcast,     loomFuncReduce,
                              loomFuncAllGather, loomFuncReduceScatter, loomFuncAllToAll,
                              loomFuncAllToAllv, loomFuncGather,        loomFuncScatter};
  for (loomFunc_t func : funcs) {
    out.push_back({func, "ll", &runOnGpu<CudaEngine::Protocol::kLL>, false, DeviceKind::kCuda});
    out.push_back(
        {func, "simple", &runOnGpu<CudaEngine::Protocol::kSimple>, false, DeviceKind::kCuda});
  }
  out.push_back(
      {loomFuncBarrier, "ll", &runOnGpu<CudaEngine::Protocol::kLL>, false, DeviceKind::kCuda});
}

}  // namespace loom
