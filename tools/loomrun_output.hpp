// Line-at-a-time forwarding of rank output to loomrun's own stdout/stderr.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace loom::launcher {

// One of loomrun's output descriptors. Once a write fails for good (EPIPE when the reader went
// away) later output is dropped instead of failing again on every line: the ranks keep running
// and are still supervised, which matters more than their output.
class OutputSink {
 public:
  explicit OutputSink(int fd) : fd_(fd) {}
  void write(std::string_view data);

 private:
  int fd_;
  bool broken_ = false;
};

// Splits one rank stream into lines and writes each complete line, prefixed, with a single
// write(2) so that lines of different ranks never mix. Several complete lines from one read are
// batched into one write; that keeps each line whole while saving syscalls on chatty ranks.
class LineForwarder {
 public:
  // prefix is e.g. "[3] "; empty for --no-prefix, which then passes bytes through unchanged.
  LineForwarder(OutputSink* sink, std::string prefix);

  void feed(const char* data, size_t size);
  // Writes a final line that had no newline (the stream reached EOF).
  void finish();

 private:
  // Breaks the unterminated tail of `pending_` out as its own line. With a prefix the output is
  // line-oriented, so a newline is added; without one the bytes are left as they are.
  void flushPartial(std::string& batch);

  OutputSink* sink_;
  std::string prefix_;
  std::string pending_;  // bytes after the last newline seen
};

}  // namespace loom::launcher
