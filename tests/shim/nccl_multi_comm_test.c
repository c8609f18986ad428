/* One process, one thread, several communicators: how nccl-tests (-g N, -t N), ncclCommInitAll
 * programs and frameworks that drive several GPUs from one process use NCCL. Written only against
 * nccl.h. Every init of the first communicators is called inside one group (NCCL defers them to
 * ncclGroupEnd, which makes them together); then collectives and send/recv of every communicator
 * are issued from this one thread inside groups, results checked exactly; splits inside a group,
 * ncclCommInitAll, windows registered in a group, a failing deferred init, and (built against
 * NCCL 2.32's nccl.h) the API 2.29-2.32 added.
 *
 *   nccl_multi_comm_test [N]             N communicators (default 3; CUDA: default the GPU count)
 *   nccl_multi_comm_test exit-alive [N]  makes them, runs one allreduce, returns from main
 *                                        without destroying them: the process must exit
 *
 * LOOM_NCCL_DEVICE=cpu: host buffers (CI); otherwise communicator i runs on GPU i % (GPU count),
 * each with its own stream. Exit 0 passed, 1 failed, 77 skipped (no GPU for CUDA buffers). */
#include <nccl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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
#define cudaStreamDestroy(s) noCuda(s)
#define cudaGetDevice(d) noCuda(d)
#endif

#define MAX_COMMS 8
static int g_host, g_failures, g_ndev = 1;
static int g_dev[MAX_COMMS];
static cudaStream_t g_stream[MAX_COMMS];

