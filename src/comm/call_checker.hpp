// The mismatch check of a communicator's collectives (base/call_signature.hpp; LOOM_CHECK): each
// call's number and signature, the collective channels that carry it (CheckedChannel), the
// messages that name every rank's call when they differ, and LOOM_CHECK=2's round trip of a
// description of the call (algorithm and what it runs on these buffers) through the bootstrap.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "base/call_signature.hpp"
#include "base/coll_args.hpp"
#include "transport/channel.hpp"

namespace loom {

class CallChecker {
 public:
  // mode: LOOM_CHECK (the same on every rank, compared at init).
  CallChecker(int rank, int nranks, int64_t mode);
  int64_t mode() const { return mode_; }
  bool enabled() const { return state_.enabled; }
  // Native kernels (CUDA) carry no signature: LOOM_CHECK=2's round trip is their only check.
  void disableSignatures() { state_.enabled = false; }
  CallCheck& state() { return state_; }
  uint64_t calls() const { return calls_; }  // the collectives begun so far: the current number

  // A new collective (its accumulation type resolved): its number and signature.
  void begin(const CollArgs& args, int accum);
  // A collective channel (`inner`, which outlives it) that carries the signature.
  std::unique_ptr<Channel> wrap(Channel& inner);
  // Throws the mismatch error for the signatures seen (by rank; empty: not seen).
  [[noreturn]] void throwMismatch(const std::vector<std::optional<CallSignature>>& seen,
                                  const CallSignature& mine, const char* note) const;
  // ... for what the arena showed at one step (maybe of an earlier call).
  [[noreturn]] void throwArenaMismatch(const std::vector<std::optional<CallSignature>>& seen) const;
  // LOOM_CHECK=2: every rank's `description` of this call, through `allGather`; throws
  // loomInvalidUsage naming the groups of ranks when they differ.
  void verify(const std::string& description,
              const std::function<std::vector<std::string>(const std::string&)>& allGather) const;

 private:
  int rank_, nranks_;
  int64_t mode_;
  CallCheck state_;
  uint64_t calls_ = 0;
};

// "allreduce(count=10, float, sum)": a call in the words of the mismatch messages.
std::string describeCall(const CollArgs& args);

}  // namespace loom
