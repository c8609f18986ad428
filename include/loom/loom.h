/* Loom: a collective communication library. NCCL-shaped C API.
 *
 * Usage: one rank calls loomGetUniqueId and shares the id out of band; every rank calls
 * loomCommInitRank(&comm, nranks, id, rank), then collectives, then loomCommDestroy.
 * Or, under loomrun / torchrun / mpirun: loomCommInitFromEnv(&comm, NULL).
 *
 * Every function returns a loomResult_t and never throws; loomGetLastError() gives the
 * message of the last failure on the calling thread. Only loomInvalidArgument leaves the
 * communicator usable; any other error leaves it aborted. */
#ifndef LOOM_LOOM_H_
#define LOOM_LOOM_H_

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Only the C API is exported from libloom.so (the library builds with hidden visibility). */
#if defined(__GNUC__)
#pragma GCC visibility push(default)
#endif

#define LOOM_MAJOR 0
#define LOOM_MINOR 1
#define LOOM_PATCH 0
#define LOOM_VERSION(X, Y, Z) ((X)*10000 + (Y)*100 + (Z))
#define LOOM_VERSION_CODE LOOM_VERSION(LOOM_MAJOR, LOOM_MINOR, LOOM_PATCH)

typedef enum {
  loomSuccess = 0,
  loomUnhandledCudaError = 1,
  loomSystemError = 2,
  loomInternalError = 3,
  loomInvalidArgument = 4,
  loomInvalidUsage = 5,
  loomRemoteError = 6,
  loomInProgress = 7,
  loomTimeout = 8, /* Loom extension: a wait passed the communicator's timeout */
  loomNumResults = 9
} loomResult_t;

typedef enum {
  loomInt8 = 0,
  loomChar = 0,
  loomUint8 = 1,
  loomInt32 = 2,
  loomInt = 2,
  loomUint32 = 3,
  loomInt64 = 4,
  loomUint64 = 5,
  loomFloat16 = 6,
  loomHalf = 6,
  loomFloat32 = 7,
  loomFloat = 7,
  loomFloat64 = 8,
  loomDouble = 8,
  loomBfloat16 = 9,
  loomFloat8e4m3 = 10, /* e4m3fn: bias 7, max 448, no inf */
  loomFloat8e5m2 = 11,
  loomFloat8e4m3b15 = 12, /* 1-4-3, bias 15, saturates at +-1.875, no inf/NaN */
  loomNumTypes = 13
} loomDataType_t;

typedef enum {
  loomSum = 0,
  loomProd = 1,
  loomMax = 2,
  loomMin = 3,
  loomAvg = 4,
  loomNumOps = 5
} loomRedOp_t;

/* The collectives, for introspection (loomCommGetAlgorithm). */
typedef enum {
  loomFuncAllReduce = 0,
  loomFuncBroadcast,
  loomFuncReduce,
  loomFuncAllGather,
  loomFuncReduceScatter,
  loomFuncAllToAll,
  loomFuncAllToAllv,
  loomFuncGather,
  loomFuncScatter,
  loomFuncSendRecv,
  loomFuncBarrier,
  loomNumFuncs
} loomFunc_t;

typedef struct loomComm* loomComm_t;
/* A stream handle: NULL for host buffers; a cudaStream_t for CUDA devices (later). */
typedef void* loomStream_t;

#define LOOM_UNIQUE_ID_BYTES 128
typedef struct {
  char internal[LOOM_UNIQUE_ID_BYTES];
} loomUniqueId;

#define LOOM_CONFIG_MAGIC 0x4c4f4f4du /* "LOOM" */
typedef struct {
  size_t size;          /* sizeof(loomConfig_t), set by LOOM_CONFIG_INITIALIZER */
  unsigned int magic;   /* LOOM_CONFIG_MAGIC */
  unsigned int version; /* LOOM_VERSION_CODE */
  const char* device;   /* "cpu" (default) */
  int timeoutMs;        /* every wait gives up after this; 0: LOOM_TIMEOUT or 600000 */
  int blocking;         /* 1 (default): calls return when done; 0: may return loomInProgress */
  const char* name;     /* shown in logs */
  int accumType;        /* reductions of fp8/fp16/bf16 accumulate in this type (e.g. loomFloat32);
                           -1 (default): LOOM_ACCUM_TYPE or the input type itself */
} loomConfig_t;

