/* Loom device plug-in ABI, version 2: how an out-of-tree accelerator joins Loom without any edit
 * of Loom itself.
 *
 * A plug-in is a shared library that exports one object, `loomDevicePluginEntry`, a
 * loomDevicePlugin_v2 table of function pointers (Loom still loads version 1 tables, see below).
 * Loom loads it with dlopen from LOOM_DEVICE_PLUGIN=/path/lib.so[,/other.so] (at the first
 * communicator) or from loomDevicePluginLoad(path), checks `version` and the required entries,
 * calls init(), and from then on a communicator created with config.device = "<kind>" or "<kind>:N"
 * (or LOOM_DEVICE=<kind>) runs on that plug-in's devices. docs/plugins.md is the full contract:
 * what each entry must do, its thread safety and its errors. plugins/device/emu/ is a complete
 * example.
 *
 * Conventions: every entry returns loomSuccess or an error code (loomSystemError for a device
 * failure, loomInvalidArgument for a bad pointer or argument); getLastError, when present, gives
 * the message. Entries may be called from several threads at once (one per communicator and
 * Loom's own progress threads); `dev` is the device ordinal. A stream is the caller's handle of
 * the plug-in's kind (loomStream_t); NULL is the plug-in's default stream. */
#ifndef LOOM_LOOM_DEVICE_PLUGIN_H_
#define LOOM_LOOM_DEVICE_PLUGIN_H_

#include <stddef.h>

#include "loom/loom.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The version this header describes. Version 2 appended the torch entries (torchDeviceType, ...)
 * to version 1's table; a version 1 table (loomDevicePlugin_v1, a prefix of version 2's) loads as
 * before, its torch entries absent. */
#define LOOM_DEVICE_PLUGIN_VERSION 2
/* The name of the object a plug-in exports. */
#define LOOM_DEVICE_PLUGIN_SYMBOL "loomDevicePluginEntry"

/* flags */
/* The plug-in's copies and reductions accept host pointers (host memory the device can map)
 * wherever they accept device pointers: Loom then runs its shared-memory algorithms with the
 * device's own copies and reductions instead of staging whole buffers through the host. */
#define LOOM_DEVICE_PLUGIN_MAPS_HOST_MEMORY 0x1u

typedef enum {
  loomMemcpyHostToDevice = 0,
  loomMemcpyDeviceToHost = 1,
  loomMemcpyDeviceToDevice = 2
} loomMemcpyKind_t;

typedef struct loomDevEvent* loomDevEvent_t; /* the plug-in's own event type */

typedef struct {
  char model[128]; /* NUL-terminated model name, for logs */
  char busId[64];  /* NUL-terminated PCI bus id or another id unique on the host; "" if none */
} loomDevicePluginDeviceInfo_v1;

/* Version 1's table, for plug-ins built against the older header (version = 1, size =
 * sizeof(loomDevicePlugin_v1), or LOOM_DEVICE_PLUGIN_V1_BASE_SIZE from before launchHostFunc):
 * version 2's entries up to launchHostFunc, each meaning what it means there. */
