// What a soak rank holds, counted from /proc (tests/soak/soak_rank.cpp, init_cycles.cpp).
#pragma once

#include <dirent.h>

#include <cstring>

namespace loom::soak {

// The entries of a /proc directory (descriptors, threads); -1 when it cannot be read.
inline int countEntries(const char* dir) {
  DIR* d = opendir(dir);
  if (d == nullptr) return -1;
  int n = 0;
  while (const dirent* e = readdir(d))
    if (e->d_name[0] != '.') ++n;
  closedir(d);
  return n - (std::strcmp(dir, "/proc/self/fd") == 0 ? 1 : 0);  // opendir's own
}

}  // namespace loom::soak