#define LOOM_CONFIG_INITIALIZER \
  { sizeof(loomConfig_t), LOOM_CONFIG_MAGIC, LOOM_VERSION_CODE, NULL, 0, 1, NULL, -1 }

/* Version and errors */
loomResult_t loomGetVersion(int* version);
const char* loomGetErrorString(loomResult_t result);
/* The message of the last error raised on this thread (empty string if none). */
const char* loomGetLastError(loomComm_t comm);

/* Communicator lifetime */
loomResult_t loomGetUniqueId(loomUniqueId* uniqueId);
loomResult_t loomCommInitRank(loomComm_t* comm, int nranks, loomUniqueId commId, int rank);
loomResult_t loomCommInitRankConfig(loomComm_t* comm, int nranks, loomUniqueId commId, int rank,
                                    loomConfig_t* config);
/* One process, several devices (as ncclCommInitAll): comms[i] becomes rank i of one new
 * ndev-rank communicator, on CUDA device devlist[i] (devlist NULL: devices 0 .. ndev-1). The
 * ranks are made together, a thread each (every rank's init waits for all of them, so one thread
 * could not make them one after the other). All or nothing: when one rank fails the others give up
 * at once, every comms[i] is NULL, and the first failure's code is returned (loomGetLastError
 * names the rank and the reason). The calling thread's current CUDA device is left as it was;
 * each communicator's calls run on its own device whatever the caller's current one is, and a
 * CUDA communicator's calls only enqueue work on the stream, so one thread may drive all of them.
 * Calls that wait for the peers on the host need a thread per rank: every collective of a host
 * communicator, window registration, and every collective under LOOM_CHECK=2 (its exchange).
 * Peers of one process use each other's GPU memory directly (peer access, no CUDA IPC).
 * Communicators made so are blocking. */
loomResult_t loomCommInitAll(loomComm_t* comms, int ndev, const int* devlist);
/* The same with a config for every rank (timeout, name, accumulation type; blocking only):
 * config->device NULL or "cuda" puts rank i on CUDA device devlist[i] (or i); another kind puts
 * every rank on a device of that kind: "cpu" (devlist must be NULL), or a plug-in's kind, rank i
 * on "kind:devlist[i]" (or "kind:i"). config NULL: as loomCommInitAll. */
loomResult_t loomCommInitAllConfig(loomComm_t* comms, int ndev, const int* devlist,
                                   loomConfig_t* config);
/* Several ranks of one communicator made together by this process, as NCCL makes the inits of
 * one group (ncclGroupStart; ncclCommInitRank on each device; ncclGroupEnd): comms[i] becomes
 * rank ranks[i] of the nranks-rank communicator commId names, with configs[i] (configs NULL, or
 * an entry NULL: defaults). The other ranks join from other processes (or other calls) as with
 * loomCommInitRankConfig. A thread per rank, all or nothing, as loomCommInitAll. */
loomResult_t loomCommInitRanksConfig(loomComm_t* comms, int count, int nranks, loomUniqueId commId,
                                     const int* ranks, loomConfig_t* const* configs);
/* Rank, size and rendezvous from LOOM_RANK/RANK/OMPI_COMM_WORLD_RANK, WORLD_SIZE/... and
 * LOOM_COMM_ID=host:port or MASTER_ADDR:(MASTER_PORT+1); the job secret from LOOM_JOB_SECRET. */
loomResult_t loomCommInitFromEnv(loomComm_t* comm, loomConfig_t* config);
/* Ranks with the same color form a new communicator, ordered by key then parent rank.
 * color < 0 (LOOM_SPLIT_NOCOLOR) gives *newcomm = NULL. */
#define LOOM_SPLIT_NOCOLOR (-1)
loomResult_t loomCommSplit(loomComm_t comm, int color, int key, loomComm_t* newcomm,
                           loomConfig_t* config);