typedef struct {
  uint32_t version;
  uint32_t size;
  const char* kind;
  const char* vendor;
  uint32_t flags;

  loomResult_t (*init)(void);
  loomResult_t (*getDeviceCount)(int* count);
  loomResult_t (*getDeviceInfo)(int dev, loomDevicePluginDeviceInfo_v1* info);
  loomResult_t (*memAlloc)(int dev, size_t bytes, void** ptr);
  loomResult_t (*memFree)(int dev, void* ptr);
  loomResult_t (*memIsDevice)(int dev, const void* ptr, size_t bytes, int* isDevice);
  loomResult_t (*streamCreate)(int dev, loomStream_t* stream);
  loomResult_t (*streamDestroy)(int dev, loomStream_t stream);
  loomResult_t (*streamSynchronize)(int dev, loomStream_t stream);
  loomResult_t (*memcpyAsync)(int dev, void* dst, const void* src, size_t bytes,
                              loomMemcpyKind_t kind, loomStream_t stream);
  loomResult_t (*eventCreate)(int dev, loomDevEvent_t* event);
  loomResult_t (*eventDestroy)(int dev, loomDevEvent_t event);
  loomResult_t (*eventRecord)(int dev, loomDevEvent_t event, loomStream_t stream);
  loomResult_t (*streamWaitEvent)(int dev, loomStream_t stream, loomDevEvent_t event);
  loomResult_t (*eventQuery)(int dev, loomDevEvent_t event, int* done);

  void (*finalize)(void);
  const char* (*getLastError)(void);
  loomResult_t (*hostAlloc)(int dev, size_t bytes, void** ptr);
  loomResult_t (*hostFree)(int dev, void* ptr);
  loomResult_t (*reduceAsync)(int dev, void* dst, const void* const* srcs, int nsrc, size_t count,
                              loomDataType_t dtype, loomRedOp_t op, int accumType, int divisor,
                              loomStream_t stream);
  loomResult_t (*memExport)(int dev, void* ptr, size_t bytes, void* handle, size_t* handleBytes);
  loomResult_t (*memImport)(int dev, const void* handle, size_t handleBytes, void** ptr);
  loomResult_t (*memCloseImport)(int dev, void* ptr);

  loomResult_t (*launchHostFunc)(int dev, loomStream_t stream, void (*fn)(void* arg), void* arg);
} loomDevicePlugin_v1;

typedef struct {
  /* Identification (checked before anything is called). */
  uint32_t version;   /* LOOM_DEVICE_PLUGIN_VERSION */
  uint32_t size;      /* sizeof(loomDevicePlugin_v2) as the plug-in was compiled */
  const char* kind;   /* the device kind users name: "loom-emu"; [a-z0-9_-]+, not "cpu"/"cuda" */
  const char* vendor; /* vendor string, for logs and clusters */
  uint32_t flags;     /* LOOM_DEVICE_PLUGIN_* */

  /* Required. */
  loomResult_t (*init)(void); /* once per process, before any other entry but getLastError */
  loomResult_t (*getDeviceCount)(int* count);
  loomResult_t (*getDeviceInfo)(int dev, loomDevicePluginDeviceInfo_v1* info);
  loomResult_t (*memAlloc)(int dev, size_t bytes, void** ptr); /* device memory */
  loomResult_t (*memFree)(int dev, void* ptr);
  /* *isDevice = 1 when [ptr, ptr + bytes) lies in one allocation of device `dev`. */
  loomResult_t (*memIsDevice)(int dev, const void* ptr, size_t bytes, int* isDevice);
  loomResult_t (*streamCreate)(int dev, loomStream_t* stream);
  loomResult_t (*streamDestroy)(int dev, loomStream_t stream);
  loomResult_t (*streamSynchronize)(int dev, loomStream_t stream); /* host waits for the stream */
  /* Enqueues a copy; it runs after the work enqueued on `stream` before it. */
  loomResult_t (*memcpyAsync)(int dev, void* dst, const void* src, size_t bytes,
                              loomMemcpyKind_t kind, loomStream_t stream);
  loomResult_t (*eventCreate)(int dev, loomDevEvent_t* event);
  loomResult_t (*eventDestroy)(int dev, loomDevEvent_t event);
  loomResult_t (*eventRecord)(int dev, loomDevEvent_t event, loomStream_t stream);
  loomResult_t (*streamWaitEvent)(int dev, loomStream_t stream, loomDevEvent_t event);
  loomResult_t (*eventQuery)(int dev, loomDevEvent_t event, int* done); /* never blocks */

  /* Optional: NULL, and Loom falls back as said. */
  void (*finalize)(void);            /* at process exit; none: nothing is called */
  const char* (*getLastError)(void); /* this thread's last message; none: codes only */
  loomResult_t (*hostAlloc)(int dev, size_t bytes, void** ptr); /* pinned; none: aligned_alloc */
  loomResult_t (*hostFree)(int dev, void* ptr);
  /* dst = srcs[0] op srcs[1] op ... in index order, `count` elements of dtype; accumType >= 0
   * (narrow floats only): accumulate in that type; divisor > 1: divide the result by it (loomAvg
   * arrives as loomSum with divisor = ranks). None: Loom reduces on the host. */
  loomResult_t (*reduceAsync)(int dev, void* dst, const void* const* srcs, int nsrc, size_t count,
                              loomDataType_t dtype, loomRedOp_t op, int accumType, int divisor,
                              loomStream_t stream);
  /* Peers of this kind on the same host: memExport writes an opaque handle of at most
   * *handleBytes bytes (in: the room, 256; out: the length); memImport maps a peer's handle.
   * None: peers exchange data through host memory. */
  loomResult_t (*memExport)(int dev, void* ptr, size_t bytes, void* handle, size_t* handleBytes);
  loomResult_t (*memImport)(int dev, const void* handle, size_t handleBytes, void** ptr);
  loomResult_t (*memCloseImport)(int dev, void* ptr);

  /* Optional (appended to version 1 after its first release: a version 1 table whose `size`
   * ends before it loads without it).
   * Enqueues fn(arg) on `stream`: it runs after the work enqueued there before it, and work
   * enqueued after it waits until fn returned (CUDA's cudaLaunchHostFunc). fn may block for a
   * while (Loom's gates wait for the host part of a collective) and calls no entry of the
   * plug-in. None: a device rank's call on a communicator without native collectives blocks the
   * calling thread until its host part is done, instead of returning at once. */
  loomResult_t (*launchHostFunc)(int dev, loomStream_t stream, void (*fn)(void* arg), void* arg);

  /* Version 2: torch (optional: NULL, and torch's "loom" backend does not serve this device).
   * The torch device type whose tensors live on this plug-in's devices, as torch.device(...).type
   * names it: "xpu", "privateuseone", or the name a PrivateUse1 extension renamed it to ("npu",
   * "loomemu"). Torch's device index is the plug-in's `dev`. A tensor's data_ptr() must be the
   * device address the entries above take. docs/plugins.md, "Torch". */
  const char* torchDeviceType;
  /* Optional (needs torchDeviceType): the plug-in stream behind torch's stream `streamId`
   * (c10::Stream::id(), Python's torch.Stream.stream_id) of device `dev`. None: the id is the
   * loomStream_t itself, 0 the default stream (NULL). */
  loomResult_t (*torchStream)(int dev, int64_t streamId, loomStream_t* stream);
} loomDevicePlugin_v2;

