// What NCCL 2.29 to 2.32 added to the API (docs/nccl-shim.md, "Since NCCL 2.29"), exported where
// the shim is built against 2.32's nccl.h: grow and its ids, suspend/resume and memory
// statistics, one-sided put and signals, the window's user pointer and peers' pointers, the
// communicator's properties, socket encryption, and NCCL's parameter API. What Loom does, it does
// on Loom; the rest goes to the real NCCL where the communicator (or window) is the real one's,
// and otherwise fails with ncclInvalidUsage and the reason. (The per-call config collectives are
// in collectives.cpp.)
#include <cstddef>
#include <cstring>

#include "shim.hpp"

#if NCCL_VERSION_CODE >= NCCL_VERSION(2, 32, 0)

using namespace loom::nccl_shim;

namespace {

// The real NCCL and its handle of c, where c is a communicator of the real NCCL as a whole; else
// null with the failure set: `what` Loom cannot do, and how to run it on the real NCCL.
const RealNccl* wholeReal(Entry entry, ncclComm* c, const char* what, ncclResult_t* error) {
  const RealNccl* lib = realNccl(nullptr);
  if (c->loom == nullptr && c->real != nullptr && lib != nullptr) return lib;
  *error = fail(entry, ncclInvalidUsage,
                std::string(what) +
                    " on a Loom communicator: Loom has no such operation (LOOM_NCCL_FORCE_FALLBACK"
                    "=all makes every communicator the real NCCL's, which does)");
  return nullptr;
}

ncclComm_t realHandle(const ncclComm* c) { return reinterpret_cast<ncclComm_t>(c->real); }

Registration* windowOf(ncclWindow_t win) {
  auto* r = reinterpret_cast<Registration*>(win);
  return r != nullptr && r->magic == Registration::kMagic ? r : nullptr;
}

// The real NCCL's window behind `win`, for window queries that only the real NCCL answers.
ncclResult_t onRealWindow(Entry entry, ncclWindow_t win, const char* what, ncclWindow_t* real,
                          const RealNccl** lib) {
  Registration* r = windowOf(win);
  if (r == nullptr) return fail(entry, ncclInvalidArgument, "win is not a window of this library");
  *lib = realNccl(nullptr);
  if (r->real == nullptr || *lib == nullptr)
    return fail(entry, ncclInvalidUsage,
                std::string(what) +
                    " of a window of a Loom communicator: Loom does not hand "
                    "out such pointers (its peers' memory is its kernels' only)");
  *real = static_cast<ncclWindow_t>(r->real);
  return ncclSuccess;
}

// The real library's answer, or ncclInvalidUsage when that library predates the function.
template <typename Fn, typename... Args>
ncclResult_t callReal(Entry entry, const RealNccl& lib, Fn fn, const char* name, Args... args) {
  if (fn == nullptr)
    return fail(entry, ncclInvalidUsage,
                lib.path + " (NCCL " + std::to_string(lib.version) + ") has no " + name);
  count(entry, Route::kNccl);
  return fromReal(entry, lib, nullptr, fn(args...));
}

}  // namespace