loomResult_t loomCommFinalize(loomComm_t comm);
loomResult_t loomCommDestroy(loomComm_t comm);
loomResult_t loomCommAbort(loomComm_t comm);
loomResult_t loomCommGetAsyncError(loomComm_t comm, loomResult_t* asyncError);
loomResult_t loomCommCount(const loomComm_t comm, int* count);
loomResult_t loomCommUserRank(const loomComm_t comm, int* rank);
/* This rank's view of the communicator's topology as text: the nodes and their leaders, the
 * network interface, and the transport ("shm" or "tcp") to every peer. Truncated to size - 1
 * characters; *needed (may be NULL) gets the full length plus one. */
loomResult_t loomCommDescribeTopology(const loomComm_t comm, char* text, size_t size,
                                      size_t* needed);
/* Writes the flight record of `comm` (NULL: of every communicator of this process): its last
 * calls (LOOM_FLIGHT_ENTRIES) with their numbers, ops, sizes, peers, algorithms, states and
 * times, as <dir>/loom-flight-<job>-r<rank>.json. dir NULL: LOOM_FLIGHT_DIR. `loom-info --flight
 * DIR` reads the files of every rank and says what happened. Also done on a failure (timeout,
 * abort), a fatal signal and SIGUSR2 where LOOM_FLIGHT_DIR is set. */
loomResult_t loomCommDumpFlight(loomComm_t comm, const char* dir);
/* Name of the algorithm the selector would run for this call (static string). */
loomResult_t loomCommGetAlgorithm(const loomComm_t comm, loomFunc_t func, size_t count,
                                  loomDataType_t datatype, const char** algorithm);

/* Execution plans (docs/plans.md): a collective written as a JSON plan (Python: loom.plan) and
 * run by Loom's executor wherever the host algorithms run (host communicators; plug-in and
 * heterogeneous communicators' device ranks staged through host memory), and on CUDA
 * communicators by a kernel that interprets it (refused, on every rank, where it needs more
 * thread blocks than the GPUs hold at once). loomCommRegisterPlan is collective:
 * every rank passes the same plan, as JSON text (starting with '{') or a file's path; it is
 * checked on every rank (schema, rank count, and a simulated run: every receive matched, no wait
 * cycle, every output chunk written once with the right result) and compared across ranks, and
 * refused on every rank if any rank refuses it or passes another plan. Then calls of its
 * collective within its size range use it (LOOM_ALGO=allreduce:plan:NAME forces it). *algorithm
 * (may be NULL) gets "plan:NAME", valid while the communicator lives. Plans in LOOM_PLAN_DIR
 * (*.json) are loaded by every communicator at init. */
loomResult_t loomCommRegisterPlan(loomComm_t comm, const char* jsonOrPath, const char** algorithm);
/* The user's choice of algorithm per call, as MSCCL++'s set_algorithm_selector: returns an
 * algorithm name of `func` ("plan:NAME", "ring", ...) or NULL for Loom's own choice. It must
 * choose the same on every rank (LOOM_CHECK=2 verifies). NULL selector: none. */
typedef const char* (*loomPlanSelector_t)(loomFunc_t func, size_t bytes, int nranks, void* user);
loomResult_t loomCommSetPlanSelector(loomComm_t comm, loomPlanSelector_t selector, void* user);
/* The communicator's plans, one line each (name, collective, ranks, sizes, hash, source); text as
 * in loomCommDescribeTopology. */
loomResult_t loomCommDescribePlans(const loomComm_t comm, char* text, size_t size, size_t* needed);
/* Checks a plan without a communicator (loom-info --check-plan): loomSuccess and a description
 * of it in text, or loomInvalidArgument and the reason in loomGetLastError(NULL). */
loomResult_t loomPlanCheck(const char* jsonOrPath, char* text, size_t size, size_t* needed);

