// How an expert-parallel object's chunks travel between its ranks (ep_format.hpp): through each
// rank's shared buffers where all ranks share one host (ep_shm_path.cpp), else over the
// communicator's channels as executor schedules (ep_wire_path.cpp). Calls arrive checked (their
// verdict may be a failure: the path still takes part in the exchange, so that every rank learns
// it) and with host arrays; each runs inside the communicator's call bracket (Comm::runCall).
#pragma once

#include <memory>
#include <span>

#include "ep/ep_tokens.hpp"

namespace loom {
class Comm;
}

namespace loom::ep {

// A low-latency call as its hook finishes it later: the arguments are copied (the caller's struct
// may be gone by then; the arrays it points to may not).
struct LowLatencyCall {
  CallShape shape;
  loomEpLowLatencyDispatchArgs_t dispatch{};
  loomEpLowLatencyCombineArgs_t combine{};
  Verdict verdict;
  uint64_t step = 0;      // its round on the low-latency lane
  bool received = false;  // its receive half ran (the network path runs both at the call)
  int slot = 0;           // its buffer on the device path (calls alternate 0, 1, 0, ...)
  bool isDispatch() const { return shape.kind == CallKind::kLowLatencyDispatch; }
};

LowLatencyCall checkLowLatencyDispatch(const Sizes& sizes, const loomEpLowLatencyDispatchArgs_t& a);
LowLatencyCall checkLowLatencyCombine(const Sizes& sizes, const loomEpLowLatencyCombineArgs_t& a);

// Throws, the same on every rank that saw the same headers (by rank): loomInvalidUsage when the
// ranks run different calls, loomInvalidArgument when a rank's arguments are bad or the calls'
// shapes differ.
void compareHeaders(std::span<const CallHeader* const> headers, const CallShape& mine);
// This rank's header of a call.
void fillHeader(CallHeader& h, uint64_t step, const CallShape& shape, const Verdict& verdict,
                int numTokens, int count);

class Path {
 public:
  virtual ~Path() = default;
  virtual void dispatchCounts(NormalCall& call) = 0;
  virtual void dispatch(NormalCall& call) = 0;
  virtual void combine(NormalCall& call) = 0;
  // Low latency in two halves: send returns once this rank's part is out (a hook's first half);
  // receive waits for the peers' parts and finishes the call (nothing once call.received). A
  // bad verdict fails in send, on this rank, and in every peer's receive.
  virtual void lowLatencySend(LowLatencyCall& call) = 0;
  virtual void lowLatencyReceive(LowLatencyCall& call) = 0;
  // The buffer the next low-latency combine sends from, once no peer reads it (null: the path
  // has none and the zero-copy form is not offered).
  virtual char* nextCombineBuffer(int hidden) = 0;
};

std::unique_ptr<Path> makeShmPath(Comm& comm, const Sizes& sizes);
std::unique_ptr<Path> makeWirePath(Comm& comm, const Sizes& sizes);

}  // namespace loom::ep
