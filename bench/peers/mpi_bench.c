/* mpi_bench: the MPI peer of loom-bench. Same flags (a subset), same byte conventions, same
 * timing method (barrier, then back-to-back calls, slowest rank reported), same --csv format,
 * so bench/tables.py can set the two side by side.
 *
 * Usage: mpirun -np N mpi_bench OP [-b MIN] [-e MAX] [-f FACTOR] [-n ITERS] [-w WARMUP]
 *                                  [-d float|double|int32] [-o sum|prod|max|min] [-r ROOT] [--csv]
 * OP: allreduce allgather reducescatter broadcast reduce alltoall.
 * Sizes are total bytes as in nccl-tests: the whole gathered array for allgather and
 * reducescatter, the whole send buffer for alltoall. Out-of-place only (in-place columns nan).
 */
#define _POSIX_C_SOURCE 200809L
#include <limits.h>
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef enum { kAllReduce, kAllGather, kReduceScatter, kBroadcast, kReduce, kAllToAll } Op;

typedef struct {
  Op op;
  const char* opName;
  size_t minBytes, maxBytes;
  double factor;
  int iters, warmup, root, csv;
  MPI_Datatype type;
  const char* typeName;
  int typeSize;
  MPI_Op redop;
  const char* redopName;
} Options;

static int gRank = 0, gNranks = 1;

static void fail(const char* message) {
  if (gRank == 0) fprintf(stderr, "mpi_bench: %s\n", message);
  MPI_Abort(MPI_COMM_WORLD, 2);
  exit(2);
}

static size_t parseSize(const char* text) {
  char* end = NULL;
  double value = strtod(text, &end);
  if (end == text || value < 0) fail("bad size");
  switch (*end) {
    case 'k':
    case 'K':
      value *= 1024.0;
      break;
    case 'm':
    case 'M':
      value *= 1024.0 * 1024.0;
      break;
    case 'g':
    case 'G':
      value *= 1024.0 * 1024.0 * 1024.0;
      break;
    case '\0':
      break;
    default:
      fail("bad size suffix");
  }
  return (size_t)value;
}

static void parseArgs(int argc, char** argv, Options* o) {
  static const char* kOps[] = {"allreduce", "allgather", "reducescatter",
                               "broadcast", "reduce",    "alltoall"};
  memset(o, 0, sizeof(*o));
  o->minBytes = 8;
  o->maxBytes = 256u << 20;
  o->factor = 2;
  o->iters = 20;
  o->warmup = 5;
  o->type = MPI_FLOAT;
  o->typeName = "float";
  o->typeSize = 4;
  o->redop = MPI_SUM;
  o->redopName = "sum";
  if (argc < 2) fail("usage: mpi_bench OP [-b MIN -e MAX -f F -n ITERS -w WARMUP -d T -o OP]");
  int found = 0;
  for (int i = 0; i < 6; ++i) {
    if (strcmp(argv[1], kOps[i]) == 0) {
      o->op = (Op)i;
      o->opName = kOps[i];
      found = 1;
    }
  }
  if (!found) fail("unknown op (allreduce allgather reducescatter broadcast reduce alltoall)");
  for (int i = 2; i < argc; ++i) {
    const char* a = argv[i];
    if (strcmp(a, "--csv") == 0) {
      o->csv = 1;
      continue;
    }
    if (i + 1 >= argc) fail("flag without a value");
    const char* v = argv[++i];
    if (strcmp(a, "-b") == 0) {
      o->minBytes = parseSize(v);
    } else if (strcmp(a, "-e") == 0) {
      o->maxBytes = parseSize(v);
    } else if (strcmp(a, "-f") == 0) {
      o->factor = atof(v);
    } else if (strcmp(a, "-n") == 0) {
      o->iters = atoi(v);
    } else if (strcmp(a, "-w") == 0) {
      o->warmup = atoi(v);
    } else if (strcmp(a, "-r") == 0) {
      o->root = atoi(v);
    } else if (strcmp(a, "-c") == 0) {
      /* Accepted for command-line compatibility with loom-bench; MPI results are not checked. */
    } else if (strcmp(a, "-d") == 0) {
      if (strcmp(v, "float") == 0) {
        o->type = MPI_FLOAT, o->typeSize = 4;
      } else if (strcmp(v, "double") == 0) {
        o->type = MPI_DOUBLE, o->typeSize = 8;
      } else if (strcmp(v, "int32") == 0) {
        o->type = MPI_INT32_T, o->typeSize = 4;
      } else {
        fail("-d takes float, double or int32");
      }
      o->typeName = v;
    } else if (strcmp(a, "-o") == 0) {
      if (strcmp(v, "sum") == 0)
        o->redop = MPI_SUM;
      else if (strcmp(v, "prod") == 0)
        o->redop = MPI_PROD;
      else if (strcmp(v, "max") == 0)
        o->redop = MPI_MAX;
      else if (strcmp(v, "min") == 0)
        o->redop = MPI_MIN;
      else
        fail("-o takes sum, prod, max or min");
      o->redopName = v;
    } else {
      fail("unknown flag");
    }
  }
  if (o->factor <= 1.0) fail("-f must be > 1");
  if (o->iters < 1 || o->warmup < 0) fail("bad -n or -w");
  if (o->root < 0 || o->root >= gNranks) fail("bad root");
  if (o->maxBytes < o->minBytes) o->maxBytes = o->minBytes;
}

