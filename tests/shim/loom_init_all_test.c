/* Loom's C API for one process holding several ranks (loom.h: loomCommInitAll,
 * loomCommInitAllConfig, loomCommInitRanksConfig), on CPU devices: what the NCCL shim's
 * ncclCommInitAll and its deferred group inits are built on. Host communicators block in their
 * collectives until every rank joined, so each rank's calls run on a thread of their own here
 * (CUDA communicators only enqueue: one thread drives them all, tests/gpu/gpu_one_process_test).
 * All or nothing: a rank that fails makes the others give up at once (LOOM_TIMEOUT is long in
 * this test's environment: waiting for it would run past ctest's timeout). */
#include <loom/loom.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int g_failures;
#define CHECK(cond, ...)                                                       \
  do {                                                                         \
    if (!(cond)) {                                                             \
      fprintf(stderr, "%s:%d: check failed: %s: ", __FILE__, __LINE__, #cond); \
      fprintf(stderr, __VA_ARGS__);                                            \
      fprintf(stderr, " (%s)\n", loomGetLastError(NULL));                      \
      ++g_failures;                                                            \
    }                                                                          \
  } while (0)

typedef struct {
  loomComm_t comm;
  int rank;
  int64_t value;
  loomResult_t result;
} Job;

static void* allReduce(void* arg) {
  Job* job = arg;
  job->value = job->rank + 1;
  job->result = loomAllReduce(&job->value, &job->value, 1, loomInt64, loomSum, job->comm, NULL);
  return NULL;
}

/* One allreduce per rank, each on its own thread; every rank must get 1 + 2 + ... + n. */
static void checkAllReduce(loomComm_t* comms, int n, const char* what) {
  Job jobs[8];
  pthread_t threads[8];
  for (int i = 0; i < n; ++i) {
    jobs[i] = (Job){comms[i], i, 0, loomInternalError};
    loomCommUserRank(comms[i], &jobs[i].rank);
    pthread_create(&threads[i], NULL, allReduce, &jobs[i]);
  }
  for (int i = 0; i < n; ++i) pthread_join(threads[i], NULL);
  for (int i = 0; i < n; ++i)
    CHECK(jobs[i].result == loomSuccess && jobs[i].value == (int64_t)n * (n + 1) / 2,
          "%s: rank %d got %lld (result %d)", what, i, (long long)jobs[i].value, jobs[i].result);
}

typedef struct {
  loomComm_t comm;
  loomUniqueId id;
  int nranks, rank;
  loomResult_t result;
} Joiner;

static void* joinAlone(void* arg) {
  Joiner* j = arg;
  loomConfig_t cfg = LOOM_CONFIG_INITIALIZER;
  cfg.device = "cpu";
  j->result = loomCommInitRankConfig(&j->comm, j->nranks, j->id, j->rank, &cfg);
  return NULL;
}

int main(void) {
  loomComm_t comms[4];
  loomConfig_t cpu = LOOM_CONFIG_INITIALIZER;
  cpu.device = "cpu";

  /* Three ranks of one new communicator, one per (CPU) device. */
  CHECK(loomCommInitAllConfig(comms, 3, NULL, &cpu) == loomSuccess, "init all on cpu");
  for (int i = 0; i < 3; ++i) {
    int rank = -1, count = 0;
    loomCommUserRank(comms[i], &rank);
    loomCommCount(comms[i], &count);
    CHECK(rank == i && count == 3, "comm %d: rank %d count %d", i, rank, count);
  }
  checkAllReduce(comms, 3, "init all");
  for (int i = 0; i < 3; ++i) CHECK(loomCommDestroy(comms[i]) == loomSuccess, "destroy %d", i);

  /* Bad arguments, refused before anything starts; comms left NULL. */
  comms[0] = (loomComm_t)&cpu;
  CHECK(loomCommInitAllConfig(comms, 0, NULL, &cpu) == loomInvalidArgument, "ndev 0");
  CHECK(loomCommInitAll(NULL, 2, NULL) == loomInvalidArgument, "comms NULL");
  int negative[2] = {0, -1};
  CHECK(loomCommInitAll(comms, 2, negative) == loomInvalidArgument && comms[0] == NULL,
        "negative device");
  loomConfig_t one = cpu;
  one.device = "cpu:0";
  CHECK(loomCommInitAllConfig(comms, 2, NULL, &one) == loomInvalidArgument, "one device named");
  int list[2] = {0, 1};
  CHECK(loomCommInitAllConfig(comms, 2, list, &cpu) == loomInvalidArgument, "devlist for cpu");
  loomConfig_t nonBlocking = cpu;
  nonBlocking.blocking = 0;
  CHECK(loomCommInitAllConfig(comms, 2, NULL, &nonBlocking) == loomInvalidArgument, "non-blocking");

  /* Ranks 0 and 2 made together here, rank 1 joining on its own (another process's part). */
  loomUniqueId id;
  CHECK(loomGetUniqueId(&id) == loomSuccess, "unique id");
  Joiner joiner = {NULL, id, 3, 1, loomInternalError};
  pthread_t alone;
  pthread_create(&alone, NULL, joinAlone, &joiner);
  loomConfig_t* configs[2] = {&cpu, &cpu};
  int ranks[2] = {0, 2};
  loomComm_t pair[2];
  CHECK(loomCommInitRanksConfig(pair, 2, 3, id, ranks, configs) == loomSuccess, "ranks 0 and 2");
  pthread_join(alone, NULL);
  CHECK(joiner.result == loomSuccess, "rank 1 alone: %d", joiner.result);
  loomComm_t three[3] = {pair[0], joiner.comm, pair[1]};
  checkAllReduce(three, 3, "ranks together and alone");
  for (int i = 0; i < 3; ++i) loomCommDestroy(three[i]);

  /* One rank fails (no such device): the other, waiting for it, gives up at once. */
  CHECK(loomGetUniqueId(&id) == loomSuccess, "unique id");
  loomConfig_t missing = cpu;
  missing.device = "no-such-device-kind";
  loomConfig_t* mixed[2] = {&cpu, &missing};
  int both[2] = {0, 1};
  pair[0] = pair[1] = (loomComm_t)&cpu;
  const loomResult_t failed = loomCommInitRanksConfig(pair, 2, 2, id, both, mixed);
  CHECK(failed != loomSuccess && pair[0] == NULL && pair[1] == NULL, "one rank failing: %d",
        failed);
  CHECK(strstr(loomGetLastError(NULL), "rank 1") != NULL, "names the failed rank");
  int twice[2] = {0, 0};
  CHECK(loomCommInitRanksConfig(pair, 2, 2, id, twice, NULL) == loomInvalidArgument, "rank twice");

  /* CUDA devices 0 and 1: made on a GPU host, an error without one; never half made. */
  loomComm_t gpus[2] = {NULL, NULL};
  if (loomCommInitAll(gpus, 2, NULL) == loomSuccess) {
    for (int i = 0; i < 2; ++i) loomCommDestroy(gpus[i]);
  } else {
    CHECK(gpus[0] == NULL && gpus[1] == NULL, "failed init all left a handle");
  }
  if (g_failures == 0) printf("loom_init_all_test passed\n");
  return g_failures == 0 ? 0 : 1;
}
