// The NCCL shim: NCCL's C API (the nccl.h built against: 2.32's by default, programs built
// against 2.28's run too) over Loom's public C API.
//
// An ncclComm_t of the shim points to an ncclComm below: a Loom communicator (CPU or CUDA), and,
// where some call needs what Loom does not do, the real NCCL's communicator over the same ranks
// (its "twin", made on first need, collectively, from a unique id that rank 0 gets from the real
// library and broadcasts over Loom). A communicator without a Loom side is the real NCCL's as a
// whole (LOOM_NCCL_FORCE_FALLBACK=all, or a CUDA job on a Loom built without CUDA).
//
// Process-wide state is what NCCL's API implies: the group (ncclGroupStart/End take no
// communicator, so a group is per thread), the loaded real library, the report's counters and the
// last error message of each thread (ncclGetLastError).
#pragma once

#include <loom/loom.h>
// NCCL's functions are this library's exports: default visibility for what nccl.h declares (the
// build hides everything else; exports.map keeps only nccl* and pnccl*).
#pragma GCC visibility push(default)
#include <nccl.h>
#pragma GCC visibility pop

#include <array>
#include <atomic>
#include <cstdint>
#include <functional>
#include <mutex>
#include <string>
#include <vector>

#include "real_nccl.hpp"
#include "report.hpp"

namespace loom::nccl_shim {

// The operations LOOM_NCCL_FORCE_FALLBACK names, and how fallback routes them: a send and a
// receive must go the same way, so they are one kind.
enum class OpKind {
  kAllReduce,
  kBroadcast,
  kReduce,
  kAllGather,
  kReduceScatter,
  kAllToAll,
  kGather,
  kScatter,
  kSendRecv,
  kCount
};
const char* opKindName(OpKind kind);
bool forcedToNccl(OpKind kind);
// LOOM_NCCL_FORCE_FALLBACK=all, or CUDA buffers on a Loom built without CUDA: every
// communicator is the real NCCL's, from its unique id on.
bool wholeFallback(std::string* why);
bool hostMode();  // LOOM_NCCL_DEVICE=cpu

// A reduction made by ncclRedOpCreatePreMulSum: sum of (scalar x input).
struct PreMulSum {
  bool live = false;
  ncclDataType_t type = ncclFloat32;
  ncclScalarResidence_t residence = ncclScalarHostImmediate;
  std::array<unsigned char, 8> value{};  // host-immediate scalars, read at creation
  const void* scalar = nullptr;          // ncclScalarDevice: read when the collective runs
};

// Window and registration handles: the real NCCL's where the communicator is the real one's.
struct Registration {
  static constexpr uint64_t kMagic = 0x4c4f4f4d4e52454full;  // "LOOMNREO"
  uint64_t magic = kMagic;
  void* buffer = nullptr;
  size_t bytes = 0;
  void* real = nullptr;  // the real NCCL's handle (ncclCommRegister / ncclCommWindowRegister)
  loomWindow_t window = nullptr;  // a window of a Loom communicator (ncclCommWindowRegister)
  loomRegistration_t loomRegistration = nullptr;  // ncclCommRegister on a Loom communicator
  int rank = -1;  // the registering rank (ncclGetPeerDevicePointer of its own part)
};

}  // namespace loom::nccl_shim

struct RealComm;  // the real NCCL's communicator: opaque here

struct ncclComm {
  static constexpr uint64_t kMagic = 0x4c4f4f4d4e43434cull;  // "LOOMNCCL"
  uint64_t magic = kMagic;
  loomComm_t loom = nullptr;  // null: the whole communicator is the real NCCL's
  RealComm* real = nullptr;   // the real NCCL's communicator (whole, or the twin)
  bool onHost = false;        // LOOM_NCCL_DEVICE=cpu: buffers are host memory
  int rank = 0;
  int nranks = 0;
  int cudaDevice = -1;
  bool hasConfig = false;
  ncclConfig_t config{};  // the caller's, for the twin
  std::mutex mutex;       // the twin's creation, the reduction table
  ncclResult_t twinStatus = ncclSuccess;
  std::string twinError;
  std::vector<loom::nccl_shim::PreMulSum> preMulSums;  // op ncclNumOps + i
  // An init or split inside a group is made at the group's end, as NCCL defers it: until then
  // the handle is valid (count, rank, device, async error, destroy) but not usable. Success:
  // made; ncclInProgress: waiting for its group's end; any other code: it failed (initError).
  std::atomic<ncclResult_t> initState{ncclSuccess};
  std::string initError;
  // ncclCommSuspend'ed: not usable until ncclCommResume (NCCL 2.29+).
  std::atomic<bool> suspended{false};
};

