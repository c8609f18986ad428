// Formatted writing to a file descriptor through a fixed buffer, with nothing but write(2): no
// allocation, no locks, no stdio. Safe inside a signal handler (the flight recorder's dumps on a
// fatal signal or SIGUSR2 use it) and cheap anywhere else. Errors are remembered, not thrown.
#pragma once

#include <unistd.h>

#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstring>

namespace loom {

// All of data[0, size) to fd, through short writes and EINTR; false at the first other failure.
// Signal-safe (write(2) only).
inline bool writeAll(int fd, const char* data, size_t size) {
  size_t done = 0;
  while (done < size) {
    const ssize_t n = ::write(fd, data + done, size - done);
    if (n > 0) {
      done += static_cast<size_t>(n);
    } else if (n < 0 && errno == EINTR) {
      continue;
    } else {
      return false;
    }
  }
  return true;
}

class FdWriter {
 public:
  explicit FdWriter(int fd) : fd_(fd) {}
  ~FdWriter() { flush(); }
  FdWriter(const FdWriter&) = delete;
  FdWriter& operator=(const FdWriter&) = delete;

  FdWriter& raw(const char* text) { return raw(text, std::strlen(text)); }
  FdWriter& raw(const char* text, size_t n) {
    for (size_t i = 0; i < n; ++i) put(text[i]);
    return *this;
  }
  FdWriter& uint(uint64_t v) {
    char digits[24];
    int n = 0;
    do {
      digits[n++] = static_cast<char>('0' + v % 10);
      v /= 10;
    } while (v != 0);
    while (n > 0) put(digits[--n]);
    return *this;
  }
  FdWriter& integer(int64_t v) {
    if (v < 0) {
      put('-');
      return uint(static_cast<uint64_t>(0) - static_cast<uint64_t>(v));
    }
    return uint(static_cast<uint64_t>(v));
  }
  // Microseconds with three decimals, from nanoseconds (Chrome trace timestamps).
  FdWriter& micros(int64_t ns) {
    if (ns < 0) {
      put('-');
      ns = -ns;
    }
    uint(static_cast<uint64_t>(ns) / 1000);
    put('.');
    const uint64_t frac = static_cast<uint64_t>(ns) % 1000;
    put(static_cast<char>('0' + frac / 100));
    put(static_cast<char>('0' + frac / 10 % 10));
    put(static_cast<char>('0' + frac % 10));
    return *this;
  }
  FdWriter& hex(uint64_t v, int digits) {
    for (int i = digits - 1; i >= 0; --i) put("0123456789abcdef"[(v >> (4 * i)) & 0xf]);
    return *this;
  }
  // A JSON string, quoted and escaped; null is written as the empty string.
  FdWriter& string(const char* s) {
    put('"');
    for (; s != nullptr && *s != '\0'; ++s) {
      const unsigned char c = static_cast<unsigned char>(*s);
      if (c == '"' || c == '\\') {
        put('\\');
        put(static_cast<char>(c));
      } else if (c < 0x20) {
        raw("\\u00");
        hex(c, 2);
      } else {
        put(static_cast<char>(c));
      }
    }
    put('"');
    return *this;
  }
  // "key": (with a comma before it unless it is the first key of its object: `first`).
  FdWriter& key(const char* name, bool& first) {
    if (!first) put(',');
    first = false;
    string(name);
    put(':');
    return *this;
  }
  bool flush() {
    if (!failed_ && !writeAll(fd_, buffer_, used_)) failed_ = true;
    used_ = 0;
    return !failed_;
  }
  bool failed() const { return failed_; }

 private:
  void put(char c) {
    if (used_ == sizeof(buffer_)) flush();
    buffer_[used_++] = c;
  }
  int fd_;
  size_t used_ = 0;
  bool failed_ = false;
  char buffer_[4096];
};

}  // namespace loom
