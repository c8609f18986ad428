// The object behind loomEp_t: MoE dispatch and combine (DeepEP's semantics, include/loom/loom.h)
// on one communicator. At creation the ranks agree on the sizes and set up their path once:
// shared buffers where every rank shares one host (ep_shm_path.hpp), the communicator's channels
// otherwise (ep_wire_path.cpp); a device rank without expert-parallel kernels stages its arrays
// through pinned host memory (ep_staging.hpp). Every call runs as one call of the communicator
// (Comm::runCall): its deadline, its failure handling, its place in the order of calls.
#pragma once

#include <memory>
#include <optional>

#include "device/native_ep.hpp"
#include "ep/ep_path.hpp"
#include "ep/ep_staging.hpp"

namespace loom {
class Comm;
}

namespace loom::ep {

class ExpertParallel {
 public:
  // Collective. Bad or disagreeing sizes are loomInvalidArgument on every rank.
  ExpertParallel(Comm& comm, const loomEpConfig_t& config);
  ~ExpertParallel();
  ExpertParallel(const ExpertParallel&) = delete;
  ExpertParallel& operator=(const ExpertParallel&) = delete;

  const Sizes& sizes() const { return sizes_; }
  void layout(const int64_t* topkIdx, int numTokens, int topk, int32_t* perRank, int32_t* perExpert,
              uint8_t* inRank, loomStream_t stream);
  // The calls take their argument structs as the C API received them: a NULL or wrongly sized
  // one is a bad argument like any other (every rank fails).
  void dispatchCounts(const loomEpDispatchArgs_t* a, loomStream_t stream);
  void dispatch(const loomEpDispatchArgs_t* a, loomStream_t stream);
  void combine(const loomEpCombineArgs_t* a, loomStream_t stream);
  // Returns the hook's id when `hook` (0: done).
  int lowLatencyDispatch(const loomEpLowLatencyDispatchArgs_t* a, bool hook, loomStream_t stream);
  int lowLatencyCombine(const loomEpLowLatencyCombineArgs_t* a, bool hook, loomStream_t stream);
  void hookWait(int hook, loomStream_t stream);
  void* lowLatencyCombineBuffer(int hidden);

 private:
  void normal(CallKind kind, const loomEpDispatchArgs_t* dispatch,
              const loomEpCombineArgs_t* combine, loomStream_t stream);
  int lowLatency(LowLatencyCall call, bool hook, loomStream_t stream);
  // The stream a call may take: null on a host communicator.
  void checkStream(loomStream_t stream, Verdict& v) const;
  bool staged() const { return staging_ != nullptr; }
  // The device's own kernels (every rank a GPU of one communicator, one process each).
  void setUpNative(Comm& comm);
  // A call on them: a failure a kernel recorded earlier is reported first; a bad verdict is
  // thrown once the kernels that tell the peers are launched.
  template <typename Launch>
  void onNative(const Verdict& verdict, Launch&& launch);
  void runNative(CallKind kind, const NormalCall& call, loomStream_t stream);

  Comm& comm_;
  Sizes sizes_;
  std::unique_ptr<Path> path_;
  std::unique_ptr<Staging> staging_;
  std::unique_ptr<NativeEp> native_;
  // Low-latency calls whose hook has not run: at most two (their buffers alternate).
  struct Pending {
    int id = 0;
    LowLatencyCall call;
  };
  std::optional<Pending> pending_[2];
  uint64_t lowLatencyCalls_ = 0;
  int nextHook_ = 1;
};

}  // namespace loom::ep