/* Windows (as NCCL's ncclCommWindowRegister): a buffer every rank registers together, in the same
 * order and with the same size. With LOOM_WIN_COLL_SYMMETRIC the caller promises that collectives
 * on it use the same offsets on every rank; then, where the device can (CUDA GPUs of one host
 * mapping each other's memory), allgather, alltoall, reduce-scatter and allreduce on it read and
 * write the peers' buffers directly (no staging copy), and allgather/alltoall may run on the copy
 * engines (LOOM_ALGO=allgather:ce). A call that breaks the promise fails with loomInvalidUsage.
 * Elsewhere registration succeeds and calls run as on any buffer. Windows start anywhere in an
 * allocation that can be shared between processes: loomMemAlloc's, or cudaMalloc's. Deregister
 * (also collective) before freeing the buffer. */
typedef struct loomWindow* loomWindow_t;
#define LOOM_WIN_DEFAULT 0x00
#define LOOM_WIN_COLL_SYMMETRIC 0x01
/* Memory of the communicator's device for windows; free with loomMemFree. */
loomResult_t loomMemAlloc(loomComm_t comm, void** ptr, size_t size);
loomResult_t loomMemFree(loomComm_t comm, void* ptr);
loomResult_t loomCommWindowRegister(loomComm_t comm, void* buff, size_t size, loomWindow_t* win,
                                    int flags);
loomResult_t loomCommWindowDeregister(loomComm_t comm, loomWindow_t win);
/* *direct = 1 when collectives on the window use it directly, 0 when they run as on any buffer
 * (LOOM_DEBUG=INFO says why at registration). */
loomResult_t loomCommWindowIsDirect(loomComm_t comm, loomWindow_t win, int* direct);

/* Registration (as NCCL's ncclCommRegister): this rank's buffer, registered alone (not
 * collective; peers need not register at the same time, nor buffers of the same size or offset).
 * Where the device can (CUDA GPUs of one host mapping each other's memory), allgather, alltoall,
 * reduce-scatter and allreduce whose buffers are registered on every rank read and write the
 * peers' buffers directly, as on windows; peers map a new registration when a call first needs
 * it. As in NCCL, when one rank's call passes registered buffers every rank's call must: a call
 * whose plan uses a buffer registered on some ranks and not on others (allgather's and
 * alltoall's output, reduce-scatter's and allreduce's input, a two-shot allreduce's output)
 * fails on every rank (loomInvalidUsage where the kernels can tell, else loomTimeout; with
 * LOOM_CHECK=2 loomInvalidUsage at once, before anything runs); its outputs are then not
 * results. Elsewhere registration succeeds and calls run
 * as on any buffer. On a CUDA communicator the buffer must lie in memory that can be shared
 * between processes: loomMemAlloc's, cudaMalloc's, or cuMemCreate's made with
 * CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR among its requestedHandleTypes (PyTorch's expandable
 * segments, ncclMemAlloc's), where the buffer may span several physical allocations mapped one
 * after another; not cudaMallocAsync pools: loomInvalidArgument otherwise, with the reason.
 * Deregister before freeing the buffer (it waits for this rank's device work, not for the peers:
 * they unmap it at their own next deregistration, so its memory returns to the device only then;
 * cuMem memory stays allocated while a peer maps it, while cudaMalloc memory freed before that is
 * undefined behaviour in CUDA). */
typedef struct loomRegistration* loomRegistration_t;
loomResult_t loomCommRegister(loomComm_t comm, void* buff, size_t size, loomRegistration_t* handle);
loomResult_t loomCommDeregister(loomComm_t comm, loomRegistration_t handle);
/* *direct = 1 when collectives may use the registered buffer directly, 0 when they run as on
 * any buffer (LOOM_DEBUG=INFO says why at registration). */
loomResult_t loomCommRegistrationIsDirect(loomComm_t comm, loomRegistration_t handle, int* direct);

/* Group calls: operations between Start and End are issued together at End, so that
 * matching sends and receives in any order cannot deadlock. */
loomResult_t loomGroupStart(void);
loomResult_t loomGroupEnd(void);

/* Collectives. count is in elements of datatype. A call of count 0 (not barrier, not alltoallv)
 * checks its arguments and returns at once, as NCCL's do: nothing runs and it is not matched
 * with the peers' calls. */
loomResult_t loomAllReduce(const void* sendbuff, void* recvbuff, size_t count,
                           loomDataType_t datatype, loomRedOp_t op, loomComm_t comm,
                           loomStream_t stream);
