// One step of an arena algorithm. Steps alternate between the two staging slots of every rank, so
// a rank may overwrite its slot of step s only after every rank has finished reading step s-2:
// begin() waits for that. Each rank then publishes `in` when its input is staged (ranks without
// input, as a broadcast's receivers, publish it on arrival), `red` when its reduced slice is ready,
// and `done` when it will read nothing more of step s.
//
// The mismatch check rides on `in` and `done`: each flag's word carries a 24-bit hash of the call's
// signature beside the step (transport/shm/shm_arena.hpp), so a wait on a rank's `in` compares
// the hashes in the very load that sees the arrival. The whole signature sits in a slot of a line
// nobody polls (one per step modulo 4), read only when the hashes differ (for the message). Extra
// stores to the polled lines, or a second load from them, cost 5-20 % of a sub-microsecond call
// (ownership of the line moves between the cores). A step at which this rank did not
// wait for every other rank's `in` (a broadcast, a reduce's leaf) is checked two steps later, as
// the constructor waits for every rank's `done` of it, against the hash in `done`'s word (or at
// the next wait for every rank's `in`): checking adds no wait.
#pragma once

#include <optional>
#include <thread>
#include <utility>
#include <vector>

#include "algorithms/context.hpp"

namespace loom {

class ShmStage {
 public:
  // How a step may reuse the slots of two steps back. kAfterAllDone waits until every rank
  // published `done` there. kOrderedByCaller waits for nothing: the caller already knows every
  // rank has finished reading the input slots of two steps back, and writes its output slot only
  // once it knows the same of the output slots (algorithms/pipelined.cpp, which overlaps steps).
  enum class Reuse { kAfterAllDone, kOrderedByCaller };

  explicit ShmStage(const AlgoContext& ctx, Reuse reuse = Reuse::kAfterAllDone)
      : ctx_(ctx),
        arena_(*ctx.arena),
        check_(ctx.callCheck != nullptr && ctx.callCheck->enabled ? ctx.callCheck : nullptr),
        step_(++*ctx.step) {
    // Every arena step is a turn of the work beside it, if any (AlongsideRun): a rank whose waits
    // find their flags set keeps it moving too.
    ctx.moveAlongside();
    // An unverified step left pending here is checked at the next waitAllIn instead.
    if (step_ <= 2 || reuse == Reuse::kOrderedByCaller) return;
    // The step of two steps back: every rank must have finished reading it (and, if this rank
    // left it unverified, its signature is checked against each rank's `done` as it is seen).
    uint64_t need = step_ - 2;
    std::optional<CallCheck::Pending> pending = takePending(need);
    for (int r = 0; r < ctx_.nranks; ++r) {
      uint64_t word = waitWord(arena_.flags(r).done.of(need), need, r);
      if (pending) verifyDone(r, word, *pending);
    }
  }
  uint64_t step() const { return step_; }
  char* in(int rank) const { return arena_.inSlot(rank, step_); }
  char* out(int rank) const { return arena_.outSlot(rank, step_); }
  char* myIn() const { return in(ctx_.rank); }
  char* myOut() const { return out(ctx_.rank); }

  void publishIn() { publishSigned(arena_.flags(ctx_.rank).in.of(step_)); }
  void publishRed() const {
    arena_.flags(ctx_.rank).red.value.store(step_, std::memory_order_release);
  }
  void publishDone() {
    if (check_ != nullptr && checkedPeers_ + 1 < ctx_.nranks) {
      CallCheck::Pending& slot =
          check_->unverified[0].step == 0 ? check_->unverified[0] : check_->unverified[1];
      slot = {step_, check_->mineHash};
    }
    publishSigned(arena_.flags(ctx_.rank).done.of(step_));
  }
  // Each rank at most once per step.
  void waitIn(int rank) {
    uint64_t word = waitWord(arena_.flags(rank).in.of(step_), step_, rank);
    if (check_ == nullptr || rank == ctx_.rank) return;
    ++checkedPeers_;
    if (!matches(word, step_, check_->mineHash)) verifySlots(rank, step_);
  }
  void waitAllIn() {
    for (int r = 0; r < ctx_.nranks; ++r) waitIn(r);
    // Every rank is at this step: it published `done` of the earlier ones.
    if (std::optional<CallCheck::Pending> pending = takePending(step_ - 1)) {
      for (int r = 0; r < ctx_.nranks; ++r)
        verifyDone(r, arena_.flags(r).done.of(pending->step).load(std::memory_order_acquire),
                   *pending);
    }
  }
  void waitAllRed() const {
    for (int r = 0; r < ctx_.nranks; ++r) {
      const std::atomic<uint64_t>& flag = arena_.flags(r).red.value;
      ctx_.wait([&] { return flag.load(std::memory_order_acquire) >= step_; }, r);
    }
  }