/* The count argument the call takes, and the bytes actually moved (the reported size). */
static size_t callCount(const Options* o, size_t bytes, size_t* usedBytes) {
  size_t elems = bytes / (size_t)o->typeSize;
  size_t count = elems;
  size_t used = elems;
  if (o->op == kAllGather || o->op == kReduceScatter || o->op == kAllToAll) {
    count = elems / (size_t)gNranks;
    used = count * (size_t)gNranks;
  }
  *usedBytes = used * (size_t)o->typeSize;
  return count;
}

static double busFactor(Op op) {
  double n = gNranks;
  switch (op) {
    case kAllReduce:
      return 2.0 * (n - 1) / n;
    case kAllGather:
    case kReduceScatter:
    case kAllToAll:
      return (n - 1) / n;
    default:
      return 1.0;
  }
}

static void runOnce(const Options* o, const void* send, void* recv, size_t count) {
  if (count > (size_t)INT_MAX) fail("count exceeds MPI's int range");
  int c = (int)count;
  switch (o->op) {
    case kAllReduce:
      MPI_Allreduce(send, recv, c, o->type, o->redop, MPI_COMM_WORLD);
      break;
    case kAllGather:
      MPI_Allgather(send, c, o->type, recv, c, o->type, MPI_COMM_WORLD);
      break;
    case kReduceScatter:
      MPI_Reduce_scatter_block(send, recv, c, o->type, o->redop, MPI_COMM_WORLD);
      break;
    case kBroadcast:
      MPI_Bcast(recv, c, o->type, o->root, MPI_COMM_WORLD);
      break;
    case kReduce:
      MPI_Reduce(send, recv, c, o->type, o->redop, o->root, MPI_COMM_WORLD);
      break;
    case kAllToAll:
      MPI_Alltoall(send, c, o->type, recv, c, o->type, MPI_COMM_WORLD);
      break;
  }
}

static void* allocTouched(size_t bytes) {
  void* p = NULL;
  size_t rounded = (bytes + 63) / 64 * 64;
  if (posix_memalign(&p, 64, rounded ? rounded : 64) != 0) fail("out of memory");
  /* Small integers are exact in every type, so reductions never hit inf/NaN slow paths. */
  memset(p, 0, rounded);
  return p;
}

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &gRank);
  MPI_Comm_size(MPI_COMM_WORLD, &gNranks);
  Options o;
  parseArgs(argc, argv, &o);

  void* send = allocTouched(o.maxBytes);
  void* recv = allocTouched(o.maxBytes);
  const char* rootText = (o.op == kBroadcast || o.op == kReduce) ? NULL : "-1";
  const char* redopText =
      (o.op == kAllReduce || o.op == kReduceScatter || o.op == kReduce) ? o.redopName : "none";
  if (gRank == 0) {
    if (o.csv) {
      printf(
          "op,nranks,bytes,count,dtype,redop,root,algo,oop_us,oop_algbw,oop_busbw,oop_wrong,"
          "ip_us,ip_algbw,ip_busbw,ip_wrong\n");
    } else {
      int major, minor;
      MPI_Get_version(&major, &minor);
      printf(
          "# mpi_bench %s nranks %d MPI %d.%d minBytes %zu maxBytes %zu step %g "
          "warmup %d iters %d\n",
          o.opName, gNranks, major, minor, o.minBytes, o.maxBytes, o.factor, o.warmup, o.iters);
      printf("#%11s  %12s  %8s  %6s  %6s  %7s  %6s  %6s\n", "size", "count", "type", "redop",
             "root", "time", "algbw", "busbw");
      printf("#%11s  %12s  %8s  %6s  %6s  %7s  %6s  %6s\n", "(B)", "(elements)", "", "", "", "(us)",
             "(GB/s)", "(GB/s)");
    }
  }

  double busSum = 0;
  int rows = 0;
  for (double s = (double)o.minBytes; s <= (double)o.maxBytes * 1.0000001; s *= o.factor) {
    size_t used;
    size_t count = callCount(&o, (size_t)s, &used);
    if (count == 0) continue;
    for (int i = 0; i < o.warmup; ++i) runOnce(&o, send, recv, count);
    MPI_Barrier(MPI_COMM_WORLD);
    double t0 = MPI_Wtime();
    for (int i = 0; i < o.iters; ++i) runOnce(&o, send, recv, count);
    double seconds = (MPI_Wtime() - t0) / o.iters;
    MPI_Allreduce(MPI_IN_PLACE, &seconds, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    double algbw = (double)used / seconds / 1e9;
    double busbw = algbw * busFactor(o.op);
    busSum += busbw;
    ++rows;
    if (gRank != 0) continue;
    char root[16];
    snprintf(root, sizeof(root), "%d", o.root);
    if (o.csv) {
      printf("%s,%d,%zu,%zu,%s,%s,%s,mpi,%.3f,%.4f,%.4f,0,nan,nan,nan,nan\n", o.opName, gNranks,
             used, used / (size_t)o.typeSize, o.typeName, redopText, rootText ? rootText : root,
             seconds * 1e6, algbw, busbw);
    } else {
      printf("%12zu  %12zu  %8s  %6s  %6s  %7.2f  %6.2f  %6.2f\n", used, used / (size_t)o.typeSize,
             o.typeName, redopText, rootText ? rootText : root, seconds * 1e6, algbw, busbw);
    }
    fflush(stdout);
  }
  if (gRank == 0 && !o.csv) printf("# Avg bus bandwidth    : %g\n", rows ? busSum / rows : 0.0);
  free(send);
  free(recv);
  MPI_Finalize();
  return 0;
}
