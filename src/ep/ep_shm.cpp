#include "ep/ep_shm.hpp"

#include <algorithm>
#include <cstring>

#include "base/error.hpp"
#include "base/log.hpp"
#include "comm/comm.hpp"

namespace loom::ep {

namespace {

size_t pageRound(size_t bytes) { return (bytes + 4095) & ~size_t{4095}; }

}  // namespace

RegionLayout RegionLayout::compute(const Sizes& sizes) {
  RegionLayout l;
  if (sizes.modes & LOOM_EP_NORMAL) l.normalBytes = pageRound(sizes.bufferBytes);
  if (sizes.modes & LOOM_EP_LOW_LATENCY) {
    size_t dispatch = 0;
    for (bool fp8 : {false, true}) {
      LowLatencyDispatchFormat f{sizes.maxTopk, sizes.hidden, fp8};
      dispatch = std::max(dispatch, f.chunkBytes(sizes.maxTokens));
    }
    l.llDispatchBytes = pageRound(dispatch);
    LowLatencyCombineFormat c{sizes.nranks, sizes.localExperts, sizes.maxTokens, sizes.hidden};
    l.llCombineBytes = pageRound(c.bytes());
  }
  l.normalOffset = sizeof(LaneControl);
  l.llOffset = l.normalOffset + 2 * l.normalBytes;
  l.totalBytes = l.llOffset + 2 * l.llBufferBytes();
  return l;
}

size_t lowLatencyBytes(const Sizes& sizes) {
  return 2 * RegionLayout::compute(sizes).llBufferBytes();
}

ShmRegions::ShmRegions(Comm& comm, const Sizes& sizes)
    : ctx_(comm.hostContext()), rank_(sizes.rank), layout_(RegionLayout::compute(sizes)) {
  static_assert(sizeof(LaneControl) == 4096);
  segments_.resize(sizes.nranks);
  const std::string name = ShmSegment::uniqueName("/loom-ep-");
  segments_[rank_] = ShmSegment::create(name, layout_.totalBytes);
  new (segments_[rank_].data()) LaneControl();
  // This rank's normal buffers and low-latency dispatch parts are written at every call: their
  // page faults happen now, and the pages land on this rank's memory node. The low-latency
  // combine parts (the zero-copy layout, mostly unused) are touched only where rows go.
  std::memset(base(rank_) + layout_.normalOffset, 0, 2 * layout_.normalBytes);
  for (uint64_t b = 0; b < 2; ++b)
    if (layout_.llDispatchBytes > 0) std::memset(llDispatch(rank_, b), 0, layout_.llDispatchBytes);
  std::vector<std::string> names = comm.allGatherForSetUp(name);
  for (int r = 0; r < sizes.nranks; ++r)
    if (r != rank_) segments_[r] = ShmSegment::open(names[r], layout_.totalBytes);
  comm.allGatherForSetUp("mapped");  // every rank mapped every segment: the names can go
  segments_[rank_].unlink();
  LOOM_INFO(kSubsysShm, rank_, "expert-parallel buffers ", name, ": ", layout_.totalBytes >> 20,
            " MiB per rank (normal 2 x ", layout_.normalBytes, " B, low latency 2 x ",
            layout_.llBufferBytes(), " B)");
}

template <typename Ready>
void ShmRegions::wait(Ready&& ready, int peer) const {
  if (ready()) return;
  ctx_.wait(ready, peer);
}

void ShmRegions::begin(Lane lane, uint64_t step) const {
  if (step <= 2) return;
  const int l = static_cast<int>(lane);
  const uint64_t need = step - 2;
  if (control(rank_).consumed[l][need & 1].value.load(std::memory_order_acquire) < need)
    LOOM_THROW(loomInvalidUsage, "a ", lane == Lane::kLowLatency ? "low-latency" : "normal",
               " expert-parallel call two calls back still waits for its hook "
               "(loomEpHookWait / the returned hook): at most two may be outstanding");
  for (int r = 0; r < static_cast<int>(segments_.size()); ++r) {
    const std::atomic<uint64_t>& word = control(r).consumed[l][need & 1].value;
    wait([&] { return word.load(std::memory_order_acquire) >= need; }, r);
  }
}

void ShmRegions::post(Lane lane, uint64_t step) const {
  control(rank_).posted[static_cast<int>(lane)][step & 1].value.store(step,
                                                                      std::memory_order_release);
}

void ShmRegions::waitPosted(Lane lane, int rank, uint64_t step) const {
  const std::atomic<uint64_t>& word = control(rank).posted[static_cast<int>(lane)][step & 1].value;
  wait([&] { return word.load(std::memory_order_acquire) >= step; }, rank);
}

void ShmRegions::consume(Lane lane, uint64_t step) const {
  control(rank_).consumed[static_cast<int>(lane)][step & 1].value.store(step,
                                                                        std::memory_order_release);
}

bool ShmRegions::consumedBy(Lane lane, int rank, uint64_t step) const {
  return control(rank).consumed[static_cast<int>(lane)][step & 1].value.load(
             std::memory_order_acquire) >= step;
}

}  // namespace loom::ep