loomResult_t loomBroadcast(const void* sendbuff, void* recvbuff, size_t count,
                           loomDataType_t datatype, int root, loomComm_t comm, loomStream_t stream);
loomResult_t loomReduce(const void* sendbuff, void* recvbuff, size_t count, loomDataType_t datatype,
                        loomRedOp_t op, int root, loomComm_t comm, loomStream_t stream);
/* recvbuff holds nranks * sendcount elements, rank r's block at r * sendcount. */
loomResult_t loomAllGather(const void* sendbuff, void* recvbuff, size_t sendcount,
                           loomDataType_t datatype, loomComm_t comm, loomStream_t stream);
/* sendbuff holds nranks * recvcount elements. */
loomResult_t loomReduceScatter(const void* sendbuff, void* recvbuff, size_t recvcount,
                               loomDataType_t datatype, loomRedOp_t op, loomComm_t comm,
                               loomStream_t stream);
/* count elements to and from every peer. */
loomResult_t loomAllToAll(const void* sendbuff, void* recvbuff, size_t count,
                          loomDataType_t datatype, loomComm_t comm, loomStream_t stream);
/* Counts and displacements in elements, one per peer. */
loomResult_t loomAllToAllv(const void* sendbuff, const size_t sendcounts[], const size_t sdispls[],
                           void* recvbuff, const size_t recvcounts[], const size_t rdispls[],
                           loomDataType_t datatype, loomComm_t comm, loomStream_t stream);
loomResult_t loomGather(const void* sendbuff, void* recvbuff, size_t sendcount,
                        loomDataType_t datatype, int root, loomComm_t comm, loomStream_t stream);
loomResult_t loomScatter(const void* sendbuff, void* recvbuff, size_t recvcount,
                         loomDataType_t datatype, int root, loomComm_t comm, loomStream_t stream);
loomResult_t loomSend(const void* sendbuff, size_t count, loomDataType_t datatype, int peer,
                      loomComm_t comm, loomStream_t stream);
loomResult_t loomRecv(void* recvbuff, size_t count, loomDataType_t datatype, int peer,
                      loomComm_t comm, loomStream_t stream);
loomResult_t loomBarrier(loomComm_t comm, loomStream_t stream);
/* Point to point with a tag (any int): a receive takes the oldest message from that peer with the
 * same tag; messages of other tags that arrive first wait, set aside, for their own receive.
 * loomSend/loomRecv are tag 0. CUDA communicators match in issue order per peer and ignore the
 * tag, as NCCL-based backends do. */
loomResult_t loomSendTag(const void* sendbuff, size_t count, loomDataType_t datatype, int peer,
                         int tag, loomComm_t comm, loomStream_t stream);
loomResult_t loomRecvTag(void* recvbuff, size_t count, loomDataType_t datatype, int peer, int tag,
                         loomComm_t comm, loomStream_t stream);

/* Non-blocking point to point (host communicators). loomIsend/loomIrecv post the operation and
 * return at once with a request; every posted send and receive of a communicator progresses
 * together on its own thread, in any order of posting (a receive posted before its matching send on
 * both ranks completes), matched per (peer, tag) in posting order like loomSendTag/loomRecvTag, and
 * with them. The buffer must stay valid until the request has finished. A request that fails (a
 * timeout, a dead peer, a size mismatch) leaves the communicator aborted, like a blocking call.
 * loomIrecv takes peer LOOM_ANY_SOURCE: the first message with its tag from any rank
 * (loomRequestGetSource tells which). */
#define LOOM_ANY_SOURCE (-1)
typedef struct loomRequest* loomRequest_t;
loomResult_t loomIsend(const void* sendbuff, size_t count, loomDataType_t datatype, int peer,
                       int tag, loomComm_t comm, loomRequest_t* request);
loomResult_t loomIrecv(void* recvbuff, size_t count, loomDataType_t datatype, int peer, int tag,
                       loomComm_t comm, loomRequest_t* request);
/* *done = 1 once the operation finished; then returns its result (loomInProgress before). */
loomResult_t loomTest(loomRequest_t request, int* done);
/* Blocks until the operation finished (bounded by the communicator's timeout); returns its result.
 */