namespace loom::nccl_shim {

// Sets comm's real NCCL communicator (null: none), so that a call that arrives with the real
// handle finds comm (checkComm).
void setReal(ncclComm* comm, RealComm* real);
// Whether handle is a real NCCL communicator this shim made (a call from inside the real NCCL).
bool isRealHandle(ncclComm_t handle);

// ncclGetLastError's message on this thread.
void setLastError(const std::string& message);
const char* lastError();
// A failure of the shim itself: message kept for ncclGetLastError, printed at LOOM_DEBUG=INFO.
ncclResult_t fail(Entry entry, ncclResult_t code, const std::string& message);
// Loom's result as NCCL's (loomTimeout: ncclTimeout from 2.30's header on, else ncclRemoteError);
// a failure copies Loom's message.
ncclResult_t fromLoom(Entry entry, loomResult_t result);
// The real NCCL's result; a failure copies its message.
ncclResult_t fromReal(Entry entry, const RealNccl& lib, RealComm* comm, ncclResult_t result);
void warnOnce(const std::string& key, const std::string& message);

// nullptr when comm is not one of the shim's communicators (the message is set).
ncclComm* checkComm(Entry entry, ncclComm_t comm, ncclResult_t* error);
// checkComm, and nullptr too when comm is not made yet (its init waits for its group's end) or
// its deferred init failed.
ncclComm* checkReady(Entry entry, ncclComm_t comm, ncclResult_t* error);

// An init or split called inside a group, made at the group's end (all of the group's together,
// each on the CUDA device that was current at its call).
struct DeferredInit {
  Entry entry;
  ncclComm* comm;              // the caller's handle, initState ncclInProgress
  ncclUniqueId id{};           // init: the communicator's id
  ncclComm* parent = nullptr;  // split: the parent (color, key)
  int color = 0;
  int key = 0;
};
// Inside a group: records `init` for the group's end. False outside a group.
bool deferInit(const DeferredInit& init);
// Makes a group's deferred inits, together: the inits of one unique id as one
// loomCommInitRanksConfig (a thread per rank inside), different ids and splits on threads of
// their own, and (LOOM_NCCL_FORCE_FALLBACK=all) the real NCCL's inits in one group of its own.
// Every handle ends made or failed; the first failure is returned with its message.
ncclResult_t makeDeferred(std::vector<DeferredInit> inits);
// The real NCCL's communicator for fallback calls on comm, made on first need (collective: every
// rank reaches it at the same call). Fails with NCCL's code and a message when there is none.
ncclResult_t ensureReal(Entry entry, ncclComm* comm, const char* why, const RealNccl** lib);

// Runs an operation now or, inside a group, at ncclGroupEnd. loom and real ops of one group run
// as Loom's group then the real NCCL's group. prepare (real ops, may be empty) runs first, outside
// the real NCCL's group: it makes the communicator's real side on first need. after (may be empty)
// runs once the group (Loom's or the real NCCL's) around the operation ended, or right after it
// was issued outside a group.
ncclResult_t submit(Entry entry, ncclComm* comm, bool real, std::function<ncclResult_t()> prepare,
                    std::function<ncclResult_t()> issue, std::function<void()> after = {});
// Runs a call that waits for the other ranks of comm (window registration) now or, inside a
// group, at its end: outside Loom's group, each communicator's on a thread of its own when the
// group holds several (one thread could not register them one after the other).
ncclResult_t submitCollectiveCall(Entry entry, ncclComm* comm, std::function<ncclResult_t()> issue);
int groupDepth();
// An operation refused inside a group fails the group's end too (as in NCCL).
void refuseInGroup(ncclResult_t code);
// Waits for a non-blocking Loom communicator's queued work.
ncclResult_t waitLoom(Entry entry, loomComm_t comm);

// Bytes of one element of type (NCCL's types; unknown ones count as 8).
size_t typeBytes(ncclDataType_t type);

// A new handle (Loom side not made yet); config copied whole or, from a caller built against an
// older nccl.h, as far as its size goes (the rest keeps NCCL_CONFIG_INITIALIZER's values).
ncclComm* newComm(int nranks, int rank, int cudaDevice, const ncclConfig_t* config);
// A handle for a communicator of the real NCCL as a whole; adoptReal makes an existing handle one.
ncclComm* wrapReal(const RealNccl& lib, ncclComm_t real, const ncclConfig_t* config);
void adoptReal(ncclComm* c, const RealNccl& lib, ncclComm_t real);
void deleteComm(ncclComm* c);
// ncclCommSplit now: the child fills `into` (a handle made at the call, for a deferred split) or
// a new handle in *newcomm; NCCL_SPLIT_NOCOLOR leaves both alone.
ncclResult_t splitNow(Entry entry, ncclComm* parent, int color, int key, const ncclConfig_t* config,
                      ncclComm* into, ncclComm_t* newcomm);

// Loom's config for a new communicator of this process.
loomConfig_t loomConfigFor(const ncclConfig_t* config, int cudaDevice, std::string* device);
// The calling thread's CUDA device (LOOM_HAVE_CUDA builds), else -1.
int currentCudaDevice();

}  // namespace loom::nccl_shim

// pncclX: NCCL's profiling names, the same functions (NCCL defines ncclX as weak aliases of them).
#define LOOM_NCCL_PALIAS(name)                                                     \
  _Pragma("GCC diagnostic push")                                                   \
      _Pragma("GCC diagnostic ignored \"-Wdeprecated-declarations\"") extern "C"   \
      __attribute__((visibility("default"), alias(#name))) decltype(name) p##name; \
  _Pragma("GCC diagnostic pop")
