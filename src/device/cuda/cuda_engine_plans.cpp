// Execution plans on a CUDA communicator (docs/plans.md): loadPlan checks that the interpreting
// kernel (collectives/plan_kernel.hpp) can run a plan here and uploads it; runPlan sizes a call
// (protocol, slices, threads: from the call and the plan alone, so every rank sizes it alike) and
// launches it in the communicator's call order.
#include <algorithm>

#include "base/dtype.hpp"
#include "base/log.hpp"
#include "device/cuda/cuda_check.hpp"
#include "device/cuda/cuda_engine.hpp"

namespace loom {

namespace {

// What one block moves of an operation before an LL call is spread over another slice: one
// 8-byte word per thread. (Bulk calls: LOOM_CUDA_PLAN_SLICE_BYTES. Calls whose largest operation
// moves at most LOOM_CUDA_PLAN_LL_MAX_BYTES per part use LL packets, one flag in every 16 bytes
// and no fence: the latency of a small plan is a few such hops.)
constexpr uint64_t kPlanSliceBytesLL = 8 * cuda::kThreads;

}  // namespace

int CudaEngine::loadPlan(const NativePlan& plan, std::string& why) {
  checkContext();
  const std::string name = "execution plan '" + plan.name + "'";
  if (plan.nranks != setup_.nranks) {
    why = name + " is for " + std::to_string(plan.nranks) + " ranks, not " +
          std::to_string(setup_.nranks);
    return -1;
  }
  if (plan.mostLanes > planMaxBlocks_) {
    why = name + " runs " + std::to_string(plan.mostLanes) +
          " lanes on one rank, a thread block each, more than the " +
          std::to_string(planMaxBlocks_) +
          " blocks of the plan kernel that every rank's GPU (or its share of one) holds at once";
    return -1;
  }
  if (plan.mostReduceSources > static_cast<uint32_t>(cuda::kPlanMaxReduceSources)) {
    why = name + " reduces more than " + std::to_string(cuda::kPlanMaxReduceSources) +
          " chunks in one operation, more than the GPU kernel does";
    return -1;
  }
  DeviceScope scope(device_.ordinal());
  plans_.push_back(std::make_unique<CudaPlan>(plan));
  return static_cast<int>(plans_.size() - 1);
}

void CudaEngine::runPlan(int plan, const CollArgs& args, const NativePlanCall& call) {
  checkContext();
  DeviceScope scope(device_.ordinal());
  CudaPlan& loaded = *plans_.at(static_cast<size_t>(plan));
  inCallOrder(args.stream, "plan",
              [&](const CallStream& on) { enqueuePlan(loaded, args, call, on); });
}

CudaEngine::PlanCallShape CudaEngine::planCallShape(const NativePlan& plan, const CollArgs& args,
                                                    uint32_t parts) const {
  LOOM_CHECK_ARG(parts >= 1 && parts <= cuda::kPlanMaxParts, "execution plan '", plan.name, "' in ",
                 parts, " parts: the GPU kernel runs at most ", cuda::kPlanMaxParts);
  const size_t esize = dtypeSize(args.dtype);
  // The largest operation of any rank in one part: every choice below follows from it alone.
  const uint64_t partElements = (args.count + parts - 1) / parts;
  const uint64_t chunkElements = (partElements + plan.chunksPerBlock - 1) / plan.chunksPerBlock;
  const uint64_t largest = chunkElements * plan.mostChunksPerOp * esize;
  PlanCallShape shape;
  shape.ll = largest <= planLLMaxBytes_;
  shape.payload = static_cast<uint32_t>(shape.ll ? dev_.llSlotBytes / 2 : dev_.slotBytes);
  // Blocks per lane: part groups (LOOM_CUDA_PLAN_PART_GROUPS, 0: as many as parts), then slices.
  const int perLane = std::max(1, planMaxBlocks_ / plan.mostLanes);
  const int groupsWanted = planPartGroups_ == 0 ? static_cast<int>(parts) : planPartGroups_;
  shape.groups = std::clamp(std::min(groupsWanted, static_cast<int>(parts)), 1, perLane);
  const uint64_t perSlice = shape.ll ? kPlanSliceBytesLL : planSliceBytes_;
  shape.slices = static_cast<int>(std::clamp<uint64_t>(
      (largest + perSlice - 1) / perSlice, 1, static_cast<uint64_t>(perLane / shape.groups)));
  const uint64_t chunksPerSlice = largest / shape.slices / shape.payload + 2;  // splits round up
  LOOM_CHECK_ARG(chunksPerSlice < (1u << cuda::kPlanChunkBits), "execution plan '", plan.name,
                 "': an operation of ", largest, " bytes is more than the GPU kernel moves");
  shape.threads = shape.ll ? llThreads(largest, shape.slices) : cuda::kThreads;
  return shape;
}

void CudaEngine::enqueuePlan(CudaPlan& loaded, const CollArgs& args, const NativePlanCall& call,
                             const CallStream& on) {
  const NativePlan& plan = loaded.plan();
  if (args.count == 0) return;
  const PlanCallShape shape = planCallShape(plan, args, call.parts);
  const size_t esize = dtypeSize(args.dtype);
  const uint64_t blockBytes = args.count * esize;
  cuda::PlanKernelArgs a{};
  a.ll = shape.ll ? 1 : 0;
  a.payload = shape.payload;
  a.slices = shape.slices;
  a.groups = shape.groups;
  a.program = loaded.program(call.inPlace == NativePlanCall::InPlace::kAliased);
  a.count = args.count;
  a.elementSize = static_cast<uint32_t>(esize);
  a.chunksPerBlock = plan.chunksPerBlock;
  a.parts = call.parts;
  a.divisor = averageDivisor(args.op, setup_.nranks);
  a.state = loaded.state();
  a.input = static_cast<const char*>(args.send);
  a.output = static_cast<char*>(args.recv);
  // The input copy on a 256-byte boundary, as the call's buffers usually are.
  const uint64_t copyAt = (plan.scratchBlocks * blockBytes + 255) / 256 * 256;
  const bool copyInput = call.inPlace == NativePlanCall::InPlace::kCopy;
  const uint64_t inputBytes = plan.inputBlocks * blockBytes;
  a.scratch = loaded.scratch(copyAt + (copyInput ? inputBytes : 0), on.captured);
  if (copyInput) {
    // The input overlaps the output: the plan reads a copy made first, in stream order.
    char* copy = a.scratch + copyAt;
    LOOM_CUDA_CHECK(
        cudaMemcpyAsync(copy, a.input, inputBytes, cudaMemcpyDeviceToDevice, on.stream));
    a.input = copy;
  }
  const bool reduces = plan.func == loomFuncAllReduce || plan.func == loomFuncReduceScatter;
  const cuda::ReduceKey key = reduces ? cuda::ReduceKey{args.dtype, kernelOp(args.op),
                                                        resolveGpuAccum(args.dtype, args.accum)}
                                      : cuda::ReduceKey{loomUint8, loomSum, 0};
  cuda::launchPlan(dev_, a, key, loaded.lanes() * a.groups * a.slices, shape.threads, on.stream);
}

}  // namespace loom