extern "C" {

// Grow: new ranks join an existing communicator. Loom's communicators have a fixed size; a
// communicator running on the real NCCL grows there (and new ranks, comm NULL, join the real
// NCCL's).
ncclResult_t ncclCommGetUniqueId(ncclComm_t comm, ncclUniqueId* uniqueId) {
  const Entry entry = Entry::kCommGetUniqueId;
  ncclResult_t error = ncclSuccess;
  ncclComm* c = checkReady(entry, comm, &error);
  if (c == nullptr) return error;
  const RealNccl* lib = wholeReal(entry, c, "ncclCommGetUniqueId (grow)", &error);
  if (lib == nullptr) return error;
  return callReal(entry, *lib, lib->CommGetUniqueId, "ncclCommGetUniqueId", realHandle(c),
                  uniqueId);
}

ncclResult_t ncclCommGrow(ncclComm_t comm, int nRanks, const ncclUniqueId* uniqueId, int rank,
                          ncclComm_t* newcomm, ncclConfig_t* config) {
  const Entry entry = Entry::kCommGrow;
  if (newcomm == nullptr) return fail(entry, ncclInvalidArgument, "newcomm is NULL");
  *newcomm = nullptr;
  ncclComm_t real = nullptr;
  const RealNccl* lib = nullptr;
  ncclResult_t result = ncclSuccess;
  if (comm == nullptr) {
    // A new rank: the id came from a grown communicator's ncclCommGetUniqueId, a real NCCL's.
    std::string missing;
    lib = realNccl(&missing);
    if (lib == nullptr)
      return fail(entry, ncclInvalidUsage,
                  "a new rank joins a communicator of the real NCCL (Loom's cannot grow), and "
                  "there is none: " +
                      missing);
    result = callReal(entry, *lib, lib->CommGrow, "ncclCommGrow", nullptr, nRanks, uniqueId, rank,
                      &real, config);
  } else {
    ncclResult_t error = ncclSuccess;
    ncclComm* c = checkReady(entry, comm, &error);
    if (c == nullptr) return error;
    lib = wholeReal(entry, c, "ncclCommGrow", &error);
    if (lib == nullptr) return error;
    result = callReal(entry, *lib, lib->CommGrow, "ncclCommGrow", realHandle(c), nRanks, uniqueId,
                      rank, &real, config);
  }
  if ((result == ncclSuccess || result == ncclInProgress) && real != nullptr)
    *newcomm = wrapReal(*lib, real, config);
  return result;
}

// Suspend: Loom keeps no memory it could give back between calls (its windows are a few MiB, its
// staging grows only on use), so suspending releases nothing on Loom's side; the communicator
// refuses calls until ncclCommResume, as NCCL's does. Its real NCCL side, if any, is suspended
// too.
ncclResult_t ncclCommSuspend(ncclComm_t comm, int flags) {
  const Entry entry = Entry::kCommSuspend;
  ncclResult_t error = ncclSuccess;
  ncclComm* c = checkReady(entry, comm, &error);
  if (c == nullptr) return error;
  const RealNccl* lib = realNccl(nullptr);
  if (c->real != nullptr && lib != nullptr && lib->CommSuspend != nullptr) {
    ncclResult_t r =
        callReal(entry, *lib, lib->CommSuspend, "ncclCommSuspend", realHandle(c), flags);
    if (r != ncclSuccess) return r;
  }
  if (c->loom != nullptr) count(entry, Route::kLoom);
  c->suspended.store(true);
  return ncclSuccess;
}

ncclResult_t ncclCommResume(ncclComm_t comm) {
  const Entry entry = Entry::kCommResume;
  ncclResult_t error = ncclSuccess;
  ncclComm* c = checkComm(entry, comm, &error);
  if (c == nullptr) return error;
  if (!c->suspended.load()) return fail(entry, ncclInvalidUsage, "comm is not suspended");
  const RealNccl* lib = realNccl(nullptr);
  if (c->real != nullptr && lib != nullptr && lib->CommResume != nullptr) {
    ncclResult_t r = callReal(entry, *lib, lib->CommResume, "ncclCommResume", realHandle(c));
    if (r != ncclSuccess) return r;
  }
  if (c->loom != nullptr) count(entry, Route::kLoom);
  c->suspended.store(false);
  return ncclSuccess;
}

// Memory NCCL tracks: Loom's side counts none (its allocations are not NCCL's to suspend); the
// real NCCL side's, where there is one, is added.
ncclResult_t ncclCommMemStats(ncclComm_t comm, ncclCommMemStat_t stat, uint64_t* value) {
  const Entry entry = Entry::kCommMemStats;
  ncclResult_t error = ncclSuccess;
  ncclComm* c = checkComm(entry, comm, &error);
  if (c == nullptr) return error;
  if (value == nullptr) return fail(entry, ncclInvalidArgument, "value is NULL");
  if (stat < ncclStatGpuMemSuspend || stat > ncclStatGpuMemTotal)
    return fail(entry, ncclInvalidArgument, "stat " + std::to_string(stat) + " is not known");
  *value = 0;
  const RealNccl* lib = realNccl(nullptr);
  if (c->real != nullptr && lib != nullptr && lib->CommMemStats != nullptr) {
    ncclResult_t r =
        callReal(entry, *lib, lib->CommMemStats, "ncclCommMemStats", realHandle(c), stat, value);
    if (r != ncclSuccess) return r;
  }
  if (c->loom != nullptr) count(entry, Route::kLoom);
  if (stat == ncclStatGpuMemSuspended) *value = c->suspended.load() ? 1 : 0;
  return ncclSuccess;
}

ncclResult_t ncclWinGetUserPtr(ncclComm_t comm, ncclWindow_t win, void** outUserPtr) {
  const Entry entry = Entry::kWinGetUserPtr;
  ncclResult_t error = ncclSuccess;
  if (checkComm(entry, comm, &error) == nullptr) return error;
  Registration* r = windowOf(win);
  if (r == nullptr) return fail(entry, ncclInvalidArgument, "win is not a window of this library");
  if (outUserPtr == nullptr) return fail(entry, ncclInvalidArgument, "outUserPtr is NULL");
  count(entry, r->real != nullptr ? Route::kNccl : Route::kLoom);
  *outUserPtr = r->buffer;
  return ncclSuccess;
}

// One-sided: Loom has no put or signal; communicators of the real NCCL as a whole run them.
ncclResult_t ncclPutSignal(const void* localbuff, size_t count, ncclDataType_t datatype, int peer,
                           ncclWindow_t peerWin, size_t peerWinOffset, int sigIdx, int ctx,
                           unsigned int flags, ncclComm_t comm, cudaStream_t stream) {
  const Entry entry = Entry::kPutSignal;
  ncclResult_t error = ncclSuccess;
  ncclComm* c = checkReady(entry, comm, &error);
  if (c == nullptr) return error;
  const RealNccl* lib = wholeReal(entry, c, "ncclPutSignal (one-sided)", &error);
  if (lib == nullptr) return error;
  Registration* r = windowOf(peerWin);
  if (r == nullptr || r->real == nullptr)
    return fail(entry, ncclInvalidArgument, "peerWin is not a window of this communicator");
  return callReal(entry, *lib, lib->PutSignal, "ncclPutSignal", localbuff, count, datatype, peer,
                  static_cast<ncclWindow_t>(r->real), peerWinOffset, sigIdx, ctx, flags,
                  realHandle(c), stream);
}

ncclResult_t ncclSignal(int peer, int sigIdx, int ctx, unsigned int flags, ncclComm_t comm,
                        cudaStream_t stream) {
  const Entry entry = Entry::kSignal;
  ncclResult_t error = ncclSuccess;
  ncclComm* c = checkReady(entry, comm, &error);
  if (c == nullptr) return error;
  const RealNccl* lib = wholeReal(entry, c, "ncclSignal (one-sided)", &error);
  if (lib == nullptr) return error;
  return callReal(entry, *lib, lib->Signal, "ncclSignal", peer, sigIdx, ctx, flags, realHandle(c),
                  stream);
}

ncclResult_t ncclWaitSignal(int nDesc, ncclWaitSignalDesc_t* signalDescs, ncclComm_t comm,
                            cudaStream_t stream) {
  const Entry entry = Entry::kWaitSignal;
  ncclResult_t error = ncclSuccess;
  ncclComm* c = checkReady(entry, comm, &error);
  if (c == nullptr) return error;
  const RealNccl* lib = wholeReal(entry, c, "ncclWaitSignal (one-sided)", &error);
  if (lib == nullptr) return error;
  return callReal(entry, *lib, lib->WaitSignal, "ncclWaitSignal", nDesc, signalDescs, realHandle(c),
                  stream);
}

// Encryption of NCCL's TCP sockets. Loom authenticates its bootstrap (HMAC) but sends data in the
// clear, so a request for encryption is refused rather than ignored, unless every communicator
// is the real NCCL's (LOOM_NCCL_FORCE_FALLBACK=all). Plaintext (the default) is what Loom does.
ncclResult_t ncclSetEncryption(const ncclEncryptionConfig_t* config) {
  const Entry entry = Entry::kSetEncryption;
  if (config == nullptr) return fail(entry, ncclInvalidArgument, "config is NULL");
  if (config->magic != NCCL_API_MAGIC ||
      config->size < offsetof(ncclEncryptionConfig_t, mode) + sizeof(config->mode))
    return fail(entry, ncclInvalidArgument,
                "config was not initialized with NCCL_ENCRYPTION_CONFIG_INITIALIZER");
  std::string why;
  if (wholeFallback(&why)) {
    std::string missing;
    const RealNccl* lib = realNccl(&missing);
    if (lib == nullptr) return fail(entry, ncclInvalidUsage, "no real NCCL: " + missing);
    return callReal(entry, *lib, lib->SetEncryption, "ncclSetEncryption", config);
  }
  if (config->mode != NCCL_ENCRYPTION_MODE_NONE)
    return fail(entry, ncclInvalidUsage,
                "Loom does not encrypt its TCP traffic (its bootstrap authenticates peers, data "
                "goes in the clear); LOOM_NCCL_FORCE_FALLBACK=all runs every communicator on the "
                "real NCCL, which can");
  count(entry, Route::kLoom);
  return ncclSuccess;
}

// The communicator's properties: Loom's own for a Loom communicator (no device API, no
// multicast, no GIN); the real NCCL's for one of its own. Filled as far as the caller's struct
// goes (its size: callers built against older headers).
ncclResult_t ncclCommQueryProperties(ncclComm_t comm, ncclCommProperties_t* props) {
  const Entry entry = Entry::kCommQueryProperties;
  ncclResult_t error = ncclSuccess;
  ncclComm* c = checkReady(entry, comm, &error);
  if (c == nullptr) return error;
  if (props == nullptr) return fail(entry, ncclInvalidArgument, "props is NULL");
  if (props->magic != NCCL_API_MAGIC || props->size < offsetof(ncclCommProperties_t, rank))
    return fail(entry, ncclInvalidArgument,
                "props was not initialized with NCCL_COMM_PROPERTIES_INITIALIZER");
  const RealNccl* lib = realNccl(nullptr);
  if (c->loom == nullptr && lib != nullptr)
    return callReal(entry, *lib, lib->CommQueryProperties, "ncclCommQueryProperties", realHandle(c),
                    props);
  count(entry, Route::kLoom);
  ncclCommProperties_t mine{};
  mine.rank = c->rank;
  mine.nRanks = c->nranks;
  mine.cudaDev = c->cudaDevice;
  mine.nvmlDev = -1;  // not known to Loom
  mine.deviceApiSupport = false;
  mine.multimemSupport = false;
  mine.ginType = NCCL_GIN_TYPE_NONE;
  mine.railedGinType = NCCL_GIN_TYPE_NONE;
  mine.ginConnectionType = NCCL_GIN_CONNECTION_NONE;
  const size_t header = offsetof(ncclCommProperties_t, rank);
  const size_t upTo = std::min(props->size, sizeof(ncclCommProperties_t));
  std::memcpy(reinterpret_cast<char*>(props) + header,
              reinterpret_cast<const char*>(&mine) + header, upTo - header);
  return ncclSuccess;
}

// Pointers into a window's memory as NCCL's device API addresses it: the real NCCL's windows
// answer; on a Loom window only the rank's own part is known (its user pointer).
ncclResult_t ncclGetPeerDevicePointer(ncclWindow_t window, size_t offset, int peer, void** outPtr) {
  const Entry entry = Entry::kGetDevicePointer;
  if (outPtr == nullptr) return fail(entry, ncclInvalidArgument, "outPtr is NULL");
  Registration* r = windowOf(window);
  if (r != nullptr && r->real == nullptr && peer == r->rank) {
    if (offset > r->bytes) return fail(entry, ncclInvalidArgument, "offset is past the window");
    count(entry, Route::kLoom);
    *outPtr = static_cast<char*>(r->buffer) + offset;
    return ncclSuccess;
  }
  ncclWindow_t real = nullptr;
  const RealNccl* lib = nullptr;
  if (ncclResult_t e = onRealWindow(entry, window, "a peer's pointer", &real, &lib);
      e != ncclSuccess)
    return e;
  return callReal(entry, *lib, lib->GetPeerDevicePointer, "ncclGetPeerDevicePointer", real, offset,
                  peer, outPtr);
}

ncclResult_t ncclGetLsaDevicePointer(ncclWindow_t window, size_t offset, int lsaRank,
                                     void** outPtr) {
  const Entry entry = Entry::kGetDevicePointer;
  ncclWindow_t real = nullptr;
  const RealNccl* lib = nullptr;
  if (ncclResult_t e = onRealWindow(entry, window, "an LSA peer's pointer", &real, &lib);
      e != ncclSuccess)
    return e;
  return callReal(entry, *lib, lib->GetLsaDevicePointer, "ncclGetLsaDevicePointer", real, offset,
                  lsaRank, outPtr);
}

ncclResult_t ncclGetLsaMultimemDevicePointer(ncclWindow_t window, size_t offset, void** outPtr) {
  const Entry entry = Entry::kGetDevicePointer;
  ncclWindow_t real = nullptr;
  const RealNccl* lib = nullptr;
  if (ncclResult_t e = onRealWindow(entry, window, "a multicast (NVLS) pointer", &real, &lib);
      e != ncclSuccess)
    return e;
  return callReal(entry, *lib, lib->GetLsaMultimemDevicePointer, "ncclGetLsaMultimemDevicePointer",
                  real, offset, outPtr);
}

ncclResult_t ncclGetMultimemDevicePointer(ncclWindow_t window, size_t offset,
                                          ncclMultimemHandle_t multimem, void** outPtr) {
  const Entry entry = Entry::kGetDevicePointer;
  ncclWindow_t real = nullptr;
  const RealNccl* lib = nullptr;
  if (ncclResult_t e = onRealWindow(entry, window, "a multicast (NVLS) pointer", &real, &lib);
      e != ncclSuccess)
    return e;
  return callReal(entry, *lib, lib->GetMultimemDevicePointer, "ncclGetMultimemDevicePointer", real,
                  offset, multimem, outPtr);
}

ncclResult_t ncclGetMultimemDeviceLeInfo(ncclWindow_t window, size_t offset, ncclCftLeId* leId,
                                         size_t* leOffset) {
  const Entry entry = Entry::kGetDeviceLeInfo;
  ncclWindow_t real = nullptr;
  const RealNccl* lib = nullptr;
  if (ncclResult_t e = onRealWindow(entry, window, "a CFT handle", &real, &lib); e != ncclSuccess)
    return e;
  return callReal(entry, *lib, lib->GetMultimemDeviceLeInfo, "ncclGetMultimemDeviceLeInfo", real,
                  offset, leId, leOffset);
}

ncclResult_t ncclGetCftDeviceLeInfo(ncclWindow_t window, size_t offset, int peerCft,
                                    ncclTeam_t cftTeam, ncclCftLeId* leId, size_t* leOffset) {
  const Entry entry = Entry::kGetDeviceLeInfo;
  ncclWindow_t real = nullptr;
  const RealNccl* lib = nullptr;
  if (ncclResult_t e = onRealWindow(entry, window, "a CFT handle", &real, &lib); e != ncclSuccess)
    return e;
  return callReal(entry, *lib, lib->GetCftDeviceLeInfo, "ncclGetCftDeviceLeInfo", real, offset,
                  peerCft, cftTeam, leId, leOffset);
}

ncclResult_t ncclGetPeerDeviceLeInfo(ncclWindow_t window, size_t offset, int peerWorld,
                                     ncclCftLeId* leId, size_t* leOffset) {
  const Entry entry = Entry::kGetDeviceLeInfo;
  ncclWindow_t real = nullptr;
  const RealNccl* lib = nullptr;
  if (ncclResult_t e = onRealWindow(entry, window, "a CFT handle", &real, &lib); e != ncclSuccess)
    return e;
  return callReal(entry, *lib, lib->GetPeerDeviceLeInfo, "ncclGetPeerDeviceLeInfo", real, offset,
                  peerWorld, leId, leOffset);
}

}  // extern "C"

