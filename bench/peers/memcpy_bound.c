/* memcpy_bound: what P concurrent processes get from this machine's memory system, as the bounds
 * of a shared-memory collective run by P ranks (whose loads and stores those same P processes
 * issue).
 *
 * Two measurements per size, each process on private buffers, all starting at the same instant
 * (each reports ready, then blocks on a pipe the parent closes once all are ready) so that they
 * really contend for memory bandwidth:
 * - copy: each process copies S bytes (memcpy). A reference for what moving bytes costs.
 * - write: each process writes S bytes, with plain stores (memset) and with non-temporal stores
 *   (no read for ownership), the faster of the two. A true bound: every rank of an allreduce or
 *   allgather of S bytes must write its S bytes of output, and no process writes them faster than
 *   one doing nothing else. (memcpy is no such bound: a collective that streams its output, or
 *   whose ranks read the same source lines through a shared cache, can beat a private memcpy.)
 *
 * Usage: memcpy_bound [-p P] [-s BYTES] [-n ITERS] [-b MIN -e MAX -f FACTOR] [--csv]
 *   -s sizes one buffer (default 256M); -b/-e/-f sweep sizes instead, so that small messages
 *   can be compared with the cache bandwidth they actually see. Sizes accept K/M/G.
 *   --csv prints loom-bench's CSV format: per size a row of op "memcpy" (algbw = aggregate copy
 *   GB/s, busbw = mean per-process copy GB/s) and one of op "write" (the same for writes).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#if defined(__SSE2__)
#include <emmintrin.h>
#endif

typedef struct {
  double start; /* CLOCK_MONOTONIC seconds, comparable across processes */
  double end;
  double bytes; /* bytes copied (not counting the reads) */
} CopyResult;

static void die(const char* what) {
  fprintf(stderr, "memcpy_bound: %s: %s\n", what, strerror(errno));
  exit(1);
}

static double nowSeconds(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static size_t parseSize(const char* text) {
  char* end = NULL;
  double value = strtod(text, &end);
  if (end == text || value < 0) {
    fprintf(stderr, "memcpy_bound: bad size '%s'\n", text);
    exit(2);
  }
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
      fprintf(stderr, "memcpy_bound: bad size suffix in '%s'\n", text);
      exit(2);
  }
  return (size_t)value;
}

/* Small copies finish in nanoseconds; repeating them until a few hundred MiB have moved keeps
 * the clock's resolution and the start skew between processes out of the result. */
static long itersFor(size_t bytes, long minIters) {
  const double target = 256.0 * 1024 * 1024;
  double scaled = target / (double)(bytes ? bytes : 1);
  long iters = scaled > (double)minIters ? (long)scaled : minIters;
  return iters > 100000000L ? 100000000L : iters;
}

static void writeAll(int fd, const void* data, size_t len) {
  const char* p = (const char*)data;
  while (len > 0) {
    ssize_t n = write(fd, p, len);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) die("write");
    p += n;
    len -= (size_t)n;
  }
}

static int readAll(int fd, void* data, size_t len) {
  char* p = (char*)data;
  while (len > 0) {
    ssize_t n = read(fd, p, len);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return -1;
    p += n;
    len -= (size_t)n;
  }
  return 0;
}

typedef enum { kCopy, kWrite, kStream } Mode;

/* S bytes written with non-temporal stores: no read for ownership, nothing left in the caches. */
static void streamWrite(char* dst, size_t bytes) {
#if defined(__SSE2__)
  const __m128i value = _mm_set1_epi8(0x5a);
  size_t i = 0;
  for (; i + 64 <= bytes; i += 64) {
    _mm_stream_si128((__m128i*)(dst + i), value);
    _mm_stream_si128((__m128i*)(dst + i + 16), value);
    _mm_stream_si128((__m128i*)(dst + i + 32), value);
    _mm_stream_si128((__m128i*)(dst + i + 48), value);
  }
  _mm_sfence();
  memset(dst + i, 0x5a, bytes - i);
#else
  memset(dst, 0x5a, bytes);
#endif
}

