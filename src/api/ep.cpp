// C entry points of expert parallelism (include/loom/loom.h, src/ep/). Each pins its
// communicator for the call; the checks of a call's arguments are the object's, exchanged across
// ranks (ep/expert_parallel.hpp), so that a bad argument fails every rank.
#include "api/handle.hpp"
#include "ep/ep_shm.hpp"
#include "ep/expert_parallel.hpp"
#include "loom/loom.h"

using namespace loom;

struct loomEp {
  static constexpr uint64_t kMagic = 0x4c4f4f4d45505858ull;  // "LOOMEPXX"
  uint64_t magic = kMagic;
  loomComm_t comm = nullptr;
  std::unique_ptr<ep::ExpertParallel> impl;
};

namespace {

loomEp* checkEp(loomEp_t ep) {
  LOOM_CHECK_ARG(ep != nullptr && ep->magic == loomEp::kMagic,
                 "ep is not an expert-parallel object");
  return ep;
}

// Runs body with the object and its communicator pinned.
template <typename Body>
loomResult_t withEp(const char* function, loomEp_t ep, Body&& body) {
  return guarded(function, [&] {
    loomEp* e = checkEp(ep);
    HandleUse use(e->comm);
    use.comm();  // ready (a non-blocking one still initializing: loomInProgress)
    body(*e->impl);
    return loomSuccess;
  });
}

}  // namespace

loomResult_t loomEpCreate(loomEp_t* ep, loomComm_t comm, const loomEpConfig_t* config) {
  return guarded("loomEpCreate", [&] {
    LOOM_CHECK_ARG(ep != nullptr, "ep is NULL");
    *ep = nullptr;
    LOOM_CHECK_ARG(config != nullptr, "config is NULL");
    HandleUse use(comm);
    LOOM_CHECK_ARG(use->blocking, "expert parallelism needs a blocking communicator");
    auto e = std::make_unique<loomEp>();
    e->comm = comm;
    e->impl = std::make_unique<ep::ExpertParallel>(use.comm(), *config);
    *ep = e.release();
    return loomSuccess;
  });
}

loomResult_t loomEpDestroy(loomEp_t ep) {
  return guarded("loomEpDestroy", [&] {
    if (ep == nullptr) return loomSuccess;
    loomEp* e = checkEp(ep);
    // Its staging memory belongs to the communicator's device: the communicator must be alive.
    HandleUse use(e->comm);
    e->magic = 0;
    delete e;
    return loomSuccess;
  });
}

loomResult_t loomEpLayout(loomEp_t ep, const int64_t* topkIdx, int numTokens, int topk,
                          int32_t* numTokensPerRank, int32_t* numTokensPerExpert,
                          uint8_t* isTokenInRank, loomStream_t stream) {
  return withEp("loomEpLayout", ep, [&](ep::ExpertParallel& e) {
    e.layout(topkIdx, numTokens, topk, numTokensPerRank, numTokensPerExpert, isTokenInRank, stream);
  });
}

loomResult_t loomEpDispatchCounts(loomEp_t ep, const loomEpDispatchArgs_t* args,
                                  loomStream_t stream) {
  return withEp("loomEpDispatchCounts", ep,
                [&](ep::ExpertParallel& e) { e.dispatchCounts(args, stream); });
}

loomResult_t loomEpDispatch(loomEp_t ep, const loomEpDispatchArgs_t* args, loomStream_t stream) {
  return withEp("loomEpDispatch", ep, [&](ep::ExpertParallel& e) { e.dispatch(args, stream); });
}

loomResult_t loomEpCombine(loomEp_t ep, const loomEpCombineArgs_t* args, loomStream_t stream) {
  return withEp("loomEpCombine", ep, [&](ep::ExpertParallel& e) { e.combine(args, stream); });
}

loomResult_t loomEpLowLatencyDispatch(loomEp_t ep, const loomEpLowLatencyDispatchArgs_t* args,
                                      int* hook, loomStream_t stream) {
  return withEp("loomEpLowLatencyDispatch", ep, [&](ep::ExpertParallel& e) {
    const int id = e.lowLatencyDispatch(args, hook != nullptr, stream);
    if (hook != nullptr) *hook = id;
  });
}

loomResult_t loomEpLowLatencyCombine(loomEp_t ep, const loomEpLowLatencyCombineArgs_t* args,
                                     int* hook, loomStream_t stream) {
  return withEp("loomEpLowLatencyCombine", ep, [&](ep::ExpertParallel& e) {
    const int id = e.lowLatencyCombine(args, hook != nullptr, stream);
    if (hook != nullptr) *hook = id;
  });
}

loomResult_t loomEpHookWait(loomEp_t ep, int hook, loomStream_t stream) {
  return withEp("loomEpHookWait", ep, [&](ep::ExpertParallel& e) {
    if (hook != 0) e.hookWait(hook, stream);  // 0: the call finished at once (staged ranks)
  });
}

loomResult_t loomEpLowLatencyCombineBuffer(loomEp_t ep, int hidden, void** buffer) {
  return withEp("loomEpLowLatencyCombineBuffer", ep, [&](ep::ExpertParallel& e) {
    LOOM_CHECK_ARG(buffer != nullptr, "buffer is NULL");
    *buffer = e.lowLatencyCombineBuffer(hidden);
  });
}

loomResult_t loomEpLowLatencySizeHint(int maxTokensPerRank, int hidden, int nranks, int numExperts,
                                      size_t* bytes) {
  return guarded("loomEpLowLatencySizeHint", [&] {
    LOOM_CHECK_ARG(bytes != nullptr, "bytes is NULL");
    LOOM_CHECK_ARG(maxTokensPerRank > 0 && hidden > 0 && nranks > 0 && numExperts > 0 &&
                       numExperts % nranks == 0,
                   "sizes must be positive and numExperts a multiple of nranks");
    ep::Sizes s;
    s.nranks = nranks;
    s.modes = LOOM_EP_LOW_LATENCY;
    s.maxTokens = maxTokensPerRank;
    s.hidden = hidden;
    s.maxTopk = 64;
    s.numExperts = numExperts;
    s.localExperts = numExperts / nranks;
    *bytes = ep::lowLatencyBytes(s);
    return loomSuccess;
  });
}