// NCCL's parameter API reads NCCL's own parameters (NCCL_* variables and their defaults): those
// of the real NCCL where one is loaded (its communicators are the ones they tune); without one
// there are none to read. Loom's own settings are LOOM_* variables (docs/configuration.md).
namespace {

const RealNccl* paramLibrary(const char* function, ncclResult_t* error) {
  std::string missing;
  const RealNccl* lib = realNccl(&missing);
  if (lib == nullptr)
    *error = fail(Entry::kParam, ncclInvalidUsage,
                  std::string(function) +
                      ": NCCL's parameters belong to the real NCCL, and none is loaded (" +
                      missing + "); Loom's settings are LOOM_* environment variables");
  return lib;
}

template <typename T, typename Fn>
ncclResult_t paramGet(const char* function, Fn RealNccl::*member, ncclParamHandle_t h, T* out) {
  ncclResult_t error = ncclSuccess;
  const RealNccl* lib = paramLibrary(function, &error);
  if (lib == nullptr) return error;
  return callReal(Entry::kParam, *lib, lib->*member, function, h, out);
}

}  // namespace

extern "C" {

ncclResult_t ncclParamBind(ncclParamHandle_t* out, const char* key) {
  ncclResult_t error = ncclSuccess;
  const RealNccl* lib = paramLibrary("ncclParamBind", &error);
  if (lib == nullptr) return error;
  return callReal(Entry::kParam, *lib, lib->ParamBind, "ncclParamBind", out, key);
}

ncclResult_t ncclParamGetI8(ncclParamHandle_t h, int8_t* out) {
  return paramGet("ncclParamGetI8", &RealNccl::ParamGetI8, h, out);
}
ncclResult_t ncclParamGetI16(ncclParamHandle_t h, int16_t* out) {
  return paramGet("ncclParamGetI16", &RealNccl::ParamGetI16, h, out);
}
ncclResult_t ncclParamGetI32(ncclParamHandle_t h, int32_t* out) {
  return paramGet("ncclParamGetI32", &RealNccl::ParamGetI32, h, out);
}
ncclResult_t ncclParamGetI64(ncclParamHandle_t h, int64_t* out) {
  return paramGet("ncclParamGetI64", &RealNccl::ParamGetI64, h, out);
}
ncclResult_t ncclParamGetU8(ncclParamHandle_t h, uint8_t* out) {
  return paramGet("ncclParamGetU8", &RealNccl::ParamGetU8, h, out);
}
ncclResult_t ncclParamGetU16(ncclParamHandle_t h, uint16_t* out) {
  return paramGet("ncclParamGetU16", &RealNccl::ParamGetU16, h, out);
}
ncclResult_t ncclParamGetU32(ncclParamHandle_t h, uint32_t* out) {
  return paramGet("ncclParamGetU32", &RealNccl::ParamGetU32, h, out);
}
ncclResult_t ncclParamGetU64(ncclParamHandle_t h, uint64_t* out) {
  return paramGet("ncclParamGetU64", &RealNccl::ParamGetU64, h, out);
}
ncclResult_t ncclParamGetStr(ncclParamHandle_t h, const char** out) {
  return paramGet("ncclParamGetStr", &RealNccl::ParamGetStr, h, out);
}

ncclResult_t ncclParamGet(ncclParamHandle_t h, void* out, int maxLen, int* len) {
  ncclResult_t error = ncclSuccess;
  const RealNccl* lib = paramLibrary("ncclParamGet", &error);
  if (lib == nullptr) return error;
  return callReal(Entry::kParam, *lib, lib->ParamGet, "ncclParamGet", h, out, maxLen, len);
}

ncclResult_t ncclParamGetParameter(const char* key, const char** value, int* valueLen) {
  ncclResult_t error = ncclSuccess;
  const RealNccl* lib = paramLibrary("ncclParamGetParameter", &error);
  if (lib == nullptr) return error;
  return callReal(Entry::kParam, *lib, lib->ParamGetParameter, "ncclParamGetParameter", key, value,
                  valueLen);
}

ncclResult_t ncclParamGetAllParameterKeys(const char*** table, int* tableLen) {
  if (table == nullptr || tableLen == nullptr)
    return fail(Entry::kParam, ncclInvalidArgument, "table and tableLen must not be NULL");
  const RealNccl* lib = realNccl(nullptr);
  if (lib == nullptr || lib->ParamGetAllParameterKeys == nullptr) {
    // No real NCCL: no NCCL parameters (an empty table, as a listing of none).
    count(Entry::kParam, Route::kLoom);
    *table = nullptr;
    *tableLen = 0;
    return ncclSuccess;
  }
  return callReal(Entry::kParam, *lib, lib->ParamGetAllParameterKeys,
                  "ncclParamGetAllParameterKeys", table, tableLen);
}

void ncclParamDumpAll(void) {
  const RealNccl* lib = realNccl(nullptr);
  count(Entry::kParam, lib != nullptr ? Route::kNccl : Route::kLoom);
  if (lib != nullptr && lib->ParamDumpAll != nullptr) lib->ParamDumpAll();
}

}  // extern "C"

