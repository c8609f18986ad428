/* Links against the installed library and runs one allreduce on however many ranks it gets. */
#include <loom/loom.h>
#include <stdio.h>

int main(void) {
  int version = 0;
  loomComm_t comm;
  if (loomGetVersion(&version) != loomSuccess || version != LOOM_VERSION_CODE) return 1;
  if (loomCommInitFromEnv(&comm, NULL) != loomSuccess) {
    fprintf(stderr, "init: %s\n", loomGetLastError(NULL));
    return 1;
  }
  int n = 0;
  loomCommCount(comm, &n);
  long one = 1, total = 0;
  if (loomAllReduce(&one, &total, 1, loomInt64, loomSum, comm, NULL) != loomSuccess) return 1;
  loomCommDestroy(comm);
  if (total != n) return 1;
  printf("consumer ok: %ld ranks\n", total);
  return 0;
}