 private:
  // The word with the signature's hash; after the step's first word, the whole signature in its
  // slot, tagged with the step (after, not before: two stores ahead of the word delayed its
  // publication by 70 ns on a 16-core Xeon, wherever they went; the slot is read only after a
  // hash differed, and the reader waits for the tag).
  void publishSigned(std::atomic<uint64_t>& flag) {
    flag.store(arrivalWord(step_, check_ != nullptr ? check_->mineHash : 0),
               std::memory_order_release);
    if (check_ == nullptr || signed_) return;
    SignatureSlots& slots = arena_.signatures(ctx_.rank);
    slots.countSeq[step_ & 3].store(check_->minePacked.countSeq, std::memory_order_relaxed);
    slots.shape[step_ & 3].store(check_->minePacked.shape, std::memory_order_relaxed);
    slots.step[step_ & 3].store(step_, std::memory_order_release);
    signed_ = true;
  }
  // Waits until the word shows `step` (or a later one); returns the word seen.
  uint64_t waitWord(const std::atomic<uint64_t>& flag, uint64_t step, int rank) const {
    uint64_t word = 0;
    ctx_.wait(
        [&] {
          word = flag.load(std::memory_order_acquire);
          return arrivedAt(word, step);
        },
        rank);
    return word;
  }
  // The word is of `step` itself and carries `hash`: that rank's call there hashes as this one's.
  static bool matches(uint64_t word, uint64_t step, uint32_t hash) {
    return arrivedExactly(word, step) && (word & kHashMask) == hash;
  }
  // The step left unverified at or before `upTo`, cleared (it is checked now), or none.
  std::optional<CallCheck::Pending> takePending(uint64_t upTo) {
    if (check_ == nullptr) return std::nullopt;
    for (CallCheck::Pending& p : check_->unverified) {
      if (p.step == 0 || p.step > upTo) continue;
      return std::exchange(p, {});
    }
    return std::nullopt;
  }
  // `word`, `rank`'s `done` word of the unverified step, must carry this rank's hash there.
  void verifyDone(int rank, uint64_t word, const CallCheck::Pending& pending) const {
    if (rank != ctx_.rank && !matches(word, pending.step, pending.hash))
      verifySlots(rank, pending.step);
  }
  // `rank`'s signature of `step`, once its slot holds that step (it is written right after the
  // step's first word), or none if it does not within `until`.
  std::optional<PackedSignature> signatureAt(int rank, uint64_t step,
                                             Clock::time_point until) const {
    const SignatureSlots& slots = arena_.signatures(rank);
    const std::atomic<uint64_t>& tag = slots.step[step & 3];
    while (tag.load(std::memory_order_acquire) != step) {
      if (Clock::now() >= until) return std::nullopt;
      std::this_thread::yield();
    }
    return PackedSignature{slots.countSeq[step & 3].load(std::memory_order_relaxed),
                           slots.shape[step & 3].load(std::memory_order_relaxed)};
  }
  // `rank`'s word of `step` did not carry this rank's hash: the calls differ (or, were the word
  // not of that step itself, may). Compares the whole signatures and reports every rank's.
  void verifySlots(int rank, uint64_t step) const {
    if (rank == ctx_.rank) return;
    // Briefly, without the health check: peers that found the mismatch too are aborting.
    Clock::time_point until = Clock::now() + std::chrono::milliseconds(200);
    std::optional<PackedSignature> mine = signatureAt(ctx_.rank, step, until);
    if (mine && signatureAt(rank, step, until) == mine) return;
    std::vector<std::optional<CallSignature>> all(ctx_.nranks);
    for (int r = 0; r < ctx_.nranks; ++r) {
      std::optional<PackedSignature> theirs = signatureAt(r, step, until);
      if (theirs) all[r] = unpack(*theirs, check_->mine.seq);
    }
    ctx_.mismatch(all);
  }

  const AlgoContext& ctx_;
  const ShmArena& arena_;
  CallCheck* check_;  // null: the check is off
  uint64_t step_;
  bool signed_ = false;   // this step's signature is in its slot
  int checkedPeers_ = 0;  // other ranks whose `in` of this step this rank waited for
};

}  // namespace loom