#define CHECK(cond, ...)                                                       \
  do {                                                                         \
    if (!(cond)) {                                                             \
      fprintf(stderr, "%s:%d: check failed: %s: ", __FILE__, __LINE__, #cond); \
      fprintf(stderr, __VA_ARGS__);                                            \
      fprintf(stderr, "\n");                                                   \
      if (++g_failures > 20) exit(1);                                          \
    }                                                                          \
  } while (0)
#define NCCLOK(call)                                                                             \
  do {                                                                                           \
    ncclResult_t r_ = (call);                                                                    \
    if (r_ != ncclSuccess) {                                                                     \
      fprintf(stderr, "%s:%d: %s: %s (%s)\n", __FILE__, __LINE__, #call, ncclGetErrorString(r_), \
              ncclGetLastError(NULL));                                                           \
      exit(1);                                                                                   \
    }                                                                                            \
  } while (0)

static void useDevice(int i) {
  if (!g_host) cudaSetDevice(g_dev[i]);
}

/* Buffers of communicator i: host memory, or memory of its GPU. */
static void* balloc(int i, size_t bytes) {
  void* p = NULL;
  if (g_host) {
    p = calloc(1, bytes);
  } else {
    useDevice(i);
    if (cudaMalloc(&p, bytes) != cudaSuccess) p = NULL;
  }
  if (p == NULL) {
    fprintf(stderr, "no memory for %zu bytes\n", bytes);
    exit(1);
  }
  return p;
}
static void bfree(int i, void* p) {
  if (g_host) {
    free(p);
  } else {
    useDevice(i);
    cudaFree(p);
  }
}
static void bput(int i, void* dst, const void* src, size_t bytes) {
  if (g_host) {
    memcpy(dst, src, bytes);
  } else {
    useDevice(i);
    cudaMemcpy(dst, src, bytes, cudaMemcpyHostToDevice);
  }
}
static void bget(int i, void* dst, const void* src, size_t bytes) {
  if (g_host) {
    memcpy(dst, src, bytes);
  } else {
    useDevice(i);
    cudaStreamSynchronize(g_stream[i]);
    cudaMemcpy(dst, src, bytes, cudaMemcpyDeviceToHost);
  }
}
static void* s(int i) { return g_host ? NULL : (void*)g_stream[i]; }

/* Rank i's input: small integers, exact in float and int32. */
static int32_t in(int rank, size_t j) { return (int32_t)((rank + 1) * 3 + (j % 97)); }

/* N ranks of one new communicator, every init inside one group (made at its end). */
static void initInGroup(ncclComm_t* comms, int n, int withConfig) {
  ncclUniqueId id;
  NCCLOK(ncclGetUniqueId(&id));
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.commName = "multi";
  NCCLOK(ncclGroupStart());
  for (int i = 0; i < n; ++i) {
    useDevice(i);
    if (withConfig && i == 0)
      NCCLOK(ncclCommInitRankConfig(&comms[i], n, id, i, &config));
    else
      NCCLOK(ncclCommInitRank(&comms[i], n, id, i));
    CHECK(comms[i] != NULL, "handle %d", i);
    /* As NCCL: the handle is valid at once, its init still to come. */
    ncclResult_t state = ncclSuccess;
    NCCLOK(ncclCommGetAsyncError(comms[i], &state));
    CHECK(state == ncclInProgress, "comm %d before ncclGroupEnd: %d", i, (int)state);
    int count = 0, rank = -1;
    NCCLOK(ncclCommCount(comms[i], &count));
    NCCLOK(ncclCommUserRank(comms[i], &rank));
    CHECK(count == n && rank == i, "comm %d: count %d rank %d", i, count, rank);
  }
  NCCLOK(ncclGroupEnd());
  for (int i = 0; i < n; ++i) {
    ncclResult_t state = ncclInternalError;
    NCCLOK(ncclCommGetAsyncError(comms[i], &state));
    CHECK(state == ncclSuccess, "comm %d after ncclGroupEnd: %d", i, (int)state);
  }
}

/* Allreduce of every communicator in one group from this thread. */
static void checkAllReduce(ncclComm_t* comms, int n, size_t count, const char* what) {
  void* buf[MAX_COMMS];
  float* host = malloc(count * sizeof(float));
  for (int i = 0; i < n; ++i) {
    buf[i] = balloc(i, count * sizeof(float));
    for (size_t j = 0; j < count; ++j) host[j] = (float)in(i, j);
    bput(i, buf[i], host, count * sizeof(float));
  }
  NCCLOK(ncclGroupStart());
  for (int i = 0; i < n; ++i)
    NCCLOK(ncclAllReduce(buf[i], buf[i], count, ncclFloat32, ncclSum, comms[i], s(i)));
  NCCLOK(ncclGroupEnd());
  for (int i = 0; i < n; ++i) {
    bget(i, host, buf[i], count * sizeof(float));
    for (size_t j = 0; j < count; ++j) {
      float want = 0;
      for (int r = 0; r < n; ++r) want += (float)in(r, j);
      if (host[j] != want) {
        CHECK(0, "%s allreduce comm %d [%zu]: %g, want %g", what, i, j, host[j], want);
        break;
      }
    }
    bfree(i, buf[i]);
  }
  free(host);
}

/* Allgather, reduce-scatter, broadcast and alltoall, each in one group over every communicator. */
static void checkCollectives(ncclComm_t* comms, int n, size_t count) {
  const size_t all = count * (size_t)n, bytes = all * sizeof(int32_t);
  void *send[MAX_COMMS], *recv[MAX_COMMS];
  int32_t* host = malloc(bytes);
  int32_t* got = malloc(bytes);
  for (int i = 0; i < n; ++i) {
    send[i] = balloc(i, bytes);
    recv[i] = balloc(i, bytes);
    for (size_t j = 0; j < all; ++j) host[j] = in(i, j);
    bput(i, send[i], host, bytes);
  }
  for (int op = 0; op < 4; ++op) {
    const char* names[] = {"allgather", "reducescatter", "broadcast", "alltoall"};
    NCCLOK(ncclGroupStart());
    for (int i = 0; i < n; ++i) {
      if (op == 0) NCCLOK(ncclAllGather(send[i], recv[i], count, ncclInt32, comms[i], s(i)));
      if (op == 1)
        NCCLOK(ncclReduceScatter(send[i], recv[i], count, ncclInt32, ncclSum, comms[i], s(i)));
      if (op == 2) NCCLOK(ncclBroadcast(send[i], recv[i], all, ncclInt32, n - 1, comms[i], s(i)));
      if (op == 3) NCCLOK(ncclAlltoAll(send[i], recv[i], count, ncclInt32, comms[i], s(i)));
    }
    NCCLOK(ncclGroupEnd());
    for (int i = 0; i < n; ++i) {
      const size_t outCount = op == 1 ? count : all;
      bget(i, got, recv[i], outCount * sizeof(int32_t));
      for (size_t j = 0; j < outCount; ++j) {
        int32_t want = 0;
        if (op == 0) want = in((int)(j / count), j % count);
        if (op == 1)
          for (int r = 0; r < n; ++r) want += in(r, (size_t)i * count + j);
        if (op == 2) want = in(n - 1, j);
        if (op == 3) want = in((int)(j / count), (size_t)i * count + j % count);
        if (got[j] != want) {
          CHECK(0, "%s comm %d [%zu]: %d, want %d", names[op], i, j, got[j], want);
          break;
        }
      }
    }
  }
  /* Alltoall in place (NCCL runs it so; nccl-tests' in-place column). */
  NCCLOK(ncclGroupStart());
  for (int i = 0; i < n; ++i) {
    for (size_t j = 0; j < all; ++j) host[j] = in(i, j);
    bput(i, recv[i], host, bytes);
    NCCLOK(ncclAlltoAll(recv[i], recv[i], count, ncclInt32, comms[i], s(i)));
  }
  NCCLOK(ncclGroupEnd());
  for (int i = 0; i < n; ++i) {
    bget(i, got, recv[i], bytes);
    for (size_t j = 0; j < all; ++j)
      if (got[j] != in((int)(j / count), (size_t)i * count + j % count)) {
        CHECK(0, "in-place alltoall comm %d [%zu]: %d", i, j, got[j]);
        break;
      }
  }
  for (int i = 0; i < n; ++i) {
    bfree(i, send[i]);
    bfree(i, recv[i]);
  }
  free(host);
  free(got);
}

/* Send/recv across communicators in one group: every rank sends to the next and receives from
 * the previous, then every pair exchanges both ways (the sendrecv_perf and alltoall_perf
 * patterns). */
static void checkSendRecv(ncclComm_t* comms, int n, size_t count) {
  const size_t bytes = count * sizeof(int32_t);
  void *send[MAX_COMMS], *recv[MAX_COMMS];
  int32_t* host = malloc(bytes * (size_t)n);
  for (int i = 0; i < n; ++i) {
    send[i] = balloc(i, bytes);
    recv[i] = balloc(i, bytes * (size_t)n);
    for (size_t j = 0; j < count; ++j) host[j] = in(i, j);
    bput(i, send[i], host, bytes);
  }
  NCCLOK(ncclGroupStart());
  for (int i = 0; i < n; ++i) {
    NCCLOK(ncclSend(send[i], count, ncclInt32, (i + 1) % n, comms[i], s(i)));
    NCCLOK(ncclRecv(recv[i], count, ncclInt32, (i + n - 1) % n, comms[i], s(i)));
  }
  NCCLOK(ncclGroupEnd());
  for (int i = 0; i < n; ++i) {
    bget(i, host, recv[i], bytes);
    const int from = (i + n - 1) % n;
    for (size_t j = 0; j < count; ++j)
      if (host[j] != in(from, j)) {
        CHECK(0, "ring recv comm %d [%zu]: %d, want %d", i, j, host[j], in(from, j));
        break;
      }
  }
  NCCLOK(ncclGroupStart());
  for (int i = 0; i < n; ++i)
    for (int p = 0; p < n; ++p) {
      NCCLOK(ncclSend(send[i], count, ncclInt32, p, comms[i], s(i)));
      NCCLOK(ncclRecv((char*)recv[i] + (size_t)p * bytes, count, ncclInt32, p, comms[i], s(i)));
    }
  NCCLOK(ncclGroupEnd());
  for (int i = 0; i < n; ++i) {
    bget(i, host, recv[i], bytes * (size_t)n);
    for (int p = 0; p < n; ++p)
      for (size_t j = 0; j < count; ++j)
        if (host[(size_t)p * count + j] != in(p, j)) {
          CHECK(0, "pairwise comm %d from %d [%zu]: %d", i, p, j, host[(size_t)p * count + j]);
          p = n;
          break;
        }
    bfree(i, send[i]);
    bfree(i, recv[i]);
  }
  free(host);
}

/* Splits of every communicator inside one group; the last rank takes no color (n > 2). */
static void checkSplit(ncclComm_t* comms, int n) {
  ncclComm_t sub[MAX_COMMS];
  NCCLOK(ncclGroupStart());
  for (int i = 0; i < n; ++i) {
    const int color = n > 2 && i == n - 1 ? NCCL_SPLIT_NOCOLOR : i % 2;
    NCCLOK(ncclCommSplit(comms[i], color, i, &sub[i], NULL));
  }
  NCCLOK(ncclGroupEnd());
  int members[2] = {0, 0};
  for (int i = 0; i < n; ++i) {
    if (n > 2 && i == n - 1) {
      CHECK(sub[i] == NULL, "no color: comm %d got a handle", i);
      continue;
    }
    int count = 0, rank = -1;
    NCCLOK(ncclCommCount(sub[i], &count));
    NCCLOK(ncclCommUserRank(sub[i], &rank));
    CHECK(rank == members[i % 2], "split comm %d: rank %d", i, rank);
    members[i % 2] += 1;
    (void)count;
  }
  for (int i = 0; i < n; ++i)
    if (sub[i] != NULL) {
      int count = 0;
      NCCLOK(ncclCommCount(sub[i], &count));
      CHECK(count == members[i % 2], "split comm %d: count %d of %d", i, count, members[i % 2]);
    }
  /* One allreduce per color, both in one group. */
  int32_t* value[MAX_COMMS];
  NCCLOK(ncclGroupStart());
  for (int i = 0; i < n; ++i) {
    if (sub[i] == NULL) continue;
    value[i] = balloc(i, sizeof(int32_t));
    const int32_t v = i + 1;
    bput(i, value[i], &v, sizeof(v));
    NCCLOK(ncclAllReduce(value[i], value[i], 1, ncclInt32, ncclSum, sub[i], s(i)));
  }
  NCCLOK(ncclGroupEnd());
  for (int i = 0; i < n; ++i) {
    if (sub[i] == NULL) continue;
    int32_t got = 0, want = 0;
    bget(i, &got, value[i], sizeof(got));
    for (int r = 0; r < n; ++r)
      if (sub[r] != NULL && r % 2 == i % 2) want += r + 1;
    CHECK(got == want, "split allreduce comm %d: %d, want %d", i, got, want);
    bfree(i, value[i]);
    NCCLOK(ncclCommDestroy(sub[i]));
  }
}

/* Windows registered by every communicator in one group (each registration waits for all
 * ranks), used, then deregistered in one group. */
static void checkWindows(ncclComm_t* comms, int n) {
  const size_t count = 4096, bytes = count * sizeof(float);
  void* buf[MAX_COMMS];
  ncclWindow_t win[MAX_COMMS];
  float* host = malloc(bytes);
  NCCLOK(ncclGroupStart());
  for (int i = 0; i < n; ++i) {
    buf[i] = balloc(i, bytes);
    for (size_t j = 0; j < count; ++j) host[j] = (float)in(i, j);
    bput(i, buf[i], host, bytes);
    NCCLOK(ncclCommWindowRegister(comms[i], buf[i], bytes, &win[i], NCCL_WIN_COLL_SYMMETRIC));
  }
  NCCLOK(ncclGroupEnd());
#if NCCL_VERSION_CODE >= NCCL_VERSION(2, 32, 0)
  for (int i = 0; i < n; ++i) {
    void* user = NULL;
    NCCLOK(ncclWinGetUserPtr(comms[i], win[i], &user));
    CHECK(user == buf[i], "ncclWinGetUserPtr comm %d", i);
  }
#endif
  NCCLOK(ncclGroupStart());
  for (int i = 0; i < n; ++i)
    NCCLOK(ncclAllReduce(buf[i], buf[i], count, ncclFloat32, ncclSum, comms[i], s(i)));
  NCCLOK(ncclGroupEnd());
  for (int i = 0; i < n; ++i) {
    bget(i, host, buf[i], bytes);
    float want = 0;
    for (int r = 0; r < n; ++r) want += (float)in(r, 5);
    CHECK(host[5] == want, "window allreduce comm %d: %g, want %g", i, host[5], want);
  }
  NCCLOK(ncclGroupStart());
  for (int i = 0; i < n; ++i) NCCLOK(ncclCommWindowDeregister(comms[i], win[i]));
  NCCLOK(ncclGroupEnd());
  for (int i = 0; i < n; ++i) bfree(i, buf[i]);
  free(host);
}

/* A deferred init that fails: every handle of the group reports it, and ends cleanly. */
static void checkFailingInit(int n) {
  ncclUniqueId id;
  NCCLOK(ncclGetUniqueId(&id));
  ncclComm_t bad[2];
  NCCLOK(ncclGroupStart());
  for (int i = 0; i < 2; ++i) {
    useDevice(i % n);
    NCCLOK(ncclCommInitRank(&bad[i], 2, id, 0)); /* rank 0 twice: refused when made */
  }
  const ncclResult_t ended = ncclGroupEnd();
  CHECK(ended == ncclInvalidArgument, "group end: %s", ncclGetErrorString(ended));
  CHECK(strlen(ncclGetLastError(NULL)) > 0, "no message");
  for (int i = 0; i < 2; ++i) {
    ncclResult_t state = ncclSuccess;
    NCCLOK(ncclCommGetAsyncError(bad[i], &state));
    CHECK(state == ended, "failed comm %d reports %d", i, (int)state);
    void* p = balloc(0, 4);
    CHECK(ncclAllReduce(p, p, 1, ncclInt32, ncclSum, bad[i], s(0)) == ended, "call on failed");
    bfree(0, p);
    NCCLOK(ncclCommDestroy(bad[i]));
  }
  /* An init and a collective on its communicator in one group: NCCL does not allow it. */
  ncclComm_t early;
  NCCLOK(ncclGetUniqueId(&id));
  void* p = balloc(0, 4);
  NCCLOK(ncclGroupStart());
  useDevice(0);
  NCCLOK(ncclCommInitRank(&early, 1, id, 0));
  CHECK(ncclAllReduce(p, p, 1, ncclInt32, ncclSum, early, s(0)) == ncclInvalidUsage,
        "collective before the init's group ended");
  CHECK(ncclGroupEnd() == ncclInvalidUsage, "group with a refused call");
  NCCLOK(ncclCommDestroy(early));
  bfree(0, p);
}

#if NCCL_VERSION_CODE >= NCCL_VERSION(2, 32, 0)
#include "nccl_multi_comm_2_32.inc"
#endif

static void initAll(ncclComm_t* comms, int n) {
  int devlist[MAX_COMMS];
  for (int i = 0; i < n; ++i) devlist[i] = g_dev[i];
  NCCLOK(ncclCommInitAll(comms, n, g_host ? NULL : devlist));
  for (int i = 0; i < n; ++i) {
    int rank = -1, dev = -2;
    NCCLOK(ncclCommUserRank(comms[i], &rank));
    NCCLOK(ncclCommCuDevice(comms[i], &dev));
    CHECK(rank == i && dev == (g_host ? -1 : g_dev[i]), "initAll comm %d: rank %d dev %d", i, rank,
          dev);
  }
}

int main(int argc, char** argv) {
  int arg = 1;
  const int exitAlive = argc > 1 && strcmp(argv[1], "exit-alive") == 0;
  if (exitAlive) arg = 2;
  const char* device = getenv("LOOM_NCCL_DEVICE");
  g_host = device != NULL && strcmp(device, "cpu") == 0;
  if (!g_host && (cudaGetDeviceCount(&g_ndev) != cudaSuccess || g_ndev == 0)) {
    printf("SKIPPED: no CUDA device (LOOM_NCCL_DEVICE=cpu runs on host buffers)\n");
    return 77;
  }
  int n = argc > arg ? atoi(argv[arg]) : (g_host ? 3 : g_ndev);
  if (n < 1 || n > MAX_COMMS) {
    fprintf(stderr, "N must be in [1, %d]\n", MAX_COMMS);
    return 2;
  }
  for (int i = 0; i < n; ++i) {
    g_dev[i] = g_host ? -1 : i % g_ndev;
    if (!g_host) {
      useDevice(i);
      cudaStreamCreate(&g_stream[i]);
    }
  }
  ncclComm_t comms[MAX_COMMS];
  initInGroup(comms, n, 1);
  if (exitAlive) {
    checkAllReduce(comms, n, 1000, "exit-alive");
    printf("%d communicators alive at exit\n", n);
    return g_failures == 0 ? 0 : 1; /* no destroy: the process must still exit */
  }
  checkAllReduce(comms, n, 1000, "small");
  checkAllReduce(comms, n, 1 << 20, "large");
  checkCollectives(comms, n, 1000);
  checkCollectives(comms, n, 100000);
  checkSendRecv(comms, n, 1000);
  checkSendRecv(comms, n, 300000);
  checkSplit(comms, n);
  checkWindows(comms, n);
#if NCCL_VERSION_CODE >= NCCL_VERSION(2, 32, 0)
  checkApi232(comms, n);
#endif
  for (int i = 0; i < n; ++i) NCCLOK(ncclCommDestroy(comms[i]));

  initAll(comms, n);
  checkAllReduce(comms, n, 5000, "initAll");
  checkSendRecv(comms, n, 777);
  for (int i = 0; i < n; ++i) NCCLOK(ncclCommDestroy(comms[i]));

  checkFailingInit(n);
  for (int i = 0; i < n && !g_host; ++i) cudaStreamDestroy(g_stream[i]);
  if (g_failures == 0) printf("nccl_multi_comm_test passed (%d communicators, one thread)\n", n);
  return g_failures == 0 ? 0 : 1;
}
