#include "base/error.hpp"

#include <cstring>

namespace loom::detail {

std::string errnoText(int err) {
  char buf[256];
  // GNU strerror_r may return a static string instead of filling buf.
  const char* text = strerror_r(err, buf, sizeof(buf));
  // Appended piecewise: GCC 12 warns falsely (-Wrestrict) on the chained operator+ form.
  std::string out(text);
  out += " (errno ";
  out += std::to_string(err);
  out += ')';
  return out;
}

}  // namespace loom::detail