loomResult_t loomWait(loomRequest_t request);
/* The rank a finished receive came from. */
loomResult_t loomRequestGetSource(loomRequest_t request, int* source);
/* callback(result, arg) runs once when the operation finishes, on Loom's progress thread (or at
 * once on the calling thread if it already has). It must not block on other Loom operations. */
typedef void (*loomRequestCallback_t)(loomResult_t result, void* arg);
loomResult_t loomRequestSetCallback(loomRequest_t request, loomRequestCallback_t callback,
                                    void* arg);
/* Releases the request; an operation still in flight goes on (its buffer must stay valid). Valid
 * after the communicator was destroyed. */
loomResult_t loomRequestFree(loomRequest_t request);

/* ---- Mixture-of-experts expert parallelism: dispatch and combine (DeepEP's semantics) ----
 *
 * Experts are numbered 0 .. numExperts-1 and rank r holds experts r*L .. r*L+L-1 (L = numExperts /
 * nranks, its "local" experts). Each token of a rank picks up to `topk` experts (topkIdx, int64,
 * -1: none). Dispatch sends every token once to every rank that holds one of its experts; a rank
 * receives its tokens grouped by source rank, in ascending source rank, each source's tokens in
 * ascending token index. Combine returns each received token's result to its origin, where the
 * rows of the ranks it went to are summed in ascending rank order in fp32 (plus the biases, first)
 * and rounded once: bit-identical from run to run. Low-latency calls use fixed receive buffers
 * [L][maxTokensPerRank * nranks][hidden] per expert instead (DeepEP's low_latency_*).
 *
 * Every call below is collective over the communicator (all ranks, in the same order) except
 * loomEpLayout, loomEpDestroy and loomEpLowLatencySizeHint. Arrays live where the communicator's
 * buffers live (device memory on device communicators), except those marked "host". A call whose
 * arguments break the sizes given at creation, name experts out of range, or differ across ranks
 * where they must agree (hidden size, data type, topk, FP8 settings) fails with loomInvalidArgument
 * on every rank (the ranks exchange their checks), and the communicator stays usable. docs/ep.md
 * describes the paths (shared memory, network channels, staged device ranks, CUDA kernels). */
typedef struct loomEp* loomEp_t;

#define LOOM_EP_NORMAL 0x1      /* dispatch/combine: receive buffers sized from the layout */
#define LOOM_EP_LOW_LATENCY 0x2 /* low-latency dispatch/combine: fixed per-expert buffers */
#define LOOM_EP_CONFIG_MAGIC 0x4c4f4550u /* "LOEP" */
typedef struct {
  size_t size;           /* sizeof(loomEpConfig_t), set by LOOM_EP_CONFIG_INITIALIZER */
  unsigned int magic;    /* LOOM_EP_CONFIG_MAGIC */
  int modes;             /* LOOM_EP_NORMAL and/or LOOM_EP_LOW_LATENCY */
  int maxTokensPerRank;  /* most tokens one rank dispatches in one call (> 0) */
  int hidden;            /* largest hidden size of a call, in elements (> 0) */
  loomDataType_t dtype;  /* widest element type of a call's tokens (loomBfloat16 by default) */
  int maxTopk;           /* most experts per token (columns of topkIdx), 1..64 */
  int numExperts;        /* all ranks' experts; a multiple of the rank count */
  size_t bufferBytes;    /* normal mode: each rank's staging (two buffers of this size); 0: default */
} loomEpConfig_t;
#define LOOM_EP_CONFIG_INITIALIZER \
  { sizeof(loomEpConfig_t), LOOM_EP_CONFIG_MAGIC, LOOM_EP_NORMAL, 0, 0, loomBfloat16, 0, 0, 0 }

/* Collective: the buffers every later call uses are allocated and shared here, once. */
loomResult_t loomEpCreate(loomEp_t* ep, loomComm_t comm, const loomEpConfig_t* config);
/* Local; the communicator must outlive the object. Pending hooks are dropped. */
loomResult_t loomEpDestroy(loomEp_t ep);

