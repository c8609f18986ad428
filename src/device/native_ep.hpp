// A backend's own expert-parallel kernels (CUDA: device/cuda/ep/), the optional counterpart of
// NativeCollectives for MoE dispatch and combine: for an expert-parallel object whose ranks all
// use devices of the backend's kind on one host, one process per device. The tokens then move
// between the ranks' device memory on the devices, ordered on the caller's stream; the host only
// launches. Formats, orders and sums are the host paths' (device/ep_format.hpp, docs/ep.md), so
// results are bit-identical to them.
//
// Errors: the ep layer checks a call's sizes and pointers on the host and passes its verdict;
// the kernels also check the expert ids, write the verdict into the header the peers read, and
// skip the data where any rank's is bad. A rank learns of a peer's bad argument (or a kernel's
// timeout) through errors(): at once in the host-synchronizing dispatchCounts, else at its next
// call on the object.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "loom/loom.h"

namespace loom {

struct NativeEpSetup {
  int rank = 0, nranks = 1;
  int modes = 0;  // LOOM_EP_NORMAL | LOOM_EP_LOW_LATENCY
  int maxTokens = 0, hidden = 0, maxTopk = 0, numExperts = 0, localExperts = 0;
  size_t maxRowBytes = 0;
  size_t bufferBytes = 0;  // normal mode: each of a rank's two buffers
  int64_t timeoutMs = 0;
  // All-gather of one string per rank (collective; for sharing the buffers at creation).
  std::function<std::vector<std::string>(const std::string&)> allGather;
};

class NativeEp {
 public:
  virtual ~NativeEp() = default;
  // loomEpLayout on device arrays (the expert ids checked by the kernel: a bad one is reported
  // by errors() after the stream reached it).
  virtual void layout(const int64_t* topkIdx, int numTokens, int topk, int32_t* perRank,
                      int32_t* perExpert, uint8_t* inRank, loomStream_t stream) = 0;
  // The calls, arguments checked on the host (`status`: loomSuccess or loomInvalidArgument).
  // dispatchCounts waits for its stream and fills the handle's scalars and the per-expert counts
  // on the host.
  virtual void dispatchCounts(const loomEpDispatchArgs_t& a, int status, loomStream_t stream) = 0;
  virtual void dispatch(const loomEpDispatchArgs_t& a, int status, loomStream_t stream) = 0;
  virtual void combine(const loomEpCombineArgs_t& a, int status, loomStream_t stream) = 0;
  // Low latency in halves (send: this rank's tokens out; receive: the peers' in), each a kernel
  // on the stream, with no host synchronization: capturable in a CUDA graph (an even number of
  // low-latency calls per graph: their buffers alternate). `slot` is the call's buffer (calls
  // alternate 0, 1, 0, ...).
  virtual void lowLatencyDispatch(const loomEpLowLatencyDispatchArgs_t& a, int status, int slot,
                                  bool send, bool receive, loomStream_t stream) = 0;
  virtual void lowLatencyCombine(const loomEpLowLatencyCombineArgs_t& a, int status, int slot,
                                 bool send, bool receive, loomStream_t stream) = 0;
  // The device buffer the call in `slot` sends combine rows from ([L][M * nranks][hidden]).
  virtual void* lowLatencyCombineBuffer(int slot, int hidden) = 0;
  // The first failure a kernel of this object recorded since the last look (a peer's bad
  // argument, differing calls, a timeout), as (code, message); code loomSuccess if none.
  virtual std::pair<loomResult_t, std::string> errors() = 0;
  virtual std::string describe() const = 0;
};

}  // namespace loom