/* The size of a version 1 table without the entries added later (the smallest Loom loads). */
#define LOOM_DEVICE_PLUGIN_V1_BASE_SIZE (offsetof(loomDevicePlugin_v1, launchHostFunc))
/* The smallest version 2 table: through the torch entries. */
#define LOOM_DEVICE_PLUGIN_V2_BASE_SIZE sizeof(loomDevicePlugin_v2)

#if defined(__GNUC__)
#pragma GCC visibility push(default)
#endif
/* Loads a device plug-in into this process (the same as naming it in LOOM_DEVICE_PLUGIN). Loading
 * the same file twice is a no-op; a second plug-in of an already known kind is an error. */
loomResult_t loomDevicePluginLoad(const char* path);

/* What a loaded plug-in is, for frameworks that map their devices to Loom's (torch's "loom"
 * backend). The strings stay valid until the process exits (plug-ins are never unloaded). */
typedef struct {
  const char* kind; /* config.device names it: "loom-emu" */
  const char* vendor;
  const char* path;            /* the file as it was loaded */
  const char* torchDeviceType; /* the torch device type it serves; NULL: none (or a v1 table) */
  int deviceCount;
} loomDevicePluginInfo_t;
/* The plug-ins loaded in this process (those of LOOM_DEVICE_PLUGIN are loaded first, and a failure
 * to load one is this call's error), in load order. */
loomResult_t loomDevicePluginCount(int* count);
loomResult_t loomDevicePluginGetInfo(int index, loomDevicePluginInfo_t* info);
/* The plug-in stream of torch's stream `streamId` on device `dev` of the plug-in of kind `kind`
 * (its torchStream entry; without one the id itself). loomInvalidArgument: no such plug-in, or
 * it serves no torch device type. */
loomResult_t loomDevicePluginTorchStream(const char* kind, int dev, int64_t streamId,
                                         loomStream_t* stream);
#if defined(__GNUC__)
#pragma GCC visibility pop
#endif

#ifdef __cplusplus
}
#endif

#endif /* LOOM_LOOM_DEVICE_PLUGIN_H_ */
