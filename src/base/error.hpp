// Loom's one exception type and the check macros that throw it. Every C entry point catches
// loom::Error and turns it into its loomResult_t (src/api/), so nothing crosses the C boundary.
#pragma once

#include <sstream>
#include <stdexcept>
#include <string>

#include "loom/loom.h"

namespace loom {

class Error : public std::runtime_error {
 public:
  Error(loomResult_t code, const std::string& message, const char* file = "", int line = 0)
      : std::runtime_error(message), code_(code), file_(file), line_(line) {}
  loomResult_t code() const { return code_; }
  const char* file() const { return file_; }
  int line() const { return line_; }

 private:
  loomResult_t code_;
  const char* file_;
  int line_;
};

namespace detail {
template <typename... Args>
std::string concat(const Args&... args) {
  std::ostringstream out;
  (out << ... << args);
  return out.str();
}
}  // namespace detail

}  // namespace loom

// Throws loom::Error(code, message...) with the call site attached.
#define LOOM_THROW(code, ...) \
  throw ::loom::Error((code), ::loom::detail::concat(__VA_ARGS__), __FILE__, __LINE__)

// Argument checks: a failed check is the caller's fault and leaves the communicator usable.
#define LOOM_CHECK_ARG(cond, ...)                              \
  do {                                                         \
    if (!(cond)) LOOM_THROW(loomInvalidArgument, __VA_ARGS__); \
  } while (0)

// Loom's own invariants: a failure is a bug in Loom, not the caller's.
#define LOOM_CHECK_INTERNAL(cond, ...)                       \
  do {                                                       \
    if (!(cond)) LOOM_THROW(loomInternalError, __VA_ARGS__); \
  } while (0)

// Compares two values and reports both when they differ.
#define LOOM_CHECK_EQ(a, b, code, what)                                        \
  do {                                                                         \
    const auto& loomA_ = (a);                                                  \
    const auto& loomB_ = (b);                                                  \
    if (!(loomA_ == loomB_))                                                   \
      LOOM_THROW(code, what, ": " #a " = ", loomA_, " but " #b " = ", loomB_); \
  } while (0)

// A system call that returns -1 and sets errno.
#define LOOM_SYSCHECK(expr, what)                                                     \
  do {                                                                                \
    if ((expr) == -1) {                                                               \
      int loomErrno_ = errno;                                                         \
      LOOM_THROW(loomSystemError, what, ": ", ::loom::detail::errnoText(loomErrno_)); \
    }                                                                                 \
  } while (0)

namespace loom::detail {
std::string errnoText(int err);
}
