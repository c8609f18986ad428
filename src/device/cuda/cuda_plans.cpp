#include "device/cuda/cuda_plans.hpp"

#include <algorithm>
#include <cstring>
#include <utility>

#include "base/error.hpp"
#include "device/cuda/cuda_check.hpp"

namespace loom {

namespace {

cuda::DevChunks devChunks(const NativeChunks& c) { return {c.buffer, c.index, c.count}; }

size_t roundUp16(size_t bytes) { return (bytes + 15) / 16 * 16; }

}  // namespace

CudaPlan::CudaPlan(NativePlan plan) : plan_(std::move(plan)) {
  try {
    buildLanes();
    programs_[0] = upload(plan_.program);
    programs_[1] = plan_.aliased.ops.empty() ? programs_[0] : upload(plan_.aliased);
    const size_t words = cuda::planProgressWord(static_cast<uint32_t>(plan_.program.ops.size()), 0);
    state_ = reinterpret_cast<uint64_t*>(allocate(words * sizeof(uint64_t)));
    LOOM_CUDA_CHECK(cudaMemset(state_, 0, words * sizeof(uint64_t)));
    // The uploads ran on the legacy stream; the kernel runs on the caller's, which may not wait
    // for it.
    LOOM_CUDA_CHECK(cudaDeviceSynchronize());
  } catch (...) {
    for (char* p : allocations_) cudaFree(p);
    throw;
  }
}

CudaPlan::~CudaPlan() {
  // Kernels of this plan are finished: the engine synchronized its device before plans go.
  for (char* p : allocations_) cudaFree(p);
}

char* CudaPlan::allocate(size_t bytes) {
  void* p = nullptr;
  LOOM_CUDA_CHECK(cudaMalloc(&p, std::max<size_t>(bytes, 16)));
  allocations_.push_back(static_cast<char*>(p));
  return static_cast<char*>(p);
}

void CudaPlan::buildLanes() {
  for (const NativePlanLane& lane : plan_.program.lanes) {
    const auto begin = static_cast<uint32_t>(laneOps_.size());
    laneOps_.insert(laneOps_.end(), lane.ops.begin(), lane.ops.end());
    laneTable_.push_back({begin, static_cast<uint32_t>(laneOps_.size()), lane.peer,
                          static_cast<uint32_t>(lane.kind)});  // the same numbering (below)
  }
  if (laneTable_.empty()) {  // a rank with nothing to do still takes part in the call's count
    laneTable_.push_back({0, 0, -1, cuda::kLocalLane});
  }
  lanes_ = static_cast<int>(laneTable_.size());
}

cuda::DevPlanProgram CudaPlan::upload(const NativePlanProgram& program) {
  std::vector<cuda::DevPlanOp> ops;
  for (const NativePlanOp& op : program.ops) {
    cuda::DevPlanOp d{};
    d.kind = static_cast<uint8_t>(op.kind);  // the same numbering (checked below)
    d.final = op.final ? 1 : 0;
    d.peer = op.peer;
    d.dst = devChunks(op.dst);
    d.srcBegin = op.srcBegin, d.srcEnd = op.srcEnd;
    d.depBegin = op.depBegin, d.depEnd = op.depEnd;
    ops.push_back(d);
  }
  for (size_t i = 0; i < program.ops.size(); ++i) {
    for (uint32_t k = program.ops[i].depBegin; k < program.ops[i].depEnd; ++k) {
      if (!program.deps[k].streamed) continue;
      ops[program.deps[k].on].streamedAfter = 1;
      ops[i].streamsBehind = 1;
    }
  }
  std::vector<cuda::DevChunks> srcs;
  for (const NativeChunks& c : program.srcs) srcs.push_back(devChunks(c));
  std::vector<cuda::DevPlanDep> deps;
  for (const NativePlanDep& d : program.deps) deps.push_back({d.on, d.streamed ? 1u : 0u});
  // One allocation, each table at a 16-byte boundary.
  const size_t opsAt = 0, srcsAt = opsAt + roundUp16(ops.size() * sizeof(ops[0]));
  const size_t depsAt = srcsAt + roundUp16(srcs.size() * sizeof(cuda::DevChunks));
  const size_t lanesAt = depsAt + roundUp16(deps.size() * sizeof(cuda::DevPlanDep));
  const size_t laneOpsAt = lanesAt + roundUp16(laneTable_.size() * sizeof(cuda::DevPlanLane));
  const size_t total = laneOpsAt + roundUp16(laneOps_.size() * sizeof(uint32_t));
  std::vector<char> image(total);
  auto put = [&](size_t at, const auto& v) {
    if (!v.empty()) std::memcpy(image.data() + at, v.data(), v.size() * sizeof(v[0]));
  };
  put(opsAt, ops);
  put(srcsAt, srcs);
  put(depsAt, deps);
  put(lanesAt, laneTable_);
  put(laneOpsAt, laneOps_);
  char* device = allocate(total);
  LOOM_CUDA_CHECK(cudaMemcpy(device, image.data(), total, cudaMemcpyHostToDevice));
  cuda::DevPlanProgram out;
  out.ops = reinterpret_cast<const cuda::DevPlanOp*>(device + opsAt);
  out.srcs = reinterpret_cast<const cuda::DevChunks*>(device + srcsAt);
  out.deps = reinterpret_cast<const cuda::DevPlanDep*>(device + depsAt);
  out.lanes = reinterpret_cast<const cuda::DevPlanLane*>(device + lanesAt);
  out.laneOps = reinterpret_cast<const uint32_t*>(device + laneOpsAt);
  return out;
}

static_assert(static_cast<int>(NativePlanOp::kSend) == cuda::kPlanSend &&
              static_cast<int>(NativePlanOp::kRecv) == cuda::kPlanRecv &&
              static_cast<int>(NativePlanOp::kRecvReduce) == cuda::kPlanRecvReduce &&
              static_cast<int>(NativePlanOp::kCopy) == cuda::kPlanCopy &&
              static_cast<int>(NativePlanOp::kReduce) == cuda::kPlanReduce);
static_assert(static_cast<int>(NativePlanLane::kSend) == cuda::kSendLane &&
              static_cast<int>(NativePlanLane::kReceive) == cuda::kRecvLane &&
              static_cast<int>(NativePlanLane::kLocal) == cuda::kLocalLane);
static_assert(static_cast<int>(NativeChunks::kInput) == 0 &&
              static_cast<int>(NativeChunks::kOutput) == 1 &&
              static_cast<int>(NativeChunks::kScratch) == 2);

char* CudaPlan::scratch(size_t bytes, bool captured) {
  if (bytes <= scratchBytes_) return scratch_;
  if (captured)
    LOOM_THROW(loomInvalidUsage, "execution plan '", plan_.name, "' needs ", bytes,
               " bytes of device scratch in a call being captured into a CUDA graph, more than "
               "earlier calls did: run one call of this size before capturing");
  const size_t grown = std::max(bytes, 2 * scratchBytes_);
  scratch_ = allocate(grown);
  scratchBytes_ = grown;
  return scratch_;
}

}  // namespace loom
