/* Every entry point of NCCL's API, written only against nccl.h, run by every rank of a job
 * (loomrun -n N -- nccl_api_test [options]) on libloom-nccl.so.
 *
 * Buffers are host memory under LOOM_NCCL_DEVICE=cpu (CI), CUDA memory otherwise (the GPU host;
 * one GPU may be shared by all ranks through Loom). Every result is compared bit for bit with the
 * value computed here: inputs are small integers, exact in every type (fp8 included) and under
 * every summation order. Unique ids travel through files named after the job (LOOM_JOB_SECRET,
 * which loomrun sets) in $TMPDIR.
 *
 * Options: --fallback-missing=SUBSTRING: the run expects every forced fallback to fail with
 * ncclInvalidUsage and SUBSTRING in ncclGetLastError (no real NCCL), and only checks that;
 * --premul=loom|nccl|error: what pre-multiplied sums (fp32, int32, fp64, fp16) must give:
 * loom (default; host buffers, no real NCCL): all but fp16 run, fp16 fails with
 * ncclInvalidUsage; nccl (a real NCCL to fall back to): all run; error (CUDA buffers whose
 * fallback cannot be made, e.g. ranks sharing a GPU, which NCCL refuses): all fail. */
#include <nccl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#ifdef NCCL_TEST_HOST_ONLY /* built without the CUDA runtime: host buffers only */
#define cudaMalloc(p, n) cudaErrorMemoryAllocation
#define cudaFree(p) cudaSuccess
#define cudaMemcpy(d, s, n, k) cudaSuccess
#define cudaStreamSynchronize(s) cudaSuccess
#define cudaGetDeviceCount(n) cudaErrorNoDevice
#define cudaSetDevice(d) cudaSuccess
#define cudaStreamCreate(s) cudaSuccess
#define cudaGetDevice(d) cudaErrorNoDevice
#endif

static int g_rank, g_nranks, g_failures, g_host;
static cudaStream_t g_stream;

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

/* ---- buffers: host or CUDA ---- */
static void* dalloc(size_t bytes) {
  void* p = NULL;
  if (bytes == 0) bytes = 1;
  if (g_host) {
    p = malloc(bytes);
  } else if (cudaMalloc(&p, bytes) != cudaSuccess) {
    p = NULL;
  }
  if (p == NULL) {
    fprintf(stderr, "rank %d: cannot allocate %zu bytes\n", g_rank, bytes);
    exit(1);
  }
  return p;
}
static void dfree(void* p) {
  if (g_host)
    free(p);
  else
    cudaFree(p);
}
static void put(void* dst, const void* src, size_t bytes) {
  if (g_host)
    memcpy(dst, src, bytes);
  else
    cudaMemcpy(dst, src, bytes, cudaMemcpyHostToDevice);
}
static void get(void* dst, const void* src, size_t bytes) {
  if (!g_host) cudaStreamSynchronize(g_stream);
  if (g_host)
    memcpy(dst, src, bytes);
  else
    cudaMemcpy(dst, src, bytes, cudaMemcpyDeviceToHost);
}

