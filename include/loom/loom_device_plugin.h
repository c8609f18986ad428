/* Loom device plug-in ABI, version 1: how an out-of-tree accelerator joins Loom without any edit
 * of Loom itself.
 *
 * A plug-in is a shared library that exports one object, `loomDevicePluginEntry`, a
 * loomDevicePlugin_v1 table of function pointers. Loom loads it with dlopen from
 * LOOM_DEVICE_PLUGIN=/path/lib.so[,/other.so] (at the first communicator) or from
 * loomDevicePluginLoad(path), checks `version` and the required entries, calls init(), and from
 * then on a communicator created with config.device = "<kind>" or "<kind>:N" (or
 * LOOM_DEVICE=<kind>) runs on that plug-in's devices. docs/plugins.md is the full contract: what
 * each entry must do, its thread safety and its errors. plugins/device/emu/ is a complete example.
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

#define LOOM_DEVICE_PLUGIN_VERSION 1
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

typedef struct {
  /* Identification (checked before anything is called). */
  uint32_t version;   /* LOOM_DEVICE_PLUGIN_VERSION */
  uint32_t size;      /* sizeof(loomDevicePlugin_v1) as the plug-in was compiled */
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
  loomResult_t (*hostAlloc)(int dev, size_t bytes, void** ptr); /* pinned; none: malloc */
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

  /* Optional, added after the first release of version 1: Loom reads it only from tables whose
   * `size` covers it, so plug-ins built against the older header load as before.
   * Enqueues fn(arg) on `stream`: it runs after the work enqueued there before it, and work
   * enqueued after it waits until fn returned (CUDA's cudaLaunchHostFunc). fn may block for a
   * while (Loom's gates wait for the host part of a collective) and calls no entry of the
   * plug-in. None: a device rank's call on a communicator without native collectives blocks the
   * calling thread until its host part is done, instead of returning at once. */
  loomResult_t (*launchHostFunc)(int dev, loomStream_t stream, void (*fn)(void* arg), void* arg);
} loomDevicePlugin_v1;

/* The size of a version 1 table without the entries added later (the smallest Loom loads). */
#define LOOM_DEVICE_PLUGIN_V1_BASE_SIZE (offsetof(loomDevicePlugin_v1, launchHostFunc))

#if defined(__GNUC__)
#pragma GCC visibility push(default)
#endif
/* Loads a device plug-in into this process (the same as naming it in LOOM_DEVICE_PLUGIN). Loading
 * the same file twice is a no-op; a second plug-in of an already known kind is an error. */
loomResult_t loomDevicePluginLoad(const char* path);
#if defined(__GNUC__)
#pragma GCC visibility pop
#endif

#ifdef __cplusplus
}
#endif

#endif /* LOOM_LOOM_DEVICE_PLUGIN_H_ */
