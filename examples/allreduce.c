/* The smallest Loom program: every rank adds its rank number into a vector.
 * Run: loomrun -n 4 -- ./allreduce_example */
#include <loom/loom.h>
#include <stdio.h>
#include <stdlib.h>

#define CHECK(call)                                                         \
  do {                                                                      \
    loomResult_t r_ = (call);                                               \
    if (r_ != loomSuccess) {                                                \
      fprintf(stderr, "%s failed: %s: %s\n", #call, loomGetErrorString(r_), \
              loomGetLastError(NULL));                                      \
      exit(1);                                                              \
    }                                                                       \
  } while (0)

int main(void) {
  loomComm_t comm;
  CHECK(loomCommInitFromEnv(&comm, NULL));
  int rank, nranks;
  CHECK(loomCommUserRank(comm, &rank));
  CHECK(loomCommCount(comm, &nranks));

  float data[4];
  for (int i = 0; i < 4; ++i) data[i] = (float)(rank + i);
  CHECK(loomAllReduce(data, data, 4, loomFloat32, loomSum, comm, NULL));

  /* sum over ranks of (rank + i) = n(n-1)/2 + n*i */
  for (int i = 0; i < 4; ++i) {
    float expected = nranks * (nranks - 1) / 2.0f + (float)(nranks * i);
    if (data[i] != expected) {
      fprintf(stderr, "rank %d: data[%d] = %g, expected %g\n", rank, i, data[i], expected);
      return 1;
    }
  }
  if (rank == 0)
    printf("allreduce over %d ranks: %g %g %g %g\n", nranks, data[0], data[1], data[2], data[3]);
  CHECK(loomCommDestroy(comm));
  return 0;
}
