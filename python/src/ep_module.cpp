// loom._loom.Ep: expert-parallel dispatch and combine (loomEp*, include/loom/loom.h) for
// loom.ep.Buffer. Arrays travel as addresses (a tensor's data_ptr()) with their sizes, so that
// tensors of any device the communicator serves pass alike; loom/ep.py checks shapes, types and
// devices before it calls here. Calls release the GIL while they run.
#include <nanobind/nanobind.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <cstdint>
#include <vector>

#include "loom/loom.h"
#include "loom_module.hpp"

namespace nb = nanobind;
using loom_python::check;
using loom_python::Comm;
using loom_python::LoomError;

namespace {

template <typename T>
T* at(uintptr_t address) {
  return reinterpret_cast<T*>(address);
}
loomStream_t stream(uintptr_t s) { return reinterpret_cast<loomStream_t>(s); }

class Ep {
 public:
  Ep(Comm& comm, int modes, int maxTokens, int hidden, int dtype, int maxTopk, int numExperts,
     size_t bufferBytes) {
    loomEpConfig_t config = LOOM_EP_CONFIG_INITIALIZER;
    config.modes = modes;
    config.maxTokensPerRank = maxTokens;
    config.hidden = hidden;
    config.dtype = static_cast<loomDataType_t>(dtype);
    config.maxTopk = maxTopk;
    config.numExperts = numExperts;
    config.bufferBytes = bufferBytes;
    loomComm_t c = comm.get();
    nb::gil_scoped_release unlocked;
    check(loomEpCreate(&ep_, c, &config), "loomEpCreate");
  }
  ~Ep() { destroy(); }
  Ep(const Ep&) = delete;
  Ep& operator=(const Ep&) = delete;
  void destroy() {
    if (ep_ != nullptr) loomEpDestroy(ep_);
    ep_ = nullptr;
  }
  loomEp_t get() const {
    if (ep_ == nullptr) throw LoomError("the expert-parallel buffer was destroyed");
    return ep_;
  }

  void layout(uintptr_t topkIdx, int numTokens, int topk, uintptr_t perRank, uintptr_t perExpert,
              uintptr_t inRank, uintptr_t s) {
    loomEp_t ep = get();
    nb::gil_scoped_release unlocked;
    check(loomEpLayout(ep, at<const int64_t>(topkIdx), numTokens, topk, at<int32_t>(perRank),
                       at<int32_t>(perExpert), at<uint8_t>(inRank), stream(s)),
          "loomEpLayout");
  }

  // countsOnly: loomEpDispatchCounts. Returns (tokens received, per local expert or []).
  nb::tuple dispatch(bool countsOnly, uintptr_t x, int dtype, int hidden, int numTokens,
                     uintptr_t xScales, int numScales, uintptr_t topkIdx, uintptr_t topkWeights,
                     int topk, uintptr_t numTokensPerExpert, int alignment, uintptr_t recvX,
                     uintptr_t recvScales, uintptr_t recvTopk, uintptr_t recvWeights, int capacity,
                     uintptr_t rankPrefix, uintptr_t recvSrcIdx, uintptr_t sendHead,
                     uintptr_t inRank, int numRecv, int localExperts, uintptr_t s) {
    loomEpHandle_t h{numTokens,
                     numRecv,
                     at<int32_t>(rankPrefix),
                     at<int32_t>(recvSrcIdx),
                     at<int32_t>(sendHead),
                     at<const uint8_t>(inRank)};
    loomEpDispatchArgs_t a{};
    a.size = sizeof(a);
    a.x = at<const void>(x);
    a.dtype = static_cast<loomDataType_t>(dtype);
    a.hidden = hidden;
    a.numTokens = numTokens;
    a.xScales = at<const float>(xScales);
    a.numScales = numScales;
    a.topkIdx = at<const int64_t>(topkIdx);
    a.topkWeights = at<const float>(topkWeights);
    a.topk = topk;
    a.numTokensPerExpert = at<const int32_t>(numTokensPerExpert);
    a.expertAlignment = alignment;
    a.recvX = at<void>(recvX);
    a.recvXScales = at<float>(recvScales);
    a.recvTopkIdx = at<int64_t>(recvTopk);
    a.recvTopkWeights = at<float>(recvWeights);
    a.recvCapacity = capacity;
    std::vector<int32_t> perExpert(localExperts, 0);
    if (numRecv < 0 && (numTokensPerExpert != 0 || topkIdx != 0))
      a.recvTokensPerExpert = perExpert.data();
    a.handle = &h;
    loomEp_t ep = get();
    {
      nb::gil_scoped_release unlocked;
      check(
          countsOnly ? loomEpDispatchCounts(ep, &a, stream(s)) : loomEpDispatch(ep, &a, stream(s)),
          countsOnly ? "loomEpDispatchCounts" : "loomEpDispatch");
    }
    if (a.recvTokensPerExpert == nullptr) perExpert.clear();
    return nb::make_tuple(h.numRecvTokens, perExpert);
  }

