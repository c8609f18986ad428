// The command-line helpers that Loom's small tools (loom-hetero-bench, loom-check-cost) share:
// exit with a message, stop at a failed Loom call, and read a size as loom-bench does.
#pragma once

#include <cstdio>
#include <cstdlib>
#include <string>

#include "bench_options.hpp"
#include "loom/loom.h"

namespace loom::tool {

[[noreturn]] inline void die(const char* tool, const std::string& why) {
  std::fprintf(stderr, "%s: %s\n", tool, why.c_str());
  std::exit(2);
}

inline void ok(const char* tool, loomResult_t r, const char* what) {
  if (r != loomSuccess) die(tool, std::string(what) + ": " + loomGetLastError(nullptr));
}

// "8", "64K", "1.5M", "2G" (bench::parseSize); anything else ends the tool with a message.
inline size_t sizeArg(const char* tool, const char* text) {
  size_t bytes = 0;
  if (!bench::parseSize(text, &bytes)) die(tool, std::string("bad size '") + text + "'");
  return bytes;
}

}  // namespace loom::tool
