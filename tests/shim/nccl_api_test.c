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
#include "nccl_api_test.h"

int g_rank, g_nranks, g_failures, g_host; /* this job */
cudaStream_t g_stream;                    /* NULL in host mode */

/* ---- buffers: host or CUDA ---- */
void* dalloc(size_t bytes) {
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
void dfree(void* p) {
  if (g_host)
    free(p);
  else
    cudaFree(p);
}
void put(void* dst, const void* src, size_t bytes) {
  if (g_host)
    memcpy(dst, src, bytes);
  else
    cudaMemcpy(dst, src, bytes, cudaMemcpyHostToDevice);
}
void get(void* dst, const void* src, size_t bytes) {
  if (!g_host) cudaStreamSynchronize(g_stream);
  if (g_host)
    memcpy(dst, src, bytes);
  else
    cudaMemcpy(dst, src, bytes, cudaMemcpyDeviceToHost);
}

/* ---- small integers in every type ---- */
size_t typeSize(ncclDataType_t t) {
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
void setv(ncclDataType_t t, void* buf, size_t i, unsigned v) {
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
void fill(ncclDataType_t t, void* host, size_t n, unsigned (*f)(int rank, size_t i), int rank) {
  for (size_t i = 0; i < n; ++i) setv(t, host, i, f(rank, i));
}
/* Inputs: {1, 2} (fp8: {0, 1}, so that sums over 5 ranks stay exact in e5m2). */
ncclDataType_t g_type;
unsigned input(int rank, size_t i) {
  unsigned v = (unsigned)((rank + i) % 2);
  return g_type == ncclFloat8e4m3 || g_type == ncclFloat8e5m2 ? v : v + 1;
}
unsigned blockValue(int rank, size_t i) { return (unsigned)((rank * 3 + i) % 5); }

unsigned reduceExpect(ncclRedOp_t op, size_t i, int nranks) {
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

int same(const void* got, const void* want, size_t bytes) { return memcmp(got, want, bytes) == 0; }

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
  /* Checks of the library behind the shim: Loom's, unless calls are forced onto the real NCCL
   * (LOOM_NCCL_FORCE_FALLBACK), whose own checks differ (it does not check pointers by default,
   * and it may shrink). */
  const char* force = getenv("LOOM_NCCL_FORCE_FALLBACK");
  int forced = force != NULL && *force != '\0';
  if (!forced) {
    CHECK(ncclBroadcast(buf, buf, 4, ncclInt32, n, comm, g_stream) == ncclInvalidArgument,
          "root out of range");
    CHECK(ncclAllReduce(NULL, buf, 4, ncclInt32, ncclSum, comm, g_stream) == ncclInvalidArgument,
          "NULL sendbuff");
    CHECK(ncclSend(buf, 4, ncclInt32, n + 3, comm, g_stream) == ncclInvalidArgument, "bad peer");
    /* Loom cannot shrink; a communicator that already has its real NCCL side (a fallback ran on
     * it earlier, where a real NCCL is present) shrinks there, to all of its ranks here. */
    int noRanks[1] = {0};
    ncclResult_t shrunk = ncclCommShrink(comm, noRanks, 0, &none, NULL, NCCL_SHRINK_DEFAULT);
    if (shrunk == ncclSuccess) {
      int size = -1;
      CHECK(none != NULL && ncclCommCount(none, &size) == ncclSuccess && size == n,
            "shrink through the real NCCL: %d ranks", size);
      if (none != NULL) NCCLOK(ncclCommDestroy(none));
    } else if (strstr(ncclGetLastError(comm), "real NCCL") != NULL) {
      /* The real NCCL's own answer (it may refuse to exclude no rank). */
      CHECK(shrunk == ncclInvalidArgument || shrunk == ncclInvalidUsage, "real shrink: %d %s",
            shrunk, ncclGetLastError(comm));
    } else {
      CHECK(shrunk == ncclInvalidUsage && strstr(ncclGetLastError(comm), "shrink") != NULL,
            "shrink of a Loom communicator: %d %s", shrunk, ncclGetLastError(comm));
    }
    CHECK(ncclCommRevoke(comm, NCCL_REVOKE_DEFAULT) == ncclInvalidUsage,
          "revoke of a Loom communicator");
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