/* Local (no communication): from topkIdx [numTokens][topk], the tokens sent to each rank
 * [nranks] and to each expert [numExperts] (int32), and which token goes to which rank
 * [numTokens][nranks] (bytes 0/1). Any output may be NULL. */
loomResult_t loomEpLayout(loomEp_t ep, const int64_t* topkIdx, int numTokens, int topk,
                          int32_t* numTokensPerRank, int32_t* numTokensPerExpert,
                          uint8_t* isTokenInRank, loomStream_t stream);

/* What a dispatch leaves for its combine and for later dispatches with the same layout ("cached").
 * The caller owns the arrays (the communicator's buffer memory). */
typedef struct {
  int numTokens;              /* this rank's tokens at the dispatch */
  int numRecvTokens;          /* tokens this rank received; -1 until counted */
  int32_t* rankPrefixMatrix;  /* [nranks][nranks]: [i][j] = tokens ranks 0..i send to rank j */
  int32_t* recvSrcIdx;        /* [recv capacity]: each received token's index at its source */
  int32_t* sendHead;          /* [numTokens][nranks]: token t's row at rank r (-1: not sent) */
  const uint8_t* isTokenInRank; /* [numTokens][nranks]: the layout's (kept by the caller) */
} loomEpHandle_t;

typedef struct {
  size_t size;                /* sizeof(loomEpDispatchArgs_t) */
  const void* x;              /* [numTokens][hidden] of dtype */
  loomDataType_t dtype;
  int hidden;
  int numTokens;
  const float* xScales;       /* [numTokens][numScales] (FP8 tokens' scales), or NULL */
  int numScales;
  const int64_t* topkIdx;     /* [numTokens][topk], or NULL (cached: the handle's layout) */
  const float* topkWeights;   /* [numTokens][topk], or NULL */
  int topk;
  const int32_t* numTokensPerExpert; /* [numExperts] (loomEpLayout's), or NULL: from topkIdx */
  int expertAlignment;        /* recvTokensPerExpert rounded up to a multiple (<= 1: none) */
  /* outputs, rows in the order described above */
  void* recvX;                /* [recvCapacity][hidden] */
  float* recvXScales;         /* [recvCapacity][numScales] */
  int64_t* recvTopkIdx;       /* [recvCapacity][topk]: local expert ids, -1 elsewhere */
  float* recvTopkWeights;     /* [recvCapacity][topk]: 0 where recvTopkIdx is -1 */
  int recvCapacity;           /* rows the receive arrays hold; rows past the received are left
                                 with recvTopkIdx -1 */
  int32_t* recvTokensPerExpert; /* host [numExperts / nranks], or NULL */
  loomEpHandle_t* handle;     /* in/out */
} loomEpDispatchArgs_t;

/* Collective: exchanges the counts of a dispatch (args->handle->isTokenInRank, ->numTokens and
 * args->topkIdx): sets handle->numRecvTokens, rankPrefixMatrix, sendHead and
 * *recvTokensPerExpert, so that the caller can size the receive arrays. Blocks the host. */
loomResult_t loomEpDispatchCounts(loomEp_t ep, const loomEpDispatchArgs_t* args,
                                  loomStream_t stream);
/* Collective: moves the tokens. A handle not yet counted (numRecvTokens -1) is counted here (the
 * receive arrays then hold recvCapacity rows, the worst case); a counted one is reused as it is
 * (a cached dispatch: topkIdx and topkWeights NULL, or the same layout again). */
loomResult_t loomEpDispatch(loomEp_t ep, const loomEpDispatchArgs_t* args, loomStream_t stream);

typedef struct {
  size_t size;                /* sizeof(loomEpCombineArgs_t) */
  const void* x;              /* [handle->numRecvTokens][hidden] of dtype */
  loomDataType_t dtype;
  int hidden;
  const float* topkWeights;   /* [numRecvTokens][topk], summed like x; or NULL */
  int topk;
  const void* bias0, *bias1;  /* [handle->numTokens][hidden] of dtype, added first; or NULL */
  const loomEpHandle_t* handle;
  void* combinedX;            /* [handle->numTokens][hidden] */
  float* combinedTopkWeights; /* [handle->numTokens][topk], or NULL */
} loomEpCombineArgs_t;
loomResult_t loomEpCombine(loomEp_t ep, const loomEpCombineArgs_t* args, loomStream_t stream);

