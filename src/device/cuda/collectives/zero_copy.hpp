// Zero-copy collectives: kernels that read and write the callers' own buffers in every peer's
// memory, for calls whose buffers lie in windows every rank registered (loomCommWindowRegister)
// or that every rank registered alone (loomCommRegister), so no byte passes through the
// communicator's slots.
//
// Both kernels run the same three steps in every block b:
//   1. arrive: tell block b of every peer that this rank's stream reached the call (its inputs
//      are written, its outputs no longer read by earlier work), with a tag of the offsets the
//      call uses in its windows and the registrations its buffers lie in; wait for every peer's
//      arrival and compare its tag to ours; find each peer's registered buffers as mapped here
//      (waiting, the first time, until the host has mapped a new registration).
//   2. move: copy — block b's share of every piece (this rank's bytes into a peer's output);
//      reduce — block b's share of the range: every rank's input read in rank order, the result
//      written to every output (one-shot: this rank's; two-shot: this rank's slice to every rank).
//   3. depart: tell block b of every peer that this block is done with its buffers; wait for
//      theirs. When the kernel ends, every block of every peer is done with this rank's memory.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "device/cuda/collectives/dev_comm.hpp"
#include "device/cuda/collectives/exchange.hpp"

namespace loom::cuda {

struct ZeroCopyArgs {
  // Copy: piece i moves bytes[i] from src[i] to dst[i] (a peer's memory as mapped here).
  int pieces;
  const char* src[kMaxRanks];
  char* dst[kMaxRanks];
  size_t bytes[kMaxRanks];
  // Reduce: reduceBytes of inputs[0..nranks) (every rank's, as mapped here), combined in rank
  // order, written to outputs[0..outputs).
  const char* inputs[kMaxRanks];
  char* outputs[kMaxRanks];
  int outputCount;
  size_t reduceBytes;
  int divisor;
  uint64_t tag;  // the same on every rank for a correct call (window offsets, bytes)
  int blocks;    // the same on every rank
  int threads;   // block size, at least kMinZeroCopyThreads (0: kThreads)
  // Peers' buffers registered alone, whose addresses here come with their arrival: a pointer
  // above whose `from` code is not 0 is an offset into one: code peerCode(q, 0) is rank q's
  // input, peerCode(q, 1) its output.
  uint8_t srcFrom[kMaxRanks], dstFrom[kMaxRanks], inputsFrom[kMaxRanks], outputsFrom[kMaxRanks];
  BufferRef sendRef, recvRef;  // this rank's, told to peers (slot kNoSlot: not registered)
  int resolve;                 // some `from` code is not 0
};

constexpr int kFromCodes = 1 + 2 * kMaxRanks;
constexpr int kMinZeroCopyThreads = 64;  // one thread per from code (openCall) and per peer
static_assert(kMinZeroCopyThreads >= kFromCodes && kMinZeroCopyThreads >= kMaxRanks &&
              kMinZeroCopyThreads % 32 == 0);
inline constexpr uint8_t peerCode(int rank, int output) {
  return static_cast<uint8_t>(1 + 2 * rank + output);
}

void launchZeroCopyCopy(const DevComm& comm, const ZeroCopyArgs& args, cudaStream_t stream);
void launchZeroCopyReduce(const DevComm& comm, const ZeroCopyArgs& args, ReduceKey key,
                          cudaStream_t stream);

}  // namespace loom::cuda
