// An execution plan loaded into a CUDA communicator (CudaEngine::loadPlan): this rank's program
// as the interpreting kernel reads it (collectives/plan_kernel.hpp) in device memory, plain and
// in place; its lanes; the progress words of its operations; and the scratch its calls use.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "device/cuda/collectives/plan_kernel.hpp"
#include "device/native_plan.hpp"

namespace loom {

class CudaPlan {
 public:
  // Uploads to the current device.
  explicit CudaPlan(NativePlan plan);
  ~CudaPlan();
  CudaPlan(const CudaPlan&) = delete;
  CudaPlan& operator=(const CudaPlan&) = delete;

  // The CUDA context is gone (cudaDeviceReset): nothing is freed through CUDA.
  void abandon() { allocations_.clear(); }

  const NativePlan& plan() const { return plan_; }
  const cuda::DevPlanProgram& program(bool aliased) const { return programs_[aliased ? 1 : 0]; }
  int lanes() const { return lanes_; }
  uint64_t* state() const { return state_; }
  // At least `bytes` of device scratch. Growing allocates anew and keeps what it replaces until
  // the plan goes: a graph captured earlier still uses it. Not while the call is captured (a
  // clear error: run one call of that size before capturing).
  char* scratch(size_t bytes, bool captured);

 private:
  // The plan's lanes (NativePlanProgram::lanes) as the kernel's table, the same for both
  // programs: they differ only in dependencies.
  void buildLanes();
  cuda::DevPlanProgram upload(const NativePlanProgram& program);
  char* allocate(size_t bytes);

  NativePlan plan_;
  int lanes_ = 0;
  std::vector<cuda::DevPlanLane> laneTable_;
  std::vector<uint32_t> laneOps_;
  std::vector<char*> allocations_;  // device memory, freed with the plan
  cuda::DevPlanProgram programs_[2]{};
  uint64_t* state_ = nullptr;
  char* scratch_ = nullptr;
  size_t scratchBytes_ = 0;
};

}  // namespace loom