  void combine(uintptr_t x, int dtype, int hidden, uintptr_t topkWeights, int topk, uintptr_t bias0,
               uintptr_t bias1, uintptr_t rankPrefix, uintptr_t recvSrcIdx, uintptr_t sendHead,
               int numTokens, int numRecv, uintptr_t combined, uintptr_t combinedWeights,
               uintptr_t s) {
    loomEpHandle_t h{
        numTokens, numRecv, at<int32_t>(rankPrefix), at<int32_t>(recvSrcIdx), at<int32_t>(sendHead),
        nullptr};
    loomEpCombineArgs_t a{};
    a.size = sizeof(a);
    a.x = at<const void>(x);
    a.dtype = static_cast<loomDataType_t>(dtype);
    a.hidden = hidden;
    a.topkWeights = at<const float>(topkWeights);
    a.topk = topk;
    a.bias0 = at<const void>(bias0);
    a.bias1 = at<const void>(bias1);
    a.handle = &h;
    a.combinedX = at<void>(combined);
    a.combinedTopkWeights = at<float>(combinedWeights);
    loomEp_t ep = get();
    nb::gil_scoped_release unlocked;
    check(loomEpCombine(ep, &a, stream(s)), "loomEpCombine");
  }

  // Returns the hook's id (0: the call finished).
  int lowLatencyDispatch(uintptr_t x, int hidden, int numTokens, uintptr_t topkIdx, int topk,
                         bool fp8, bool roundScale, bool ue8m0, uintptr_t recvX,
                         uintptr_t recvScales, uintptr_t count, uintptr_t srcInfo,
                         uintptr_t layoutRange, uintptr_t stats, bool hook, uintptr_t s) {
    loomEpLowLatencyDispatchArgs_t a{};
    a.size = sizeof(a);
    a.x = at<const void>(x);
    a.hidden = hidden;
    a.numTokens = numTokens;
    a.topkIdx = at<const int64_t>(topkIdx);
    a.topk = topk;
    a.useFp8 = fp8;
    a.roundScale = roundScale;
    a.useUe8m0 = ue8m0;
    a.recvX = at<void>(recvX);
    a.recvScales = at<void>(recvScales);
    a.recvCount = at<int32_t>(count);
    a.recvSrcInfo = at<int32_t>(srcInfo);
    a.recvLayoutRange = at<int64_t>(layoutRange);
    a.cumulativeRecvStats = at<int32_t>(stats);
    int id = 0;
    loomEp_t ep = get();
    nb::gil_scoped_release unlocked;
    check(loomEpLowLatencyDispatch(ep, &a, hook ? &id : nullptr, stream(s)),
          "loomEpLowLatencyDispatch");
    return id;
  }

  int lowLatencyCombine(uintptr_t x, int hidden, int numTokens, uintptr_t topkIdx,
                        uintptr_t topkWeights, int topk, uintptr_t srcInfo, uintptr_t layoutRange,
                        uintptr_t combined, bool hook, uintptr_t s) {
    loomEpLowLatencyCombineArgs_t a{};
    a.size = sizeof(a);
    a.x = at<const void>(x);
    a.hidden = hidden;
    a.numTokens = numTokens;
    a.topkIdx = at<const int64_t>(topkIdx);
    a.topkWeights = at<const float>(topkWeights);
    a.topk = topk;
    a.srcInfo = at<const int32_t>(srcInfo);
    a.layoutRange = at<const int64_t>(layoutRange);
    a.combinedX = at<void>(combined);
    int id = 0;
    loomEp_t ep = get();
    nb::gil_scoped_release unlocked;
    check(loomEpLowLatencyCombine(ep, &a, hook ? &id : nullptr, stream(s)),
          "loomEpLowLatencyCombine");
    return id;
  }

  void hookWait(int hook, uintptr_t s) {
    loomEp_t ep = get();
    nb::gil_scoped_release unlocked;
    check(loomEpHookWait(ep, hook, stream(s)), "loomEpHookWait");
  }

  uintptr_t combineBuffer(int hidden) {
    void* buffer = nullptr;
    loomEp_t ep = get();
    nb::gil_scoped_release unlocked;
    check(loomEpLowLatencyCombineBuffer(ep, hidden, &buffer), "loomEpLowLatencyCombineBuffer");
    return reinterpret_cast<uintptr_t>(buffer);
  }

 private:
  loomEp_t ep_ = nullptr;
};

}  // namespace

void bindExpertParallel(nb::module_& m) {
  nb::class_<Ep>(m, "Ep")
      .def(nb::init<Comm&, int, int, int, int, int, int, size_t>(), nb::arg("comm"),
           nb::arg("modes"), nb::arg("max_tokens"), nb::arg("hidden"), nb::arg("dtype"),
           nb::arg("max_topk"), nb::arg("num_experts"), nb::arg("buffer_bytes"),
           nb::keep_alive<1, 2>())
      .def("destroy", &Ep::destroy)
      .def("layout", &Ep::layout)
      .def("dispatch", &Ep::dispatch)
      .def("combine", &Ep::combine)
      .def("low_latency_dispatch", &Ep::lowLatencyDispatch)
      .def("low_latency_combine", &Ep::lowLatencyCombine)
      .def("hook_wait", &Ep::hookWait)
      .def("combine_buffer", &Ep::combineBuffer);
  m.def("ep_low_latency_size_hint", [](int maxTokens, int hidden, int nranks, int numExperts) {
    size_t bytes = 0;
    check(loomEpLowLatencySizeHint(maxTokens, hidden, nranks, numExperts, &bytes),
          "loomEpLowLatencySizeHint");
    return bytes;
  });
  m.attr("EP_NORMAL") = LOOM_EP_NORMAL;
  m.attr("EP_LOW_LATENCY") = LOOM_EP_LOW_LATENCY;
}
