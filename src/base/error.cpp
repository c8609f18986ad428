#include "base/error.hpp"

#include <cstdio>
#include <cstring>

namespace loom::detail {

std::string errnoText(int err) {
  char buf[256];
  // GNU strerror_r may return a static string instead of filling buf.
  const char* text = strerror_r(err, buf, sizeof(buf));
  // Formatted in one buffer: GCC 12 warns falsely (-Wrestrict) on std::string appends here at
  // -O3.
  char out[320];
  std::snprintf(out, sizeof(out), "%s (errno %d)", text, err);
  return out;
}

}  // namespace loom::detail
