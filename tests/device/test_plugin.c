/* Device plug-ins that are wrong on purpose, for tests/device/plugin_load_test.cpp: one source,
 * one shared library per TEST_PLUGIN_* definition (tests/CMakeLists.txt). Without any, a valid
 * plug-in of kind "test-dev" with no device. */
#include <stddef.h>
#include <stdint.h>

#include "loom/loom_device_plugin.h"

static loomResult_t ok(void) { return loomSuccess; }
static const char* lastError(void) { return "the test plug-in's own message"; }
#ifdef TEST_PLUGIN_FAILING_INIT
static loomResult_t init(void) { return loomSystemError; }
#else
#define init ok
#endif
static loomResult_t count(int* n) {
  *n = 0;
  return loomSuccess;
}
static loomResult_t info(int d, loomDevicePluginDeviceInfo_v1* i) {
  (void)d, (void)i;
  return loomInvalidArgument;
}
static loomResult_t alloc(int d, size_t b, void** p) {
  (void)d, (void)b, (void)p;
  return loomSystemError;
}
static loomResult_t ptrOp(int d, void* p) {
  (void)d, (void)p;
  return loomSuccess;
}
static loomResult_t isDev(int d, const void* p, size_t b, int* r) {
  (void)d, (void)p, (void)b;
  *r = 0;
  return loomSuccess;
}
static loomResult_t streamCreate(int d, loomStream_t* s) {
  (void)d;
  *s = NULL;
  return loomSuccess;
}
static loomResult_t streamOp(int d, loomStream_t s) {
  (void)d, (void)s;
  return loomSuccess;
}
static loomResult_t copy(int d, void* a, const void* b, size_t n, loomMemcpyKind_t k,
                         loomStream_t s) {
  (void)d, (void)a, (void)b, (void)n, (void)k, (void)s;
  return loomSystemError;
}
static loomResult_t eventCreate(int d, loomDevEvent_t* e) {
  (void)d;
  *e = NULL;
  return loomSuccess;
}
static loomResult_t eventOp(int d, loomDevEvent_t e) {
  (void)d, (void)e;
  return loomSuccess;
}
static loomResult_t eventRecord(int d, loomDevEvent_t e, loomStream_t s) {
  (void)d, (void)e, (void)s;
  return loomSuccess;
}
static loomResult_t streamWait(int d, loomStream_t s, loomDevEvent_t e) {
  (void)d, (void)e, (void)s;
  return loomSuccess;
}
static loomResult_t eventQuery(int d, loomDevEvent_t e, int* done) {
  (void)d, (void)e;
  *done = 1;
  return loomSuccess;
}

/* Torch stream ids map to handles id + 1 (so that the test tells the entry from the default). */
static loomResult_t torchStream(int d, int64_t id, loomStream_t* s) {
  if (d != 0) return loomInvalidArgument;
  *s = (loomStream_t)(intptr_t)(id + 1);
  return loomSuccess;
}

/* TEST_PLUGIN_V1: a plug-in built against the version 1 header (its table type, version 1);
 * TEST_PLUGIN_SIZE: the size such a plug-in declares (before launchHostFunc was appended). */
#ifndef TEST_PLUGIN_KIND
#ifdef TEST_PLUGIN_SIZE
#define TEST_PLUGIN_KIND "test-old"
#elif defined(TEST_PLUGIN_V1)
#define TEST_PLUGIN_KIND "test-v1"
#else
#define TEST_PLUGIN_KIND "test-dev"
#endif
#endif
#ifdef TEST_PLUGIN_V1
#define TEST_PLUGIN_TABLE loomDevicePlugin_v1
#ifndef TEST_PLUGIN_VERSION
#define TEST_PLUGIN_VERSION 1
#endif
#else
#define TEST_PLUGIN_TABLE loomDevicePlugin_v2
#endif
#ifndef TEST_PLUGIN_SIZE
#define TEST_PLUGIN_SIZE sizeof(TEST_PLUGIN_TABLE)
#endif
#ifndef TEST_PLUGIN_VERSION
#define TEST_PLUGIN_VERSION LOOM_DEVICE_PLUGIN_VERSION
#endif
#ifndef TEST_PLUGIN_TORCH_TYPE
#define TEST_PLUGIN_TORCH_TYPE "test_dev"
#endif

#ifndef TEST_PLUGIN_NO_SYMBOL
__attribute__((visibility("default"))) const TEST_PLUGIN_TABLE loomDevicePluginEntry = {
    TEST_PLUGIN_VERSION,
    TEST_PLUGIN_SIZE,
    TEST_PLUGIN_KIND,
    "test",
    0,
    init,
    count,
    info,
    alloc,
    ptrOp,
    isDev,
    streamCreate,
    streamOp,
    streamOp,
#ifdef TEST_PLUGIN_MISSING_ENTRY
    NULL, /* memcpyAsync */
#else
    copy,
#endif
    eventCreate,
    eventOp,
    eventRecord,
    streamWait,
    eventQuery,
    NULL,
    lastError,
    NULL,
    NULL,
    NULL,
    NULL,
    NULL,
    NULL,
#ifndef TEST_PLUGIN_V1
    NULL, /* launchHostFunc */
    TEST_PLUGIN_TORCH_TYPE,
    torchStream,
#endif
};
#endif
