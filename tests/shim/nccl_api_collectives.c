/* nccl_api_test's collectives: every type, op and collective, groups, pre-multiplied sums and
 * memory, each result compared bit for bit with the value computed from the inputs. */
#include "nccl_api_test.h"

static const ncclDataType_t kTypes[] = {ncclInt8,    ncclUint8,    ncclInt32,      ncclUint32,
                                        ncclInt64,   ncclUint64,   ncclFloat16,    ncclFloat32,
                                        ncclFloat64, ncclBfloat16, ncclFloat8e4m3, ncclFloat8e5m2};
static const size_t kCounts[] = {1, 7, 1027};

void testAllReduce(ncclComm_t comm, int n) {
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
void testRooted(ncclComm_t comm, int n) {
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
void testGroups(ncclComm_t comm, int n) {
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
void testPreMulSum(ncclComm_t comm, int n, const char* mode) {
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
        /* As torch does: the op is destroyed once the call returned, before its group ends. */
        ncclRedOp_t once;
        NCCLOK(ncclRedOpCreatePreMulSum(&once, residence ? deviceScalar : (void*)scalar, g_type,
                                        residence ? ncclScalarDevice : ncclScalarHostImmediate,
                                        comm));
        memset(got, 0, count * es);
        put(recv, got, count * es);
        NCCLOK(ncclGroupStart());
        NCCLOK(ncclAllReduce(send, recv, count, g_type, once, comm, g_stream));
        NCCLOK(ncclRedOpDestroy(once, comm));
        ncclResult_t ended = ncclGroupEnd();
        CHECK(ended == ncclSuccess, "premul allreduce whose op was destroyed in its group: %s",
              ncclGetLastError(comm));
        get(got, recv, count * es);
        CHECK(same(got, want, count * es), "premul sum in a group, type %d residence %d", g_type,
              residence);
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
void testMemory(ncclComm_t comm, int n) {
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
