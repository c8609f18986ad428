// One step of an arena algorithm. Steps alternate between the two staging slots of every rank, so
// a rank may overwrite its slot of step s only after every rank has finished reading step s-2:
// begin() waits for that. Each rank then publishes `in` when its input is staged (ranks without
// input, as a broadcast's receivers, publish it on arrival), `red` when its reduced slice is ready,
// and `done` when it will read nothing more of step s.
//
// The mismatch check rides on `in`: with it each rank publishes its call's signature (same cache
// line, one slot per step modulo 4), and every wait on a rank's `in` compares that rank's
// signature with its own. A step at which this rank did not wait for every rank (a broadcast's
// root, a reduce's leaf) is checked two steps later, when begin() has waited for every rank's
// `done` of it (or at the next wait for every rank's `in`), so checking adds no wait of its own.
#pragma once

#include <optional>
#include <thread>
#include <vector>

#include "algorithms/context.hpp"

namespace loom {

class ShmStage {
 public:
  explicit ShmStage(const AlgoContext& ctx) : ctx_(ctx), arena_(*ctx.arena), step_(++*ctx.step) {
    if (step_ > 2) {
      uint64_t need = step_ - 2;
      for (int r = 0; r < ctx_.nranks; ++r) waitFlag(arena_.flags(r).done.value, need, r);
      verifyPending(need);
    }
  }
  uint64_t step() const { return step_; }
  char* in(int rank) const { return arena_.inSlot(rank, step_); }
  char* out(int rank) const { return arena_.outSlot(rank, step_); }
  char* myIn() const { return in(ctx_.rank); }
  char* myOut() const { return out(ctx_.rank); }

  void publishIn() const {
    // The signature right before the flag: one ownership transfer of the line for both, which
    // the peers spinning on `in` would otherwise take back in between.
    ArrivalCounter& in = arena_.flags(ctx_.rank).in;
    const CallCheck* check = ctx_.callCheck;
    if (check != nullptr && check->enabled) {
      in.countSeq[step_ & 3].store(check->minePacked.countSeq, std::memory_order_relaxed);
      in.shape[step_ & 3].store(check->minePacked.shape, std::memory_order_relaxed);
    }
    publish(in.value);
  }
  void publishRed() const { publish(arena_.flags(ctx_.rank).red.value); }
  void publishDone() {
    CallCheck* check = ctx_.callCheck;
    if (check != nullptr && check->enabled && !sawAll_) {
      uint64_t* slot = check->unverified[0] == 0 ? &check->unverified[0] : &check->unverified[1];
      *slot = step_;
    }
    publish(arena_.flags(ctx_.rank).done.value);
  }
  void waitIn(int rank) const {
    waitFlag(arena_.flags(rank).in.value, step_, rank);
    verify(rank, step_);
  }
  void waitAllIn() {
    for (int r = 0; r < ctx_.nranks; ++r) waitIn(r);
    sawAll_ = true;
    verifyPending(step_);  // every rank is at this step: it published the earlier ones
  }
  void waitAllRed() const {
    for (int r = 0; r < ctx_.nranks; ++r) waitFlag(arena_.flags(r).red.value, step_, r);
  }

 private:
  void publish(std::atomic<uint64_t>& flag) const { flag.store(step_, std::memory_order_release); }
  void waitFlag(std::atomic<uint64_t>& flag, uint64_t target, int rank) const {
    ctx_.wait([&] { return flag.load(std::memory_order_acquire) >= target; }, rank);
  }
  PackedSignature signatureAt(int rank, uint64_t step) const {
    const ArrivalCounter& in = arena_.flags(rank).in;
    return {in.countSeq[step & 3].load(std::memory_order_relaxed),
            in.shape[step & 3].load(std::memory_order_relaxed)};
  }
  // Every rank's `in` reached `upTo`: checks the steps before it this rank left unverified.
  void verifyPending(uint64_t upTo) const {
    CallCheck* check = ctx_.callCheck;
    if (check == nullptr || !check->enabled) return;
    for (uint64_t& pending : check->unverified) {
      if (pending == 0 || pending > upTo || (pending == step_ && upTo == step_)) continue;
      uint64_t step = pending;
      pending = 0;
      for (int r = 0; r < ctx_.nranks; ++r) verify(r, step);
    }
  }
  // After `rank`'s `in` of `step` was seen: its signature must be this rank's of that step.
  void verify(int rank, uint64_t step) const {
    const CallCheck* check = ctx_.callCheck;
    if (check == nullptr || !check->enabled || rank == ctx_.rank) return;
    PackedSignature mine = signatureAt(ctx_.rank, step);
    if (signatureAt(rank, step) == mine) return;
    // Collect every rank's signature of that step for the message (briefly, without the health
    // check: peers that found the mismatch too are aborting).
    std::vector<std::optional<CallSignature>> all(ctx_.nranks);
    Clock::time_point until = Clock::now() + std::chrono::milliseconds(200);
    for (int r = 0; r < ctx_.nranks; ++r) {
      auto& flag = arena_.flags(r).in.value;
      while (flag.load(std::memory_order_acquire) < step && Clock::now() < until)
        std::this_thread::yield();
      if (flag.load(std::memory_order_acquire) >= step)
        all[r] = unpack(signatureAt(r, step), check->mine.seq);
    }
    all[ctx_.rank] = unpack(mine, check->mine.seq);
    ctx_.mismatch(all);
  }
  const AlgoContext& ctx_;
  const ShmArena& arena_;
  uint64_t step_;
  bool sawAll_ = false;  // this rank waited for every rank's `in` at this step
};

}  // namespace loom