/* ---- small integers in every type ---- */
static size_t typeSize(ncclDataType_t t) {
  switch (t) {
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
/* A non-negative integer v as a minifloat with e exponent and m mantissa bits (exact by choice). */
static uint32_t mini(unsigned v, int e, int m, int bias) {
  if (v == 0) return 0;
  int x = 0;
  while ((v >> (x + 1)) != 0) ++x;
  uint32_t mant = x >= m ? (v - (1u << x)) >> (x - m) : (v - (1u << x)) << (m - x);
  (void)e;
  return ((uint32_t)(x + bias) << m) | mant;
}
static void setv(ncclDataType_t t, void* buf, size_t i, unsigned v) {
  char* p = (char*)buf + i * typeSize(t);
  switch (t) {
    case ncclInt8:
    case ncclUint8:
      *(uint8_t*)p = (uint8_t)v;
      break;
    case ncclInt32:
    case ncclUint32:
      *(uint32_t*)p = v;
      break;
    case ncclInt64:
    case ncclUint64:
      *(uint64_t*)p = v;
      break;
    case ncclFloat32:
      *(float*)p = (float)v;
      break;
    case ncclFloat64:
      *(double*)p = (double)v;
      break;
    case ncclFloat16:
      *(uint16_t*)p = (uint16_t)mini(v, 5, 10, 15);
      break;
    case ncclBfloat16:
      *(uint16_t*)p = (uint16_t)mini(v, 8, 7, 127);
      break;
    case ncclFloat8e4m3:
      *(uint8_t*)p = (uint8_t)mini(v, 4, 3, 7);
      break;
    case ncclFloat8e5m2:
      *(uint8_t*)p = (uint8_t)mini(v, 5, 2, 15);
      break;
    default:
      break;
  }
}
static void fill(ncclDataType_t t, void* host, size_t n, unsigned (*f)(int rank, size_t i),
                 int rank) {
  for (size_t i = 0; i < n; ++i) setv(t, host, i, f(rank, i));
}
/* Inputs: {1, 2} (fp8: {0, 1}, so that sums over 5 ranks stay exact in e5m2). */
static ncclDataType_t g_type;
static unsigned input(int rank, size_t i) {
  unsigned v = (unsigned)((rank + i) % 2);
  return g_type == ncclFloat8e4m3 || g_type == ncclFloat8e5m2 ? v : v + 1;
}
static unsigned blockValue(int rank, size_t i) { return (unsigned)((rank * 3 + i) % 5); }

static const ncclDataType_t kTypes[] = {ncclInt8,    ncclUint8,    ncclInt32,      ncclUint32,
                                        ncclInt64,   ncclUint64,   ncclFloat16,    ncclFloat32,
                                        ncclFloat64, ncclBfloat16, ncclFloat8e4m3, ncclFloat8e5m2};
static const size_t kCounts[] = {1, 7, 1027};

static unsigned reduceExpect(ncclRedOp_t op, size_t i, int nranks) {
  unsigned acc = input(0, i);
  for (int r = 1; r < nranks; ++r) {
    unsigned v = input(r, i);
    switch (op) {
      case ncclSum:
        acc += v;
        break;
      case ncclProd:
        acc *= v;
        break;
      case ncclMax:
        acc = v > acc ? v : acc;
        break;
      case ncclMin:
        acc = v < acc ? v : acc;
        break;
      default:
        break;
    }
  }
  return acc;
}

static int same(const void* got, const void* want, size_t bytes) {
  return memcmp(got, want, bytes) == 0;
}

/* ---- unique ids through files ---- */
static void shareId(ncclUniqueId* id, const char* phase) {
  const char* dir = getenv("TMPDIR");
  const char* job = getenv("LOOM_JOB_SECRET");
  char path[512], tmp[600];
  snprintf(path, sizeof(path), "%s/nccl-shim-test-%s-%d-%s", dir ? dir : "/tmp", job ? job : "x",
           g_nranks, phase);
  if (g_rank == 0) {
    NCCLOK(ncclGetUniqueId(id));
    snprintf(tmp, sizeof(tmp), "%s.tmp", path);
    FILE* f = fopen(tmp, "wb");
    CHECK(f != NULL && fwrite(id, sizeof(*id), 1, f) == 1, "cannot write %s", tmp);
    fclose(f);
    rename(tmp, path);
    return;
  }
  for (int waited = 0; waited < 60000; waited += 2) {
    FILE* f = fopen(path, "rb");
    if (f != NULL) {
      size_t got = fread(id, sizeof(*id), 1, f);
      fclose(f);
      if (got == 1) return;
    }
    struct timespec ts = {0, 2000000};
    nanosleep(&ts, NULL);
  }
  fprintf(stderr, "rank %d: no unique id at %s\n", g_rank, path);
  exit(1);
}
static void removeId(const char* phase) {
  const char* dir = getenv("TMPDIR");
  const char* job = getenv("LOOM_JOB_SECRET");
  char path[512];
  snprintf(path, sizeof(path), "%s/nccl-shim-test-%s-%d-%s", dir ? dir : "/tmp", job ? job : "x",
           g_nranks, phase);
  if (g_rank == 0) unlink(path);
}

/* ---- the collectives ---- */
static void testAllReduce(ncclComm_t comm, int n) {
  for (size_t ti = 0; ti < sizeof(kTypes) / sizeof(kTypes[0]); ++ti) {
    g_type = kTypes[ti];
    size_t es = typeSize(g_type);
    for (size_t ci = 0; ci < sizeof(kCounts) / sizeof(kCounts[0]); ++ci) {
      size_t count = kCounts[ci];
      char* in = malloc(count * es);
      char* want = malloc(count * es);
      char* got = malloc(count * es);
      void* send = dalloc(count * es);
      void* recv = dalloc(count * es);
      fill(g_type, in, count, input, g_rank);
      for (ncclRedOp_t op = ncclSum; op <= ncclMin; ++op) {
        for (int inPlace = 0; inPlace < 2; ++inPlace) {
          put(send, in, count * es);
          for (size_t i = 0; i < count; ++i) setv(g_type, want, i, reduceExpect(op, i, n));
          NCCLOK(ncclAllReduce(send, inPlace ? send : recv, count, g_type, op, comm, g_stream));
          get(got, inPlace ? send : recv, count * es);
          CHECK(same(got, want, count * es), "allreduce type %d op %d count %zu inplace %d", g_type,
                op, count, inPlace);
        }
      }
      /* Average of multiples of n: exact. */
      if (g_type == ncclInt32 || g_type == ncclFloat32 || g_type == ncclFloat64) {
        for (size_t i = 0; i < count; ++i) setv(g_type, in, i, (unsigned)n * input(g_rank, i));
        put(send, in, count * es);
        for (size_t i = 0; i < count; ++i) setv(g_type, want, i, reduceExpect(ncclSum, i, n));
        NCCLOK(ncclAllReduce(send, recv, count, g_type, ncclAvg, comm, g_stream));
        get(got, recv, count * es);
        CHECK(same(got, want, count * es), "allreduce avg type %d count %zu", g_type, count);
      }
      dfree(send);
      dfree(recv);
      free(in);
      free(want);
      free(got);
    }
  }
}

/* Broadcast, Bcast, Reduce, Gather and Scatter from roots 0 and n-1; AllGather, ReduceScatter
 * (in place too) and AlltoAll; float32 and int8 with 1027 elements. */
static void testRooted(ncclComm_t comm, int n) {
  const ncclDataType_t types[] = {ncclFloat32, ncclInt8, ncclBfloat16};
  for (int ti = 0; ti < 3; ++ti) {
    g_type = types[ti];
    size_t es = typeSize(g_type), count = 1027, all = count * (size_t)n;
    char* in = malloc(all * es);
    char* want = malloc(all * es);
    char* got = malloc(all * es);
    void* send = dalloc(all * es);
    void* recv = dalloc(all * es);
    const int roots[2] = {0, n - 1};
    for (int ri = 0; ri < 2; ++ri) {
      int root = roots[ri];
      /* Broadcast and Bcast */
      fill(g_type, in, count, blockValue, g_rank);
      put(send, in, count * es);
      fill(g_type, want, count, blockValue, root);
      NCCLOK(ncclBroadcast(send, recv, count, g_type, root, comm, g_stream));
      get(got, recv, count * es);
      CHECK(same(got, want, count * es), "broadcast root %d type %d", root, g_type);
      NCCLOK(ncclBcast(send, count, g_type, root, comm, g_stream));
      get(got, send, count * es);
      CHECK(same(got, want, count * es), "bcast root %d type %d", root, g_type);
      /* Reduce */
      fill(g_type, in, count, input, g_rank);
      put(send, in, count * es);
      for (size_t i = 0; i < count; ++i) setv(g_type, want, i, reduceExpect(ncclSum, i, n));
      NCCLOK(ncclReduce(send, recv, count, g_type, ncclSum, root, comm, g_stream));
      if (g_rank == root) {
        get(got, recv, count * es);
        CHECK(same(got, want, count * es), "reduce root %d type %d", root, g_type);
      }
      /* Gather: rank r's block at r */
      fill(g_type, in, count, blockValue, g_rank);
      put(send, in, count * es);
      for (int r = 0; r < n; ++r) fill(g_type, want + (size_t)r * count * es, count, blockValue, r);
      NCCLOK(ncclGather(send, recv, count, g_type, root, comm, g_stream));
      if (g_rank == root) {
        get(got, recv, all * es);
        CHECK(same(got, want, all * es), "gather root %d type %d", root, g_type);
      }
      /* Scatter: block r of the root's buffer to rank r */
      for (size_t i = 0; i < all; ++i) setv(g_type, in, i, (unsigned)((root + i) % 7));
      put(send, in, all * es);
      NCCLOK(ncclScatter(send, recv, count, g_type, root, comm, g_stream));
      get(got, recv, count * es);
      CHECK(same(got, in + (size_t)g_rank * count * es, count * es), "scatter root %d", root);
    }
    /* AllGather, out of place and in place (own block at rank * count) */
    fill(g_type, in, count, blockValue, g_rank);
    for (int r = 0; r < n; ++r) fill(g_type, want + (size_t)r * count * es, count, blockValue, r);
    put(send, in, count * es);
    NCCLOK(ncclAllGather(send, recv, count, g_type, comm, g_stream));
    get(got, recv, all * es);
    CHECK(same(got, want, all * es), "allgather type %d", g_type);
    put((char*)recv + (size_t)g_rank * count * es, in, count * es);
    NCCLOK(ncclAllGather((char*)recv + (size_t)g_rank * count * es, recv, count, g_type, comm,
                         g_stream));
    get(got, recv, all * es);
    CHECK(same(got, want, all * es), "allgather in place type %d", g_type);
    /* ReduceScatter: input(r, i) over the whole buffer, rank r keeps block r of the sum */
    fill(g_type, in, all, input, g_rank);
    for (size_t i = 0; i < count; ++i)
      setv(g_type, want, i, reduceExpect(ncclSum, (size_t)g_rank * count + i, n));
    put(send, in, all * es);
    NCCLOK(ncclReduceScatter(send, recv, count, g_type, ncclSum, comm, g_stream));
    get(got, recv, count * es);
    CHECK(same(got, want, count * es), "reducescatter type %d", g_type);
    NCCLOK(ncclReduceScatter(send, (char*)send + (size_t)g_rank * count * es, count, g_type,
                             ncclSum, comm, g_stream));
    get(got, (char*)send + (size_t)g_rank * count * es, count * es);
    CHECK(same(got, want, count * es), "reducescatter in place type %d", g_type);
    /* AlltoAll: block d of rank s holds s*n+d */
    for (int d = 0; d < n; ++d)
      for (size_t i = 0; i < count; ++i)
        setv(g_type, in, (size_t)d * count + i, (unsigned)((g_rank * n + d + i) % 9));
    for (int s = 0; s < n; ++s)
      for (size_t i = 0; i < count; ++i)
        setv(g_type, want, (size_t)s * count + i, (unsigned)((s * n + g_rank + i) % 9));
    put(send, in, all * es);
    NCCLOK(ncclAlltoAll(send, recv, count, g_type, comm, g_stream));
    get(got, recv, all * es);
    CHECK(same(got, want, all * es), "alltoall type %d", g_type);
    dfree(send);
    dfree(recv);
    free(in);
    free(want);
    free(got);
  }
}

/* A ring of sends and receives in a group, both directions, and a group mixing collectives. */
static void testGroups(ncclComm_t comm, int n) {
  g_type = ncclInt32;
  size_t count = 4099, bytes = count * 4;
  int32_t* in = malloc(bytes);
  int32_t* got = malloc(bytes);
  void* send = dalloc(bytes);
  void* fromPrev = dalloc(bytes);
  void* fromNext = dalloc(bytes);
  for (size_t i = 0; i < count; ++i) in[i] = g_rank * 100000 + (int32_t)i;
  put(send, in, bytes);
  int next = (g_rank + 1) % n, prev = (g_rank + n - 1) % n;
  NCCLOK(ncclGroupStart());
  NCCLOK(ncclRecv(fromPrev, count, ncclInt32, prev, comm, g_stream));
  NCCLOK(ncclSend(send, count, ncclInt32, next, comm, g_stream));
  NCCLOK(ncclSend(send, count, ncclInt32, prev, comm, g_stream));
  NCCLOK(ncclRecv(fromNext, count, ncclInt32, next, comm, g_stream));
  NCCLOK(ncclGroupEnd());
  get(got, fromPrev, bytes);
  CHECK(got[0] == prev * 100000 && got[count - 1] == prev * 100000 + (int32_t)count - 1,
        "recv from prev %d", prev);
  get(got, fromNext, bytes);
  CHECK(got[5] == next * 100000 + 5, "recv from next %d", next);
  /* Nested group with two collectives */
  NCCLOK(ncclGroupStart());
  NCCLOK(ncclGroupStart());
  NCCLOK(ncclAllReduce(send, fromPrev, count, ncclInt32, ncclMax, comm, g_stream));
  NCCLOK(ncclGroupEnd());
  NCCLOK(ncclBroadcast(send, fromNext, count, ncclInt32, n - 1, comm, g_stream));
  NCCLOK(ncclGroupEnd());
  get(got, fromPrev, bytes);
  CHECK(got[3] == (n - 1) * 100000 + 3, "grouped allreduce max");
  get(got, fromNext, bytes);
  CHECK(got[3] == (n - 1) * 100000 + 3, "grouped broadcast");
  /* A simulated group runs nothing */
  ncclSimInfo_t sim = NCCL_SIM_INFO_INITIALIZER;
  NCCLOK(ncclGroupStart());
  NCCLOK(ncclGroupSimulateEnd(&sim));
  dfree(send);
  dfree(fromPrev);
  dfree(fromNext);
  free(in);
  free(got);
}

/* Sum of (rank + 1) x input: per-rank scalars, host-immediate and device-resident. */
static void testPreMulSum(ncclComm_t comm, int n, const char* mode) {
  const ncclDataType_t types[] = {ncclFloat32, ncclInt32, ncclFloat64, ncclFloat16};
  for (int ti = 0; ti < 4; ++ti) {
    g_type = types[ti];
    int expectError =
        strcmp(mode, "error") == 0 || (strcmp(mode, "loom") == 0 && g_type == ncclFloat16);
    size_t es = typeSize(g_type), count = 515;
    char* in = malloc(count * es);
    char* want = malloc(count * es);
    char* got = malloc(count * es);
    char scalar[8];
    setv(g_type, scalar, 0, (unsigned)g_rank + 1);
    void* deviceScalar = dalloc(8);
    put(deviceScalar, scalar, es);
    void* send = dalloc(count * es);
    void* recv = dalloc(count * es);
    fill(g_type, in, count, input, g_rank);
    put(send, in, count * es);
    for (size_t i = 0; i < count; ++i) {
      unsigned acc = 0;
      for (int r = 0; r < n; ++r) acc += (unsigned)(r + 1) * input(r, i);
      setv(g_type, want, i, acc);
    }
    for (int residence = 0; residence < 2; ++residence) {
      ncclRedOp_t op;
      NCCLOK(ncclRedOpCreatePreMulSum(&op, residence ? deviceScalar : (void*)scalar, g_type,
                                      residence ? ncclScalarDevice : ncclScalarHostImmediate,
                                      comm));
      CHECK(op >= ncclNumOps, "custom op %d", op);
      ncclResult_t r = ncclAllReduce(send, recv, count, g_type, op, comm, g_stream);
      if (expectError) {
        CHECK(r != ncclSuccess && strstr(ncclGetLastError(comm), "NCCL") != NULL,
              "premul type %d without a usable real NCCL: %d %s", g_type, r,
              ncclGetLastError(comm));
        if (strcmp(mode, "loom") == 0) CHECK(r == ncclInvalidUsage, "code %d", r);
      } else {
        CHECK(r == ncclSuccess, "premul allreduce: %s", ncclGetLastError(comm));
        get(got, recv, count * es);
        CHECK(same(got, want, count * es), "premul sum type %d residence %d", g_type, residence);
        NCCLOK(ncclReduceScatter(send, recv, count / (size_t)n, g_type, op, comm, g_stream));
        get(got, recv, count / (size_t)n * es);
        CHECK(same(got, want + (size_t)g_rank * (count / (size_t)n) * es, count / (size_t)n * es),
              "premul reducescatter type %d", g_type);
      }
      NCCLOK(ncclRedOpDestroy(op, comm));
    }
    dfree(deviceScalar);
    dfree(send);
    dfree(recv);
    free(in);
    free(want);
    free(got);
  }
}

/* Memory, registration, windows. */
static void testMemory(ncclComm_t comm, int n) {
  void* buf = NULL;
  NCCLOK(ncclMemAlloc(&buf, 4096 * 4));
  void* reg = NULL;
  ncclWindow_t win = NULL;
  NCCLOK(ncclCommRegister(comm, buf, 4096 * 4, &reg));
  NCCLOK(ncclCommWindowRegister(comm, buf, 4096 * 4, &win, NCCL_WIN_COLL_SYMMETRIC));
  int32_t in[4096], got[4096];
  for (int i = 0; i < 4096; ++i) in[i] = i + g_rank;
  put(buf, in, sizeof(in));
  NCCLOK(ncclAllReduce(buf, buf, 4096, ncclInt32, ncclSum, comm, g_stream));
  get(got, buf, sizeof(got));
  CHECK(got[10] == 10 * n + n * (n - 1) / 2, "allreduce on ncclMemAlloc memory: %d", got[10]);
  NCCLOK(ncclCommWindowDeregister(comm, win));
  NCCLOK(ncclCommDeregister(comm, reg));
  NCCLOK(ncclMemFree(buf));
}

/* Bad arguments give NCCL's codes and leave the communicator usable. */
static void testBadArguments(ncclComm_t comm, int n) {
  void* buf = dalloc(64);
  ncclComm_t none = NULL;
  CHECK(ncclAllReduce(buf, buf, 4, ncclInt32, ncclSum, NULL, g_stream) == ncclInvalidArgument,
        "NULL comm");
  CHECK(strlen(ncclGetLastError(NULL)) > 0, "a message for the last error");
  CHECK(ncclAllReduce(buf, buf, 4, ncclNumTypes, ncclSum, comm, g_stream) == ncclInvalidArgument,
        "bad datatype");
  CHECK(
      ncclAllReduce(buf, buf, 4, ncclInt32, (ncclRedOp_t)77, comm, g_stream) == ncclInvalidArgument,
      "bad op");
  /* Checks of the library behind the shim: Loom's, unless the whole communicator runs on the
   * real NCCL (LOOM_NCCL_FORCE_FALLBACK=all), whose own checks differ (it may shrink). */
  const char* force = getenv("LOOM_NCCL_FORCE_FALLBACK");
  int whole = 0;
  for (const char* p = force; p != NULL && *p != '\0';
       p = strchr(p, ',') ? strchr(p, ',') + 1 : NULL)
    whole |= strncmp(p, "all", 3) == 0 && (p[3] == '\0' || p[3] == ',');
  if (!whole) {
    CHECK(ncclBroadcast(buf, buf, 4, ncclInt32, n, comm, g_stream) == ncclInvalidArgument,
          "root out of range");
    CHECK(ncclAllReduce(NULL, buf, 4, ncclInt32, ncclSum, comm, g_stream) == ncclInvalidArgument,
          "NULL sendbuff");
    CHECK(ncclSend(buf, 4, ncclInt32, n + 3, comm, g_stream) == ncclInvalidArgument, "bad peer");
    CHECK(ncclCommShrink(comm, NULL, 0, &none, NULL, NCCL_SHRINK_DEFAULT) == ncclInvalidUsage,
          "shrink of a Loom communicator");
  }
  CHECK(ncclRedOpDestroy(ncclSum, comm) == ncclInvalidArgument, "destroying a built-in op");
  CHECK(ncclGroupEnd() == ncclInvalidUsage, "ncclGroupEnd without start");
  ncclUniqueId id;
  memset(&id, 0, sizeof(id));
  CHECK(ncclCommInitRank(&none, 0, id, 0) == ncclInvalidArgument, "nranks 0");
  CHECK(ncclCommInitRank(&none, 2, id, 2) == ncclInvalidArgument, "rank out of range");
  CHECK(ncclCommInitRank(NULL, 2, id, 0) == ncclInvalidArgument, "NULL comm pointer");
  ncclConfig_t bad = NCCL_CONFIG_INITIALIZER;
  bad.magic = 0;
  CHECK(ncclCommInitRankConfig(&none, 2, id, 0, &bad) == ncclInvalidArgument, "bad config");
  CHECK(ncclCommCount(comm, NULL) == ncclInvalidArgument, "NULL count");
  CHECK(ncclGetVersion(NULL) == ncclInvalidArgument, "NULL version");
  /* A group with a refused operation is dropped and its end fails. */
  NCCLOK(ncclGroupStart());
  CHECK(ncclAllReduce(buf, buf, 4, ncclNumTypes, ncclSum, comm, g_stream) == ncclInvalidArgument,
        "bad datatype in a group");
  CHECK(ncclGroupEnd() == ncclInvalidArgument, "the group's end reports it");
  /* Still usable. */
  int32_t one[4] = {1, 1, 1, 1}, got[4];
  put(buf, one, sizeof(one));
  NCCLOK(ncclAllReduce(buf, buf, 4, ncclInt32, ncclSum, comm, g_stream));
  get(got, buf, sizeof(got));
  CHECK(got[3] == n, "allreduce after bad arguments: %d", got[3]);
  dfree(buf);
}

static void testSplit(ncclComm_t comm, int n) {
  int color = (n > 2 && g_rank == n - 1) ? NCCL_SPLIT_NOCOLOR : g_rank % 2;
  ncclComm_t child = NULL;
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.commName = "child";
  NCCLOK(ncclCommSplit(comm, color, -g_rank, &child, &config));
  if (color == NCCL_SPLIT_NOCOLOR) {
    CHECK(child == NULL, "NOCOLOR gives no communicator");
    return;
  }
  int members = 0;
  for (int r = 0; r < n; ++r)
    if (r % 2 == color && !(n > 2 && r == n - 1)) ++members;
  int count = 0, rank = -1;
  NCCLOK(ncclCommCount(child, &count));
  NCCLOK(ncclCommUserRank(child, &rank));
  CHECK(count == members, "child size %d, expected %d", count, members);
  int below = 0; /* key -rank: highest parent rank first */
  for (int r = g_rank + 1; r < n; ++r)
    if (r % 2 == color && !(n > 2 && r == n - 1)) ++below;
  CHECK(rank == below, "child rank %d, expected %d", rank, below);
  int32_t mine[3] = {g_rank, g_rank, g_rank}, got[3];
  void* buf = dalloc(sizeof(mine));
  put(buf, mine, sizeof(mine));
  NCCLOK(ncclAllReduce(buf, buf, 3, ncclInt32, ncclMax, child, g_stream));
  get(got, buf, sizeof(got));
  int top = -1;
  for (int r = 0; r < n; ++r)
    if (r % 2 == color && !(n > 2 && r == n - 1)) top = r;
  CHECK(got[2] == top, "child allreduce max %d, expected %d", got[2], top);
  dfree(buf);
  if (color == 0)
    NCCLOK(ncclCommAbort(child));
  else {
    NCCLOK(ncclCommFinalize(child));
    NCCLOK(ncclCommDestroy(child));
  }
}

/* ncclCommInitAll: three ranks in this process (host mode: threads), one group over them; on a
 * GPU one rank on the current device (ranks of one process cannot map each other's memory). */
static void testInitAll(void) {
  enum { kMax = 3 };
  const int kDevs = g_host ? kMax : 1;
  ncclComm_t comms[kMax];
  int devs[kMax] = {0, 0, 0};
  if (!g_host) cudaGetDevice(&devs[0]);
  NCCLOK(ncclCommInitAll(comms, kDevs, g_host ? NULL : devs));
  void* bufs[kMax];
  int32_t v[5], got[5];
  for (int d = 0; d < kDevs; ++d) {
    for (int i = 0; i < 5; ++i) v[i] = d + i;
    bufs[d] = dalloc(sizeof(v));
    put(bufs[d], v, sizeof(v));
  }
  NCCLOK(ncclGroupStart());
  for (int d = 0; d < kDevs; ++d)
    NCCLOK(ncclAllReduce(bufs[d], bufs[d], 5, ncclInt32, ncclSum, comms[d], g_stream));
  NCCLOK(ncclGroupEnd());
  for (int d = 0; d < kDevs; ++d) {
    int rank = -1;
    NCCLOK(ncclCommUserRank(comms[d], &rank));
    CHECK(rank == d, "InitAll rank %d", rank);
    get(got, bufs[d], sizeof(got));
    CHECK(got[4] == kDevs * 4 + kDevs * (kDevs - 1) / 2, "InitAll allreduce %d", got[4]);
    dfree(bufs[d]);
    NCCLOK(ncclCommDestroy(comms[d]));
  }
}

static int fallbackMissing(ncclComm_t comm, const char* expect) {
  void* buf = dalloc(64);
  ncclResult_t r = ncclAllGather(buf, buf, 1, ncclInt32, comm, g_stream);
  CHECK(r == ncclInvalidUsage, "forced allgather without a real NCCL: %d", r);
  CHECK(strstr(ncclGetLastError(comm), expect) != NULL, "message '%s' lacks '%s'",
        ncclGetLastError(comm), expect);
  /* Loom's own calls still run. */
  int32_t one = 1, got = 0;
  put(buf, &one, 4);
  NCCLOK(ncclAllReduce(buf, buf, 1, ncclInt32, ncclSum, comm, g_stream));
  get(&got, buf, 4);
  CHECK(got == g_nranks, "allreduce %d", got);
  dfree(buf);
  return 0;
}

int main(int argc, char** argv) {
  const char* missing = NULL;
  const char* premul = "loom";
  for (int i = 1; i < argc; ++i) {
    if (strncmp(argv[i], "--fallback-missing=", 19) == 0)
      missing = argv[i] + 19;
    else if (strncmp(argv[i], "--premul=", 9) == 0)
      premul = argv[i] + 9;
  }
  const char* rank = getenv("RANK");
  const char* size = getenv("WORLD_SIZE");
  g_rank = rank ? atoi(rank) : 0;
  g_nranks = size ? atoi(size) : 1;
  const char* device = getenv("LOOM_NCCL_DEVICE");
  g_host = device != NULL && strcmp(device, "cpu") == 0;
  if (!g_host) {
    const char* local = getenv("LOCAL_RANK");
    int ndev = 0;
    if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev == 0) {
      fprintf(stderr, "no CUDA device (set LOOM_NCCL_DEVICE=cpu for host buffers)\n");
      return 77;
    }
    cudaSetDevice((local ? atoi(local) : 0) % ndev);
    cudaStreamCreate(&g_stream);
  }
  int version = 0;
  NCCLOK(ncclGetVersion(&version));
  CHECK(version >= NCCL_VERSION(2, 28, 0), "version %d", version);
  CHECK(strlen(ncclGetErrorString(ncclInvalidUsage)) > 0, "error string");

  ncclUniqueId id;
  shareId(&id, "world");
  ncclComm_t comm;
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 1;
  config.commName = "world";
  NCCLOK(ncclCommInitRankConfig(&comm, g_nranks, id, g_rank, &config));
  int n = 0, r = -1, dev = -2;
  NCCLOK(ncclCommCount(comm, &n));
  NCCLOK(ncclCommUserRank(comm, &r));
  NCCLOK(ncclCommCuDevice(comm, &dev));
  CHECK(n == g_nranks && r == g_rank, "count %d rank %d", n, r);
  CHECK(g_host ? dev == -1 : dev >= 0, "cuda device %d", dev);
  removeId("world");
  if (missing != NULL) {
    fallbackMissing(comm, missing);
  } else {
    testAllReduce(comm, n);
    testRooted(comm, n);
    testGroups(comm, n);
    testPreMulSum(comm, n, premul);
    testMemory(comm, n);
    testBadArguments(comm, n);
    testSplit(comm, n);
    /* ncclCommInitRank and ncclCommInitRankScalable on fresh ids */
    ncclComm_t second;
    shareId(&id, "second");
    NCCLOK(ncclCommInitRankScalable(&second, g_nranks, g_rank, 1, &id, NULL));
    removeId("second");
    int32_t v = 2, got = 0;
    void* buf = dalloc(4);
    put(buf, &v, 4);
    NCCLOK(ncclAllReduce(buf, buf, 1, ncclInt32, ncclProd, second, g_stream));
    get(&got, buf, 4);
    CHECK(got == (1 << g_nranks), "scalable comm allreduce %d", got);
    dfree(buf);
    NCCLOK(ncclCommDestroy(second));
    testInitAll();
  }
  ncclResult_t async = ncclInternalError;
  NCCLOK(ncclCommGetAsyncError(comm, &async));
  CHECK(async == ncclSuccess, "async error %d", async);
  NCCLOK(ncclCommFinalize(comm));
  NCCLOK(ncclCommDestroy(comm));
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
  ncclResetDebugInit(); /* deprecated in nccl.h, still exported: must still link and run */
#pragma GCC diagnostic pop
  if (g_failures == 0) printf("rank %d: nccl_api_test passed\n", g_rank);
  return g_failures == 0 ? 0 : 1;
}
