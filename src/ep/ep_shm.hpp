// The shared buffers of an expert-parallel object whose ranks share one host: each rank owns one
// segment (created at loomEpCreate, mapped by every rank, its name unlinked once all have), with
// two buffers per lane (normal; low latency) that consecutive rounds of that lane alternate. A
// rank writes its chunk of a round into its own buffer (its tokens staged once, whatever the
// number of readers) and publishes it; the readers copy what they need straight out of it.
//
// Per lane and buffer, the owner publishes `posted` (the round whose chunk the buffer holds) and
// every rank publishes `consumed` (the last round of that buffer it has finished reading, from
// every rank). A rank writes round s only once every rank consumed round s - 2, so a reader finds
// round s intact until it says so. Nothing is allocated or mapped per call.
#pragma once

#include <atomic>
#include <cstdint>
#include <string>
#include <vector>

#include "algorithms/context.hpp"
#include "base/shm_segment.hpp"
#include "ep/ep_tokens.hpp"

namespace loom {
class Comm;
}

namespace loom::ep {

enum class Lane : int { kNormal = 0, kLowLatency = 1 };

struct alignas(64) SharedWord {
  std::atomic<uint64_t> value{0};
  char pad[64 - sizeof(std::atomic<uint64_t>)];
};

struct alignas(4096) LaneControl {
  SharedWord posted[2][2];    // [lane][buffer]
  SharedWord consumed[2][2];  // [lane][buffer]
};

struct RegionLayout {
  size_t normalBytes = 0;      // one normal buffer
  size_t llDispatchBytes = 0;  // one low-latency buffer's dispatch part ...
  size_t llCombineBytes = 0;   // ... and its combine part
  size_t normalOffset = 0, llOffset = 0, totalBytes = 0;
  static RegionLayout compute(const Sizes& sizes);
  size_t llBufferBytes() const { return llDispatchBytes + llCombineBytes; }
};

// The bytes of shared buffers a low-latency object registers per rank (both buffers).
size_t lowLatencyBytes(const Sizes& sizes);

class ShmRegions {
 public:
  // Collective over the communicator's ranks (one host).
  ShmRegions(Comm& comm, const Sizes& sizes);
  ShmRegions(const ShmRegions&) = delete;
  ShmRegions& operator=(const ShmRegions&) = delete;

  const RegionLayout& layout() const { return layout_; }
  char* normal(int rank, uint64_t step) const {
    return base(rank) + layout_.normalOffset + (step & 1) * layout_.normalBytes;
  }
  char* llDispatch(int rank, uint64_t step) const {
    return base(rank) + layout_.llOffset + (step & 1) * layout_.llBufferBytes();
  }
  char* llCombine(int rank, uint64_t step) const {
    return llDispatch(rank, step) + layout_.llDispatchBytes;
  }

  // The round protocol of one lane (see above). begin: the buffer of round `step` may be
  // written once every rank consumed round step - 2 (throws loomInvalidUsage if this rank itself
  // has not: a hook of that round is still pending).
  void begin(Lane lane, uint64_t step) const;
  void post(Lane lane, uint64_t step) const;
  void waitPosted(Lane lane, int rank, uint64_t step) const;
  void consume(Lane lane, uint64_t step) const;
  bool consumedBy(Lane lane, int rank, uint64_t step) const;

 private:
  char* base(int rank) const { return segments_[rank].data(); }
  LaneControl& control(int rank) const {
    return *reinterpret_cast<LaneControl*>(segments_[rank].data());
  }
  template <typename Ready>
  void wait(Ready&& ready, int peer) const;

  const AlgoContext& ctx_;
  int rank_;
  RegionLayout layout_;
  std::vector<ShmSegment> segments_;  // by rank
};

}  // namespace loom::ep
