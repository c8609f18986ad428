// One step of an arena algorithm. Steps alternate between the two staging slots of every rank, so
// a rank may overwrite its slot of step s only after every rank has finished reading step s-2:
// begin() waits for that. Each rank then publishes `in` when its input is staged (ranks without
// input, as a broadcast's receivers, publish it on arrival), `red` when its reduced slice is ready,
// and `done` when it will read nothing more of step s.
//
// The mismatch check rides on `in`: with it each rank publishes its call's signature (same cache
// line), every wait on a rank's `in` compares that rank's signature with its own, and the first
// step of a call waits for every rank's `in` before `done` (most steps wait for all anyway), so
// every rank of a call that differs somewhere fails in that call, with the whole picture.
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
      auto& mine = in.signature[step_ & 1];
      mine[0].store(check->mine.seq, std::memory_order_relaxed);
      mine[1].store(check->mine.count, std::memory_order_relaxed);
      mine[2].store(check->mine.shape, std::memory_order_relaxed);
    }
    publish(in.value);
  }
  void publishRed() const { publish(arena_.flags(ctx_.rank).red.value); }
  void publishDone() const {
    CallCheck* check = ctx_.callCheck;
    if (check != nullptr && check->enabled && check->verifiedSeq != check->mine.seq) {
      waitAllIn();
      check->verifiedSeq = check->mine.seq;
    }
    publish(arena_.flags(ctx_.rank).done.value);
  }
  void waitIn(int rank) const {
    waitFlag(arena_.flags(rank).in.value, step_, rank);
    verify(rank);
  }
  void waitAllIn() const {
    for (int r = 0; r < ctx_.nranks; ++r) waitIn(r);
  }
  void waitAllRed() const {
    for (int r = 0; r < ctx_.nranks; ++r) waitFlag(arena_.flags(r).red.value, step_, r);
  }

 private:
  void publish(std::atomic<uint64_t>& flag) const { flag.store(step_, std::memory_order_release); }
  void waitFlag(std::atomic<uint64_t>& flag, uint64_t target, int rank) const {
    ctx_.wait([&] { return flag.load(std::memory_order_acquire) >= target; }, rank);
  }
  CallSignature signatureOf(int rank) const {
    const auto& words = arena_.flags(rank).in.signature[step_ & 1];
    return {words[0].load(std::memory_order_relaxed), words[1].load(std::memory_order_relaxed),
            words[2].load(std::memory_order_relaxed)};
  }
  // After `rank`'s `in` of this step was seen: its signature must be this rank's.
  void verify(int rank) const {
    const CallCheck* check = ctx_.callCheck;
    if (check == nullptr || !check->enabled || rank == ctx_.rank) return;
    if (signatureOf(rank) == check->mine) return;
    // Every rank reaches the first step of its call: collect all signatures for the message
    // (briefly, without the health check: peers that found the mismatch too are aborting).
    std::vector<std::optional<CallSignature>> all(ctx_.nranks);
    Clock::time_point until = Clock::now() + std::chrono::milliseconds(200);
    for (int r = 0; r < ctx_.nranks; ++r) {
      auto& flag = arena_.flags(r).in.value;
      while (flag.load(std::memory_order_acquire) < step_ && Clock::now() < until)
        std::this_thread::yield();
      if (flag.load(std::memory_order_acquire) >= step_) all[r] = signatureOf(r);
    }
    all[ctx_.rank] = check->mine;
    ctx_.mismatch(all);
  }
  const AlgoContext& ctx_;
  const ShmArena& arena_;
  uint64_t step_;
};

}  // namespace loom
