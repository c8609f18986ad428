// One step of an arena algorithm. Steps alternate between the two staging slots of every rank, so
// a rank may overwrite its slot of step s only after every rank has finished reading step s-2:
// begin() waits for that. Each rank then publishes `in` when its input is staged, `red` when its
// reduced slice is ready, and `done` when it will read nothing more of step s.
#pragma once

#include "algorithms/context.hpp"

namespace loom {

class ShmStage {
 public:
  explicit ShmStage(const AlgoContext& ctx) : ctx_(ctx), arena_(*ctx.arena), step_(++*ctx.step) {
    if (step_ > 2) {
      uint64_t need = step_ - 2;
      for (int r = 0; r < ctx_.nranks; ++r) waitFlag(arena_.flags(r).done, need, r);
    }
  }
  uint64_t step() const { return step_; }
  char* in(int rank) const { return arena_.inSlot(rank, step_); }
  char* out(int rank) const { return arena_.outSlot(rank, step_); }
  char* myIn() const { return in(ctx_.rank); }
  char* myOut() const { return out(ctx_.rank); }

  void publishIn() const { publish(arena_.flags(ctx_.rank).in); }
  void publishRed() const { publish(arena_.flags(ctx_.rank).red); }
  void publishDone() const { publish(arena_.flags(ctx_.rank).done); }
  void waitIn(int rank) const { waitFlag(arena_.flags(rank).in, step_, rank); }
  void waitAllIn() const {
    for (int r = 0; r < ctx_.nranks; ++r) waitIn(r);
  }
  void waitAllRed() const {
    for (int r = 0; r < ctx_.nranks; ++r) waitFlag(arena_.flags(r).red, step_, r);
  }

 private:
  void publish(PaddedCounter& flag) const { flag.value.store(step_, std::memory_order_release); }
  void waitFlag(PaddedCounter& flag, uint64_t target, int rank) const {
    ctx_.wait([&] { return flag.value.load(std::memory_order_acquire) >= target; }, rank);
  }
  const AlgoContext& ctx_;
  const ShmArena& arena_;
  uint64_t step_;
};

}  // namespace loom