LOOM_NCCL_PALIAS(ncclCommGetUniqueId)
LOOM_NCCL_PALIAS(ncclCommGrow)
LOOM_NCCL_PALIAS(ncclCommSuspend)
LOOM_NCCL_PALIAS(ncclCommResume)
LOOM_NCCL_PALIAS(ncclCommMemStats)
LOOM_NCCL_PALIAS(ncclWinGetUserPtr)
LOOM_NCCL_PALIAS(ncclPutSignal)
LOOM_NCCL_PALIAS(ncclSignal)
LOOM_NCCL_PALIAS(ncclWaitSignal)
LOOM_NCCL_PALIAS(ncclSetEncryption)
LOOM_NCCL_PALIAS(ncclCommQueryProperties)
LOOM_NCCL_PALIAS(ncclGetPeerDevicePointer)
LOOM_NCCL_PALIAS(ncclGetLsaDevicePointer)
LOOM_NCCL_PALIAS(ncclGetLsaMultimemDevicePointer)
LOOM_NCCL_PALIAS(ncclGetMultimemDevicePointer)
LOOM_NCCL_PALIAS(ncclGetMultimemDeviceLeInfo)
LOOM_NCCL_PALIAS(ncclGetCftDeviceLeInfo)
LOOM_NCCL_PALIAS(ncclGetPeerDeviceLeInfo)
LOOM_NCCL_PALIAS(ncclParamBind)
LOOM_NCCL_PALIAS(ncclParamGetI8)
LOOM_NCCL_PALIAS(ncclParamGetI16)
LOOM_NCCL_PALIAS(ncclParamGetI32)
LOOM_NCCL_PALIAS(ncclParamGetI64)
LOOM_NCCL_PALIAS(ncclParamGetU8)
LOOM_NCCL_PALIAS(ncclParamGetU16)
LOOM_NCCL_PALIAS(ncclParamGetU32)
LOOM_NCCL_PALIAS(ncclParamGetU64)
LOOM_NCCL_PALIAS(ncclParamGetStr)
LOOM_NCCL_PALIAS(ncclParamGet)
LOOM_NCCL_PALIAS(ncclParamGetParameter)
LOOM_NCCL_PALIAS(ncclParamGetAllParameterKeys)
LOOM_NCCL_PALIAS(ncclParamDumpAll)

#endif  // NCCL 2.32's nccl.h