static void child(Mode mode, size_t bytes, long iters, int readyFd, int goFd, int resultFd) {
  char* src = NULL;
  char* dst = NULL;
  if (posix_memalign((void**)&src, 4096, bytes ? bytes : 1) != 0) die("posix_memalign");
  if (posix_memalign((void**)&dst, 4096, bytes ? bytes : 1) != 0) die("posix_memalign");
  /* First-touch both buffers so page faults are not timed. */
  memset(src, 0x5a, bytes);
  memset(dst, 0, bytes);
  memcpy(dst, src, bytes);

  char token = 'r';
  writeAll(readyFd, &token, 1);
  if (read(goFd, &token, 1) != 0) die("start pipe"); /* EOF is the start signal */
  CopyResult result;
  result.start = nowSeconds();
  for (long i = 0; i < iters; ++i) {
    if (mode == kCopy)
      memcpy(dst, src, bytes);
    else if (mode == kWrite)
      memset(dst, (int)i, bytes);
    else
      streamWrite(dst, bytes);
    /* Keep the compiler from treating repeated identical copies as one. */
    __asm__ __volatile__("" : : "r"(dst) : "memory");
  }
  result.end = nowSeconds();
  result.bytes = (double)bytes * (double)iters;
  writeAll(resultFd, &result, sizeof(result));
  free(src);
  free(dst);
  _exit(0);
}

/* Runs P concurrent copiers of `bytes` each; fills aggregate and per-process GB/s. */
static void measure(Mode mode, int procs, size_t bytes, long iters, int verbose,
                    double* aggregateGbps, double* perProcGbps, double* usPerCopy) {
  int readyPipe[2], goPipe[2], resultPipe[2];
  if (pipe(readyPipe) != 0 || pipe(goPipe) != 0 || pipe(resultPipe) != 0) die("pipe");
  for (int p = 0; p < procs; ++p) {
    pid_t pid = fork();
    if (pid < 0) die("fork");
    if (pid == 0) {
      close(readyPipe[0]);
      close(goPipe[1]);
      close(resultPipe[0]);
      child(mode, bytes, iters, readyPipe[1], goPipe[0], resultPipe[1]);
    }
  }
  close(readyPipe[1]);
  close(goPipe[0]);
  close(resultPipe[1]);
  /* Start only once every child has touched its buffers, so all copies overlap. */
  for (int p = 0; p < procs; ++p) {
    char token;
    if (readAll(readyPipe[0], &token, 1) != 0) {
      fprintf(stderr, "memcpy_bound: a copier died before starting\n");
      exit(1);
    }
  }
  close(readyPipe[0]);
  close(goPipe[1]);

  double firstStart = 1e300, lastEnd = 0, totalBytes = 0, sumRates = 0, sumSeconds = 0;
  for (int p = 0; p < procs; ++p) {
    CopyResult r;
    if (readAll(resultPipe[0], &r, sizeof(r)) != 0) {
      fprintf(stderr, "memcpy_bound: a copier died\n");
      exit(1);
    }
    double seconds = r.end - r.start;
    double rate = r.bytes / seconds / 1e9;
    if (verbose && mode == kCopy) {
      printf("#   process %2d: %8.2f GB/s copied (%8.2f GB/s read+write)\n", p, rate, 2 * rate);
    }
    if (r.start < firstStart) firstStart = r.start;
    if (r.end > lastEnd) lastEnd = r.end;
    totalBytes += r.bytes;
    sumRates += rate;
    sumSeconds += seconds;
  }
  close(resultPipe[0]);
  for (int p = 0; p < procs; ++p) {
    int status = 0;
    if (wait(&status) < 0) die("wait");
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
      fprintf(stderr, "memcpy_bound: a copier failed\n");
      exit(1);
    }
  }
  /* Aggregate over the whole window in which any copier ran: conservative when starts skew. */
  *aggregateGbps = totalBytes / (lastEnd - firstStart) / 1e9;
  *perProcGbps = sumRates / procs;
  *usPerCopy = sumSeconds / procs / (double)iters * 1e6;
}

