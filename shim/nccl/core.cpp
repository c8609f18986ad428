// Errors, communicator checks, the real NCCL's twin, and groups.
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <set>
#include <thread>
#include <unordered_map>

#include "shim.hpp"
#include "shim_env.hpp"

#if defined(LOOM_HAVE_CUDA)
#include <cuda_runtime_api.h>
#endif

namespace loom::nccl_shim {
namespace {

thread_local std::string tlsLastError;

// Operations recorded between ncclGroupStart and ncclGroupEnd on this thread.
struct PendingOp {
  Entry entry;
  ncclComm* comm;
  bool real;
  std::function<ncclResult_t()> prepare;  // real ops: makes the real communicator if needed
  std::function<ncclResult_t()> issue;
  std::function<void()> after;  // once the real NCCL's group around it ended (or it was issued)
  bool standalone = false;      // a Loom call outside Loom's group that waits for the peers
};
struct GroupState {
  int depth = 0;
  ncclResult_t firstError = ncclSuccess;  // an op refused while recording fails the group's end
  std::vector<PendingOp> ops;
  std::vector<DeferredInit> inits;
};
thread_local GroupState tlsGroup;

ncclResult_t firstFailure(ncclResult_t a, ncclResult_t b) {
  if (a != ncclSuccess && a != ncclInProgress) return a;
  if (b != ncclSuccess && b != ncclInProgress) return b;
  return a == ncclInProgress || b == ncclInProgress ? ncclInProgress : ncclSuccess;
}

// `withAfter` false: the caller runs op.after itself, once the group around the op ended.
ncclResult_t issueCounted(const PendingOp& op, bool withAfter = true) {
  ncclResult_t result = op.prepare ? op.prepare() : ncclSuccess;
  if (result == ncclSuccess) result = op.issue();
  if (withAfter && op.after) op.after();
  if (result != ncclSuccess && result != ncclInProgress) count(op.entry, Route::kError);
  return result;
}

// The ops of one thread's share of a group: Loom's as one Loom group, then the real NCCL's as
// one group of its own (its communicators made first: NCCL defers an init inside a group).
ncclResult_t runOps(const std::vector<const PendingOp*>& ops) {
  ncclResult_t result = ncclSuccess;
  bool anyLoom = false, anyReal = false;
  for (const PendingOp* op : ops) {
    if (op->standalone)  // registrations: before the calls that may use them
      result = firstFailure(result, issueCounted(*op));
    else
      (op->real ? anyReal : anyLoom) = true;
  }
  if (anyLoom) {
    // Each communicator's operations together (in their order; communicators in order of first
    // appearance): Loom's group runs a GPU communicator's consecutive sends and receives as one
    // kernel, so that a caller interleaving communicators (send on A, send on B, receive on A...)
    // does not get a send kernel waiting for a receive queued behind it on the same stream. The
    // operations of a group are concurrent: the order across communicators is the caller's only.
    std::vector<const PendingOp*> ordered;
    for (const PendingOp* op : ops) {
      if (op->real || op->standalone) continue;
      bool seen = false;
      for (const PendingOp* o : ordered) seen |= o->comm == op->comm;
      if (seen) continue;
      for (const PendingOp* same : ops)
        if (same->comm == op->comm && !same->real && !same->standalone) ordered.push_back(same);
    }
    loomGroupStart();
    for (const PendingOp* op : ordered) result = firstFailure(result, issueCounted(*op, false));
    result = firstFailure(result, fromLoom(Entry::kGroupEnd, loomGroupEnd()));
    // Loom's group issued the calls at its end: what follows them (an in-place alltoall's scratch
    // freed in stream order) comes now.
    for (const PendingOp* op : ordered)
      if (op->after) op->after();
  }
  if (!anyReal) return result;
  std::vector<const PendingOp*> ready;
  for (const PendingOp* op : ops) {
    if (!op->real || op->standalone) continue;
    ncclResult_t prepared = op->prepare ? op->prepare() : ncclSuccess;
    if (prepared != ncclSuccess) {
      count(op->entry, Route::kError);
      result = firstFailure(result, prepared);
    } else {
      ready.push_back(op);
    }
  }
  if (ready.empty()) return result;
  const RealNccl* lib = realNccl(nullptr);  // loaded: the ops were routed there
  lib->GroupStart();
  for (const PendingOp* op : ready) {
    ncclResult_t issued = op->issue();
    if (issued != ncclSuccess && issued != ncclInProgress) count(op->entry, Route::kError);
    result = firstFailure(result, issued);
  }
  result = firstFailure(result, fromReal(Entry::kGroupEnd, *lib, nullptr, lib->GroupEnd()));
  for (const PendingOp* op : ready)
    if (op->after) op->after();
  return result;
}

// One thread runs the group; or one thread per communicator when it holds several and some
// part of it blocks its thread until the other ranks joined: a host collective (ncclCommInitAll in
// host mode), a window registration, every collective under LOOM_CHECK=2 (its fingerprint
// exchange), or making a real NCCL communicator.
ncclResult_t runGroup(const std::vector<PendingOp>& ops) {
  std::vector<ncclComm*> comms;
  bool blocks = env::loomCheck() >= 2;
  for (const PendingOp& op : ops) {
    blocks |= op.comm->onHost || op.standalone;
    bool known = false;
    for (ncclComm* c : comms) known |= c == op.comm;
    if (!known) comms.push_back(op.comm);
  }
  ncclResult_t result = ncclSuccess;
  if (!blocks || comms.size() < 2) {
    std::vector<const PendingOp*> all;
    for (const PendingOp& op : ops) all.push_back(&op);
    return runOps(all);
  }
  std::vector<ncclResult_t> results(comms.size(), ncclSuccess);
  std::vector<std::string> messages(comms.size());
  std::vector<std::thread> threads;
  for (size_t c = 0; c < comms.size(); ++c) {
    threads.emplace_back([&, c] {
      std::vector<const PendingOp*> mine;
      for (const PendingOp& op : ops)
        if (op.comm == comms[c]) mine.push_back(&op);
      results[c] = runOps(mine);
      messages[c] = lastError();
    });
  }
  for (std::thread& t : threads) t.join();
  for (size_t c = 0; c < comms.size(); ++c) {
    if (results[c] != ncclSuccess && results[c] != ncclInProgress && result == ncclSuccess)
      setLastError(messages[c]);
    result = firstFailure(result, results[c]);
  }
  return result;
}

}  // namespace

void setLastError(const std::string& message) { tlsLastError = message; }
const char* lastError() { return tlsLastError.c_str(); }

ncclResult_t fail(Entry entry, ncclResult_t code, const std::string& message) {
  setLastError("nccl" + std::string(entryName(entry)) + ": " + message);
  count(entry, Route::kError);
  if (env::infoEnabled()) std::fprintf(stderr, "loom-nccl INFO %s\n", lastError());
  return code;
}

ncclResult_t fromLoom(Entry, loomResult_t result) {
  switch (result) {
    case loomSuccess:
      return ncclSuccess;
    case loomInProgress:
      return ncclInProgress;
    default:
      break;
  }
  setLastError(loomGetLastError(nullptr));
  switch (result) {
    case loomUnhandledCudaError:
      return ncclUnhandledCudaError;
    case loomSystemError:
      return ncclSystemError;
    case loomInvalidArgument:
      return ncclInvalidArgument;
    case loomInvalidUsage:
      return ncclInvalidUsage;
    case loomRemoteError:
      return ncclRemoteError;
    case loomTimeout:
#if NCCL_VERSION_CODE >= NCCL_VERSION(2, 30, 0)
      return ncclTimeout;  // NCCL's own code for it since 2.30
#else
      return ncclRemoteError;  // before 2.30 NCCL reports peers that did not come as remote
#endif
    default:
      return ncclInternalError;
  }
}

ncclResult_t fromReal(Entry, const RealNccl& lib, RealComm* comm, ncclResult_t result) {
  if (result != ncclSuccess && result != ncclInProgress) {
    const char* message = lib.GetLastError != nullptr
                              ? lib.GetLastError(reinterpret_cast<ncclComm_t>(comm))
                              : nullptr;
    std::string text = "real NCCL (" + lib.path + "): ";
    text += lib.GetErrorString != nullptr ? lib.GetErrorString(result) : "error";
    if (message != nullptr && *message != '\0') text += std::string(": ") + message;
    setLastError(text);
  }
  return result;
}

void warnOnce(const std::string& key, const std::string& message) {
  static std::mutex mutex;
  static std::set<std::string> said;
  {
    std::lock_guard<std::mutex> lock(mutex);
    if (!said.insert(key).second) return;
  }
  if (env::warnEnabled())
    std::fprintf(stderr, "loom-nccl WARN (pid %d) %s\n", static_cast<int>(getpid()),
                 message.c_str());
}

const char* opKindName(OpKind kind) {
  static const char* const names[] = {"allreduce", "broadcast",     "reduce",
                                      "allgather", "reducescatter", "alltoall",
                                      "gather",    "scatter",       "sendrecv"};
  return names[static_cast<int>(kind)];
}

bool forcedToNccl(OpKind kind) {
  for (const std::string& op : env::forceFallback()) {
    if (op == opKindName(kind)) return true;
    if (kind == OpKind::kSendRecv && (op == "send" || op == "recv")) return true;
    if (kind == OpKind::kBroadcast && op == "bcast") return true;
  }
  return false;
}

bool hostMode() { return env::device() == "cpu"; }

bool wholeFallback(std::string* why) {
  for (const std::string& op : env::forceFallback()) {
    if (op == "all") {
      if (why != nullptr) *why = "LOOM_NCCL_FORCE_FALLBACK=all";
      return true;
    }
  }
#if !defined(LOOM_HAVE_CUDA)
  if (!hostMode()) {
    if (why != nullptr)
      *why = "this Loom was built without CUDA and buffers are CUDA memory (LOOM_NCCL_DEVICE=" +
             env::device() + ")";
    return true;
  }
#endif
  return false;
}

int currentCudaDevice() {
#if defined(LOOM_HAVE_CUDA)
  int device = -1;
  if (cudaGetDevice(&device) != cudaSuccess) return -1;
  return device;
#else
  return -1;
#endif
}

loomConfig_t loomConfigFor(const ncclConfig_t* config, int cudaDevice, std::string* device) {
  loomConfig_t cfg = LOOM_CONFIG_INITIALIZER;
  *device = hostMode()        ? std::string("cpu")
            : cudaDevice >= 0 ? "cuda:" + std::to_string(cudaDevice)
                              : "cuda";
  cfg.device = device->c_str();
  if (config != nullptr) {
    // Fields Loom has a meaning for; the others (CTAs, CGA cluster size, net name, collnet,
    // NVLS, split share, traffic class) tune NCCL's own kernels and network and are ignored.
    // Loom's CUDA communicators are blocking only (their collectives return once queued on the
    // stream anyway): a non-blocking NCCL caller sees each call done at once, which NCCL allows.
    if (config->blocking != NCCL_CONFIG_UNDEF_INT && hostMode())
      cfg.blocking = config->blocking != 0;
    if (config->commName != NCCL_CONFIG_UNDEF_PTR) cfg.name = config->commName;
  }
  return cfg;
}

namespace {

// The real NCCL's communicators this shim made, by their real handle. The real library calls some
// of its own exported functions (ncclCommGetAsyncError inside every collective); where it was
// loaded before the shim without RTLD_DEEPBIND (torch preloads it with RTLD_GLOBAL), those calls
// bind to the shim's functions and arrive with the real handle, which stands for its shim
// communicator.
struct RealHandles {
  std::mutex mutex;
  std::unordered_map<const RealComm*, ncclComm*> shimOf;
};
RealHandles& realHandles() {
  static RealHandles handles;  // process-wide, as the real NCCL's own state
  return handles;
}

ncclComm* shimCommOfReal(const void* handle) {
  RealHandles& h = realHandles();
  std::lock_guard<std::mutex> lock(h.mutex);
  auto it = h.shimOf.find(static_cast<const RealComm*>(handle));
  return it == h.shimOf.end() ? nullptr : it->second;
}

}  // namespace

bool isRealHandle(ncclComm_t handle) {
  if (handle == nullptr || handle->magic == ncclComm::kMagic) return false;
  // A real communicator starts with NCCL's own magic (what its CommCheck tests), also while its
  // init runs, before this shim registered it.
  constexpr uint64_t kRealNcclMagic = 0x0280028002800280ull;
  return handle->magic == kRealNcclMagic || shimCommOfReal(handle) != nullptr;
}

void setReal(ncclComm* comm, RealComm* real) {
  RealHandles& h = realHandles();
  std::lock_guard<std::mutex> lock(h.mutex);
  if (comm->real != nullptr) h.shimOf.erase(comm->real);
  comm->real = real;
  if (real != nullptr) h.shimOf[real] = comm;
}

ncclComm* checkComm(Entry entry, ncclComm_t comm, ncclResult_t* error) {
  if (comm == nullptr) {
    *error = fail(entry, ncclInvalidArgument, "comm is NULL");
    return nullptr;
  }
  if (comm->magic == ncclComm::kMagic) return comm;
  if (ncclComm* mine = shimCommOfReal(comm)) return mine;  // the real NCCL's own call
  *error = fail(entry, ncclInvalidArgument, "comm is not a communicator of this library");
  return nullptr;
}

ncclComm* checkReady(Entry entry, ncclComm_t comm, ncclResult_t* error) {
  ncclComm* c = checkComm(entry, comm, error);
  if (c == nullptr) return nullptr;
  const ncclResult_t state = c->initState.load();
  if (state == ncclSuccess) {
    if (!c->suspended.load()) return c;
    *error = fail(entry, ncclInvalidUsage, "the communicator is suspended (ncclCommSuspend)");
    return nullptr;
  }
  if (state == ncclInProgress) {
    // As in NCCL: an init and the calls on its communicator do not go in one group.
    *error = fail(entry, ncclInvalidUsage,
                  "the communicator is made at the end of the group its init was called in; "
                  "call this after that ncclGroupEnd");
  } else {
    *error = fail(entry, state, "the communicator's init failed: " + c->initError);
  }
  return nullptr;
}

bool deferInit(const DeferredInit& init) {
  if (tlsGroup.depth == 0) return false;
  init.comm->initState.store(ncclInProgress);
  tlsGroup.inits.push_back(init);
  return true;
}

ncclResult_t ensureReal(Entry entry, ncclComm* comm, const char* why, const RealNccl** lib) {
  std::string missing;
  *lib = realNccl(&missing);
  if (*lib == nullptr)
    return fail(entry, ncclInvalidUsage,
                std::string(why) + ", and there is no real NCCL to run it: " + missing);
  std::lock_guard<std::mutex> lock(comm->mutex);
  if (comm->real != nullptr) return ncclSuccess;
  if (comm->twinStatus != ncclSuccess) {
    setLastError(comm->twinError);
    return comm->twinStatus;
  }
  warnOnce(std::string("twin:") + why,
           std::string(why) + ": such calls run on the real NCCL (" + (*lib)->path +
               ") through a communicator of its own over the same ranks");
  // Rank 0's unique id of the real NCCL reaches the others over Loom, in host memory: a CUDA
  // communicator lends a CPU child for it.
  loomComm_t host = comm->loom;
  loomConfig_t cpu = LOOM_CONFIG_INITIALIZER;
  cpu.device = "cpu";
  auto failTwin = [&](ncclResult_t code) {
    comm->twinStatus = code;
    comm->twinError =
        std::string("cannot make the real NCCL's communicator for fallback: ") + lastError();
    setLastError(comm->twinError);
    count(entry, Route::kError);
    return code;
  };
  if (!comm->onHost) {
    ncclResult_t split = fromLoom(entry, loomCommSplit(comm->loom, 0, comm->rank, &host, &cpu));
    if (split != ncclSuccess) return failTwin(split);
  }
  ncclUniqueId id{};
  ncclResult_t result = ncclSuccess;
  if (comm->rank == 0) result = fromReal(entry, **lib, nullptr, (*lib)->GetUniqueId(&id));
  // Every rank takes part in the broadcast even when rank 0 failed: it sends zeros, and the
  // others' NCCL init fails on them instead of waiting for a broadcast that never comes.
  ncclResult_t shared =
      fromLoom(entry, loomBroadcast(&id, &id, sizeof(id), loomUint8, 0, host, nullptr));
  if (shared == ncclInProgress) shared = waitLoom(entry, host);
  if (host != comm->loom) loomCommDestroy(host);
  if (result != ncclSuccess) return failTwin(result);
  if (shared != ncclSuccess) return failTwin(shared);
  ncclComm_t real = nullptr;
  if (comm->hasConfig && (*lib)->CommInitRankConfig != nullptr) {
    ncclConfig_t config = comm->config;
    config.blocking = 1;  // made here, synchronously, inside the caller's call
    result = (*lib)->CommInitRankConfig(&real, comm->nranks, id, comm->rank, &config);
  } else {
    result = (*lib)->CommInitRank(&real, comm->nranks, id, comm->rank);
  }
  if (fromReal(entry, **lib, nullptr, result) != ncclSuccess) return failTwin(result);
  setReal(comm, reinterpret_cast<RealComm*>(real));
  return ncclSuccess;
}

int groupDepth() { return tlsGroup.depth; }

void refuseInGroup(ncclResult_t code) {
  if (tlsGroup.depth > 0 && tlsGroup.firstError == ncclSuccess) tlsGroup.firstError = code;
}

ncclResult_t waitLoom(Entry entry, loomComm_t comm) {
  for (;;) {
    loomResult_t state = loomInProgress;
    loomResult_t asked = loomCommGetAsyncError(comm, &state);
    if (asked != loomSuccess) return fromLoom(entry, asked);
    if (state != loomInProgress) return fromLoom(entry, state);
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
}

ncclResult_t submit(Entry entry, ncclComm* comm, bool real, std::function<ncclResult_t()> prepare,
                    std::function<ncclResult_t()> issue, std::function<void()> after) {
  count(entry, real ? Route::kNccl : Route::kLoom);
  PendingOp op{entry, comm, real, std::move(prepare), std::move(issue), std::move(after)};
  if (tlsGroup.depth == 0) return issueCounted(op);
  tlsGroup.ops.push_back(std::move(op));
  return ncclSuccess;
}

ncclResult_t submitCollectiveCall(Entry entry, ncclComm* comm,
                                  std::function<ncclResult_t()> issue) {
  PendingOp op{entry, comm, false, {}, std::move(issue), {}};
  op.standalone = true;
  if (tlsGroup.depth == 0) return issueCounted(op);
  tlsGroup.ops.push_back(std::move(op));
  return ncclSuccess;
}

size_t typeBytes(ncclDataType_t type) {
  switch (type) {
    case ncclInt8:
    case ncclUint8:
    case ncclFloat8e4m3:
    case ncclFloat8e5m2:
      return 1;
    case ncclFloat16:
    case ncclBfloat16:
      return 2;
    case ncclInt32:
    case ncclUint32:
    case ncclFloat32:
      return 4;
    default:
      return 8;
  }
}

}  // namespace loom::nccl_shim

using namespace loom::nccl_shim;

extern "C" {

ncclResult_t ncclGroupStart() {
  count(Entry::kGroupStart, Route::kLoom);
  ++tlsGroup.depth;
  return ncclSuccess;
}

ncclResult_t ncclGroupEnd() {
  if (tlsGroup.depth == 0)
    return fail(Entry::kGroupEnd, ncclInvalidUsage, "ncclGroupEnd without ncclGroupStart");
  count(Entry::kGroupEnd, Route::kLoom);
  if (--tlsGroup.depth > 0) return ncclSuccess;
  std::vector<PendingOp> ops = std::move(tlsGroup.ops);
  std::vector<DeferredInit> inits = std::move(tlsGroup.inits);
  tlsGroup.ops.clear();
  tlsGroup.inits.clear();
  ncclResult_t result = std::exchange(tlsGroup.firstError, ncclSuccess);
  if (result != ncclSuccess) {
    // As NCCL does: a group with a refused operation is dropped as a whole (every rank refused
    // the same arguments), and its end reports the refusal.
    const std::string why =
        std::string("group dropped: an operation in it failed (") + lastError() + ")";
    for (const DeferredInit& init : inits) {
      if (init.comm->magic != ncclComm::kMagic) {  // a split's NOCOLOR placeholder
        delete init.comm;
        continue;
      }
      init.comm->initError = why;
      init.comm->initState.store(result);
    }
    setLastError(why);
    return result;
  }
  // The group's inits first, all together (NCCL's deferred inits): each waits for its peers.
  if (!inits.empty()) {
    result = makeDeferred(std::move(inits));
    if (result != ncclSuccess) {
      for (const PendingOp& op : ops) count(op.entry, Route::kError);
      return result;
    }
  }
  return runGroup(ops);
}

ncclResult_t ncclGroupSimulateEnd(ncclSimInfo_t* simInfo) {
  if (tlsGroup.depth == 0)
    return fail(Entry::kGroupSimulateEnd, ncclInvalidUsage,
                "ncclGroupSimulateEnd without ncclGroupStart");
  if (simInfo == nullptr)
    return fail(Entry::kGroupSimulateEnd, ncclInvalidArgument, "simInfo is NULL");
  count(Entry::kGroupSimulateEnd, Route::kLoom);
  // NCCL ends the group without running it and estimates its time; Loom has no cost model, so
  // the estimate is NCCL's "undefined" value.
  if (--tlsGroup.depth == 0) {
    tlsGroup.ops.clear();
    tlsGroup.firstError = ncclSuccess;
    for (const DeferredInit& init : tlsGroup.inits) {
      if (init.comm->magic != ncclComm::kMagic) {  // a split's NOCOLOR placeholder
        delete init.comm;
        continue;
      }
      init.comm->initError = "its group ended with ncclGroupSimulateEnd, which makes nothing";
      init.comm->initState.store(ncclInvalidUsage);
    }
    tlsGroup.inits.clear();
  }
  simInfo->estimatedTime = NCCL_UNDEF_FLOAT;
  return ncclSuccess;
}

}  // extern "C"

LOOM_NCCL_PALIAS(ncclGroupStart)
LOOM_NCCL_PALIAS(ncclGroupEnd)
LOOM_NCCL_PALIAS(ncclGroupSimulateEnd)
