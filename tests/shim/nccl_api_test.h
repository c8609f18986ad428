/* What the parts of nccl_api_test share: the job, checks, buffers on host or device, and inputs
 * that are small integers, exact in every type (nccl_api_test.c says how the test works). */
#ifndef NCCL_API_TEST_H_
#define NCCL_API_TEST_H_

#define _POSIX_C_SOURCE 200809L /* nanosleep, unlink under -std=c11 */

#include <nccl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#ifdef NCCL_TEST_HOST_ONLY /* built without the CUDA runtime: host buffers only */
static inline cudaError_t noCuda(const void* unused) {
  (void)unused;
  return cudaErrorNoDevice;
}
#define cudaMalloc(p, n) noCuda(p)
#define cudaFree(p) noCuda(p)
#define cudaMemcpy(d, s, n, k) noCuda(d)
#define cudaStreamSynchronize(s) noCuda(s)
#define cudaGetDeviceCount(n) noCuda(n)
#define cudaSetDevice(d) noCuda((const void*)(size_t)(d))
#define cudaStreamCreate(s) noCuda(s)
#define cudaGetDevice(d) noCuda(d)
#endif

extern int g_rank, g_nranks, g_failures, g_host;
extern cudaStream_t g_stream;
extern ncclDataType_t g_type; /* the type input() makes values for */

#define CHECK(cond, ...)                                                                        \
  do {                                                                                          \
    if (!(cond)) {                                                                              \
      fprintf(stderr, "rank %d: %s:%d: check failed: %s: ", g_rank, __FILE__, __LINE__, #cond); \
      fprintf(stderr, __VA_ARGS__);                                                             \
      fprintf(stderr, "\n");                                                                    \
      if (++g_failures > 20) exit(1);                                                           \
    }                                                                                           \
  } while (0)
#define NCCLOK(call)                                                                      \
  do {                                                                                    \
    ncclResult_t r_ = (call);                                                             \
    if (r_ != ncclSuccess) {                                                              \
      fprintf(stderr, "rank %d: %s:%d: %s: %s (%s)\n", g_rank, __FILE__, __LINE__, #call, \
              ncclGetErrorString(r_), ncclGetLastError(NULL));                            \
      exit(1);                                                                            \
    }                                                                                     \
  } while (0)

void* dalloc(size_t bytes);
void dfree(void* p);
void put(void* dst, const void* src, size_t bytes); /* host to buffer */
void get(void* dst, const void* src, size_t bytes); /* buffer to host, after the stream */
size_t typeSize(ncclDataType_t t);
void setv(ncclDataType_t t, void* buf, size_t i, unsigned v);
void fill(ncclDataType_t t, void* host, size_t n, unsigned (*f)(int rank, size_t i), int rank);
unsigned input(int rank, size_t i);
unsigned blockValue(int rank, size_t i);
unsigned reduceExpect(ncclRedOp_t op, size_t i, int nranks);
int same(const void* got, const void* want, size_t bytes);

/* nccl_api_collectives.c */
void testAllReduce(ncclComm_t comm, int n);
void testRooted(ncclComm_t comm, int n);
void testGroups(ncclComm_t comm, int n);
void testPreMulSum(ncclComm_t comm, int n, const char* mode);
void testMemory(ncclComm_t comm, int n);

#endif /* NCCL_API_TEST_H_ */