static void usage(void) {
  fprintf(stderr,
          "usage: memcpy_bound [-p PROCS] [-s BYTES] [-n ITERS] [-b MIN -e MAX -f FACTOR] "
          "[--csv]\n");
  exit(2);
}

int main(int argc, char** argv) {
  int procs = 1;
  size_t size = 256u << 20, minBytes = 0, maxBytes = 0;
  long minIters = 10;
  double factor = 2;
  int csv = 0;
  for (int i = 1; i < argc; ++i) {
    const char* a = argv[i];
    const char* v = i + 1 < argc ? argv[i + 1] : NULL;
    if (strcmp(a, "--csv") == 0) {
      csv = 1;
      continue;
    }
    if (!v) usage();
    if (strcmp(a, "-p") == 0)
      procs = atoi(v);
    else if (strcmp(a, "-s") == 0)
      size = parseSize(v);
    else if (strcmp(a, "-n") == 0)
      minIters = atol(v);
    else if (strcmp(a, "-b") == 0)
      minBytes = parseSize(v);
    else if (strcmp(a, "-e") == 0)
      maxBytes = parseSize(v);
    else if (strcmp(a, "-f") == 0)
      factor = atof(v);
    else
      usage();
    ++i;
  }
  if (procs < 1 || minIters < 1 || factor <= 1.0) usage();
  if (minBytes == 0 && maxBytes == 0) minBytes = maxBytes = size;
  if (minBytes == 0) minBytes = maxBytes;
  if (maxBytes < minBytes) maxBytes = minBytes;

  if (csv) {
    printf(
        "op,nranks,bytes,count,dtype,redop,root,algo,oop_us,oop_algbw,oop_busbw,oop_wrong,"
        "ip_us,ip_algbw,ip_busbw,ip_wrong\n");
  } else {
    printf("# memcpy_bound: %d concurrent processes, each copying a private buffer\n", procs);
  }
  /* -e is inclusive, as in loom-bench: the last step is maxBytes where the factor steps over it. */
  for (double s = (double)minBytes; s <= (double)maxBytes * 1.0000001;
       s = (s < (double)maxBytes && s * factor > (double)maxBytes * 1.0000001) ? (double)maxBytes
                                                                               : s * factor) {
    size_t bytes = (size_t)s;
    long iters = minIters;
    /* A single size (-s) honors -n exactly; a sweep scales iterations per size. */
    if (minBytes != maxBytes) iters = itersFor(bytes, minIters);
    double aggregate, perProc, us;
    if (!csv) printf("# size %zu bytes, %ld iterations\n", bytes, iters);
    measure(kCopy, procs, bytes, iters, !csv, &aggregate, &perProc, &us);
    /* The write bound: the faster of plain and non-temporal stores at this size. */
    double wAggregate, wPerProc, wUs, sAggregate, sPerProc, sUs;
    measure(kWrite, procs, bytes, iters, 0, &wAggregate, &wPerProc, &wUs);
    measure(kStream, procs, bytes, iters, 0, &sAggregate, &sPerProc, &sUs);
    if (sPerProc > wPerProc) {
      wAggregate = sAggregate;
      wPerProc = sPerProc;
      wUs = sUs;
    }
    if (csv) {
      printf("memcpy,%d,%zu,%zu,uint8,none,-1,memcpy,%.3f,%.3f,%.3f,0,nan,nan,nan,nan\n", procs,
             bytes, bytes, us, aggregate, perProc);
      printf("write,%d,%zu,%zu,uint8,none,-1,%s,%.3f,%.3f,%.3f,0,nan,nan,nan,nan\n", procs, bytes,
             bytes, sPerProc > wPerProc ? "stream" : "memset", wUs, wAggregate, wPerProc);
    } else {
      printf(
          "%12zu bytes  aggregate %8.2f GB/s copied (%8.2f GB/s read+write)  "
          "per process %8.2f GB/s (%8.2f read+write); written: per process %8.2f GB/s\n",
          bytes, aggregate, 2 * aggregate, perProc, 2 * perProc, wPerProc);
    }
    fflush(stdout);
    if (minBytes == maxBytes || bytes >= maxBytes) break;
  }
  return 0;
}
