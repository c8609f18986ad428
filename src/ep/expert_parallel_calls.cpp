// ExpertParallel's calls: checked, staged where the rank's device needs it, run on the path as
// one call of the communicator. A check that fails never throws before the exchange: the verdict
// travels in the call's header, so that every rank fails alike (ep_path.hpp).
#include <string>

#include "base/error.hpp"
#include "comm/comm.hpp"
#include "ep/ep_staged_calls.hpp"
#include "ep/expert_parallel.hpp"

namespace loom::ep {

namespace {

CollArgs signature(CallKind kind) {
  CollArgs a;
  a.func = kFuncExpertParallel;
  a.count = static_cast<size_t>(kind);
  a.dtype = loomUint8;
  return a;
}

}  // namespace

// An argument struct the call can read: the caller's, or an empty one when it is NULL or of
// another size (the verdict then says so).
template <typename Args>
const Args& readable(const Args* a, const char* name, std::string& misuse) {
  static const Args kEmpty{};
  if (a != nullptr && a->size == sizeof(Args)) return *a;
  misuse = std::string("args is NULL or its size is not sizeof(") + name + ")";
  return kEmpty;
}

void ExpertParallel::dispatchCounts(const loomEpDispatchArgs_t* a, loomStream_t stream) {
  normal(CallKind::kDispatchCounts, a, nullptr, stream);
}

void ExpertParallel::dispatch(const loomEpDispatchArgs_t* a, loomStream_t stream) {
  normal(CallKind::kDispatch, a, nullptr, stream);
}

void ExpertParallel::combine(const loomEpCombineArgs_t* a, loomStream_t stream) {
  normal(CallKind::kCombine, nullptr, a, stream);
}

void ExpertParallel::normal(CallKind kind, const loomEpDispatchArgs_t* dispatch,
                            const loomEpCombineArgs_t* combine, loomStream_t stream) {
  const CollArgs sig = signature(kind);
  comm_.runCall(&sig, [&] {
    std::string misuse;
    const bool isDispatch = kind != CallKind::kCombine;
    NormalCall call =
        isDispatch ? checkDispatch(sizes_, readable(dispatch, "loomEpDispatchArgs_t", misuse), kind)
                   : checkCombine(sizes_, readable(combine, "loomEpCombineArgs_t", misuse));
    if (!misuse.empty()) {
      call.verdict = Verdict();
      call.verdict.fail(misuse);
    }
    checkStream(stream, call.verdict);
    if (native_) return runNative(kind, call, stream);
    loomEpDispatchArgs_t hostDispatch{};
    loomEpCombineArgs_t hostCombine{};
    loomEpHandle_t hostHandle{};
    const bool stage = staged() && call.verdict.ok();
    if (stage) {
      for (int pass = 0; pass < 2; ++pass) {
        pass == 0 ? staging_->measure() : staging_->stage(stream);
        if (isDispatch)
          stageDispatch(*staging_, sizes_, call, hostDispatch, hostHandle);
        else
          stageCombine(*staging_, sizes_, call, hostCombine, hostHandle);
      }
      staging_->arrived();
      if (isDispatch)
        call.dispatch = &hostDispatch;
      else
        call.combine = &hostCombine;
      call.handle = &hostHandle;
    }
    if (isDispatch)
      checkExpertIds(sizes_, call.dispatch->topkIdx, call.numTokens, call.dispatch->topk,
                     call.verdict);
    if (kind == CallKind::kDispatchCounts)
      path_->dispatchCounts(call);
    else if (kind == CallKind::kDispatch)
      path_->dispatch(call);
    else
      path_->combine(call);
    if (!stage) return;
    staging_->finish();
    if (isDispatch) {
      dispatch->handle->numTokens = hostHandle.numTokens;
      dispatch->handle->numRecvTokens = hostHandle.numRecvTokens;
    }
  });
}

template <typename Launch>
void ExpertParallel::onNative(const Verdict& verdict, Launch&& launch) {
  // The kernels tell the peers this rank's verdict: they run whatever it is.
  launch(verdict.status);
  // A failure a kernel recorded (in this call or an earlier one: a peer's bad argument, a
  // timeout) is reported once this call is enqueued, so that no peer waits for this rank.
  const auto [code, message] = native_->errors();
  LOOM_CHECK_ARG(verdict.ok(), "expert-parallel call: ", verdict.reason);
  if (code != loomSuccess) LOOM_THROW(code, "expert-parallel kernels: ", message);
}

void ExpertParallel::runNative(CallKind kind, const NormalCall& call, loomStream_t stream) {
  // A call with a bad verdict may lack its arrays: the kernels then get none, only the verdict.
  loomEpHandle_t none{0, 0, nullptr, nullptr, nullptr, nullptr};
  loomEpDispatchArgs_t noDispatch{};
  noDispatch.size = sizeof(noDispatch);
  noDispatch.handle = &none;
  loomEpCombineArgs_t noCombine{};
  noCombine.size = sizeof(noCombine);
  noCombine.handle = &none;
  const bool ok = call.verdict.ok();
  onNative(call.verdict, [&](int status) {
    if (kind == CallKind::kDispatchCounts)
      native_->dispatchCounts(ok ? *call.dispatch : noDispatch, status, stream);
    else if (kind == CallKind::kDispatch)
      native_->dispatch(ok ? *call.dispatch : noDispatch, status, stream);
    else
      native_->combine(ok ? *call.combine : noCombine, status, stream);
  });
}

int ExpertParallel::lowLatencyDispatch(const loomEpLowLatencyDispatchArgs_t* a, bool hook,
                                       loomStream_t stream) {
  std::string misuse;
  LowLatencyCall call =
      checkLowLatencyDispatch(sizes_, readable(a, "loomEpLowLatencyDispatchArgs_t", misuse));
  if (!misuse.empty()) call.verdict = Verdict(), call.verdict.fail(misuse);
  return lowLatency(call, hook, stream);
}

int ExpertParallel::lowLatencyCombine(const loomEpLowLatencyCombineArgs_t* a, bool hook,
                                      loomStream_t stream) {
  std::string misuse;
  const loomEpLowLatencyCombineArgs_t& args = readable(a, "loomEpLowLatencyCombineArgs_t", misuse);
  LowLatencyCall call = checkLowLatencyCombine(sizes_, args);
  if (!misuse.empty()) call.verdict = Verdict(), call.verdict.fail(misuse);
  if (misuse.empty() && args.x == nullptr && staged())
    call.verdict.fail("the zero-copy combine (x NULL) is not offered on a staged device rank");
  return lowLatency(call, hook, stream);
}

int ExpertParallel::lowLatency(LowLatencyCall call, bool hook, loomStream_t stream) {
  int id = 0;
  const CollArgs sig = signature(call.shape.kind);
  comm_.runCall(&sig, [&] {
    checkStream(stream, call.verdict);
    // Outstanding hooks alternate between two slots, as the calls' buffers do.
    const int slot = static_cast<int>(lowLatencyCalls_++ & 1);
    if (pending_[slot])
      LOOM_THROW(loomInvalidUsage, "low-latency ", callKindName(call.shape.kind),
                 ": the hook of the call two low-latency calls back has not run (at most two "
                 "may be outstanding)");
    call.slot = slot;
    if (native_) {
      loomEpLowLatencyDispatchArgs_t noDispatch{};
      loomEpLowLatencyCombineArgs_t noCombine{};
      const bool ok = call.verdict.ok();
      onNative(call.verdict, [&](int status) {
        if (call.isDispatch())
          native_->lowLatencyDispatch(ok ? call.dispatch : noDispatch, status, slot, true,
                                      !hook || !ok, stream);
        else
          native_->lowLatencyCombine(ok ? call.combine : noCombine, status, slot, true,
                                     !hook || !ok, stream);
      });
      if (hook && call.verdict.ok()) {
        id = nextHook_++;
        pending_[slot] = Pending{id, call};
      }
      return;
    }
    const bool stage = staged() && call.verdict.ok();
    if (stage) {
      // A staged rank finishes at the call: its host copies are reused by the next call.
      hook = false;
      LowLatencyCall host = call;
      for (int pass = 0; pass < 2; ++pass) {
        pass == 0 ? staging_->measure() : staging_->stage(stream);
        if (call.isDispatch())
          stageLowLatencyDispatch(*staging_, sizes_, call.dispatch, host.dispatch);
        else
          stageLowLatencyCombine(*staging_, sizes_, call.combine, host.combine);
      }
      staging_->arrived();
      call = host;
    }
    const int64_t* topk = call.isDispatch() ? call.dispatch.topkIdx : call.combine.topkIdx;
    const int tokens = call.isDispatch() ? call.dispatch.numTokens : call.combine.numTokens;
    checkExpertIds(sizes_, topk, tokens, call.shape.topk, call.verdict);
    path_->lowLatencySend(call);
    if (!hook || call.received) {
      path_->lowLatencyReceive(call);
      if (stage) staging_->finish();
      return;
    }
    id = nextHook_++;
    pending_[slot] = Pending{id, call};
  });
  return id;
}

void ExpertParallel::hookWait(int hook, loomStream_t stream) {
  int slot = -1;
  for (int s = 0; s < 2; ++s)
    if (pending_[s] && pending_[s]->id == hook) slot = s;
  LOOM_CHECK_ARG(slot >= 0, "loomEpHookWait: hook ", hook, " is not outstanding");
  LOOM_CHECK_ARG(stream == nullptr || comm_.onDevice(), "a CPU communicator takes a NULL stream");
  LowLatencyCall call = pending_[slot]->call;
  pending_[slot].reset();
  // Part of the call that returned the hook: not counted again.
  if (native_) {
    comm_.runCall(nullptr, [&] {
      onNative(call.verdict, [&](int status) {
        if (call.isDispatch())
          native_->lowLatencyDispatch(call.dispatch, status, call.slot, false, true, stream);
        else
          native_->lowLatencyCombine(call.combine, status, call.slot, false, true, stream);
      });
    });
    return;
  }
  comm_.runCall(nullptr, [&] { path_->lowLatencyReceive(call); });
}

void* ExpertParallel::lowLatencyCombineBuffer(int hidden) {
  LOOM_CHECK_ARG(sizes_.modes & LOOM_EP_LOW_LATENCY,
                 "loomEpLowLatencyCombineBuffer: created without LOOM_EP_LOW_LATENCY");
  LOOM_CHECK_ARG(!staged(), "loomEpLowLatencyCombineBuffer: not offered on a staged device rank");
  LOOM_CHECK_ARG(hidden > 0 && hidden <= sizes_.hidden, "loomEpLowLatencyCombineBuffer: hidden ",
                 hidden, " is outside [1, ", sizes_.hidden, "]");
  if (native_)
    return native_->lowLatencyCombineBuffer(static_cast<int>(lowLatencyCalls_ & 1), hidden);
  char* buffer = nullptr;
  comm_.runCall(nullptr, [&] { buffer = path_->nextCombineBuffer(hidden); });
  return buffer;
}

}  // namespace loom::ep