/* Low latency. M = maxTokensPerRank, L = local experts; bf16 tokens. */
typedef struct {
  size_t size;                /* sizeof(loomEpLowLatencyDispatchArgs_t) */
  const void* x;              /* bf16 [numTokens][hidden], numTokens <= M */
  int hidden;
  int numTokens;
  const int64_t* topkIdx;     /* [numTokens][topk] */
  int topk;
  int useFp8;                 /* recvX as e4m3 with one fp32 scale per 128 values */
  int roundScale;             /* scales rounded up to powers of two */
  int useUe8m0;               /* scales as 8-bit exponents, four per int32 (needs roundScale) */
  /* outputs */
  void* recvX;                /* [L][M * nranks][hidden], bf16 or e4m3 */
  void* recvScales;           /* FP8: [L][ceil(hidden/128)][M * nranks] fp32, or with useUe8m0
                                 [L][ceil(hidden/512)][M * nranks] int32 (column-major per expert) */
  int32_t* recvCount;         /* [L]: tokens each local expert received */
  int32_t* recvSrcInfo;       /* [L][M * nranks]: each row's token index at its source */
  int64_t* recvLayoutRange;   /* [L][nranks]: begin << 32 | count of each source's rows */
  int32_t* cumulativeRecvStats; /* [L], counts added to; or NULL */
} loomEpLowLatencyDispatchArgs_t;
/* Collective. hook NULL: returns with the tokens received. Else returns once this rank's tokens
 * are sent, with *hook to pass to loomEpHookWait, which receives them (at most two low-latency
 * calls may be outstanding; the outputs must stay valid until the hook ran). */
loomResult_t loomEpLowLatencyDispatch(loomEp_t ep, const loomEpLowLatencyDispatchArgs_t* args,
                                      int* hook, loomStream_t stream);

typedef struct {
  size_t size;                /* sizeof(loomEpLowLatencyCombineArgs_t) */
  const void* x;              /* bf16 [L][M * nranks][hidden]; NULL: already written into
                                 loomEpLowLatencyCombineBuffer's buffer (zero copy) */
  int hidden;
  int numTokens;              /* this rank's tokens at the dispatch */
  const int64_t* topkIdx;     /* [numTokens][topk], the dispatch's */
  const float* topkWeights;   /* [numTokens][topk]: combinedX[t] = sum over k of w[t][k] * row */
  int topk;
  const int32_t* srcInfo;     /* the dispatch's recvSrcInfo */
  const int64_t* layoutRange; /* the dispatch's recvLayoutRange */
  void* combinedX;            /* bf16 [numTokens][hidden] */
} loomEpLowLatencyCombineArgs_t;
loomResult_t loomEpLowLatencyCombine(loomEp_t ep, const loomEpLowLatencyCombineArgs_t* args,
                                     int* hook, loomStream_t stream);
/* Finishes a hooked low-latency call (collective in effect: it waits for the peers' data). */
loomResult_t loomEpHookWait(loomEp_t ep, int hook, loomStream_t stream);
/* The buffer the next low-latency call (a combine, with x NULL: zero copy) sends from,
 * [L][M * nranks][hidden] bf16: write the expert outputs there, at the rows the dispatch
 * received them. No peer reads it any more when this returns. Not offered on staged device
 * ranks (docs/ep.md). */
loomResult_t loomEpLowLatencyCombineBuffer(loomEp_t ep, int hidden, void** buffer);
/* Bytes of shared buffers a low-latency object of these sizes registers (DeepEP's
 * get_low_latency_rdma_size_hint); no communicator needed. */
loomResult_t loomEpLowLatencySizeHint(int maxTokensPerRank, int hidden, int nranks,
                                      int numExperts, size_t* bytes);

#if defined(__GNUC__)
#pragma GCC visibility pop
#endif

#ifdef __cplusplus
}
#endif
#endif /* LOOM_LOOM_H_ */
