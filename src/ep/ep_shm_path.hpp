// The shared-memory path (one host): rounds over the ranks' shared buffers (ep_shm.hpp).
//
// Normal dispatch, per round: each rank writes its next tokens that some other rank needs (row,
// metadata and isTokenInRank row, once each however many ranks read them) into its buffer and
// posts it; every rank then copies the tokens meant for it out of each source's chunk, in source
// order, straight into its receive arrays (its own tokens from its input). The first round's
// headers carry every rank's counts (when the call counts) and its verdict.
// Normal combine, per round (a slice of every origin's tokens): each holder writes the rows it
// received from each origin for that slice; each origin then sums, per token, the rows of the
// ranks it went to, in rank order, reading them in place.
// Low latency: one round per call on the other lane; see ep_shm_low_latency.cpp.
#pragma once

#include <vector>

#include "ep/ep_path.hpp"
#include "ep/ep_shm.hpp"

namespace loom::ep {

class ShmPath final : public Path {
 public:
  ShmPath(Comm& comm, const Sizes& sizes);
  void dispatchCounts(NormalCall& call) override;
  void dispatch(NormalCall& call) override;
  void combine(NormalCall& call) override;
  void lowLatencySend(LowLatencyCall& call) override;
  void lowLatencyReceive(LowLatencyCall& call) override;
  char* nextCombineBuffer(int hidden) override;

 private:
  // Waits for every rank's chunk of `step` on `lane`, and compares the headers (on a failure,
  // this rank consumes the round first, so that no peer waits for it).
  void exchange(Lane lane, uint64_t step, const CallShape& shape);
  char* chunkOf(Lane lane, int rank, uint64_t step) const;
  void lowLatencyDispatchReceive(LowLatencyCall& call);
  void lowLatencyCombineReceive(LowLatencyCall& call);

  Sizes sizes_;
  ShmRegions regions_;
  uint64_t normalStep_ = 0, lowLatencyStep_ = 0;
  // Per call, sized at creation: headers and counts blocks by rank, cursors by rank or expert.
  std::vector<const CallHeader*> headers_;
  std::vector<const int32_t*> counts_;
  std::vector<int> cursors_, ends_;
  std::vector<int32_t> seen_;  // low-latency combine: by global expert
};

}  // namespace loom::ep
