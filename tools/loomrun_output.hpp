// Line-at-a-time forwarding of rank output to loomrun's own stdout/stderr, and the line of a
// rank's stderr that its failure summary quotes.
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

// Reads a rank's stderr as it comes and keeps the line that says why the rank failed: the first
// line that reads like an error, except that a Python traceback is named by its exception line
// ("ValueError: bad input"), which Python prints after the frames, not by its header. Of chained
// tracebacks ("During handling of the above exception ...") the first exception, the root cause.
// Without any such line: the first line of the stream.
class FailureLine {
 public:
  void feed(const char* data, size_t size);
  // Nothing later in the stream can change line().
  bool settled() const { return !error_.empty(); }
  // "" when the stream had no line at all.
  std::string line() const;

 private:
  void take(const std::string& line);

  std::string partial_;  // bytes after the last newline seen
  std::string first_;
  std::string error_;
  // Inside a traceback: its header, and what precedes "Traceback" on that line (a launcher's
  // "[rank0]: "), which the frames and the exception line carry too.
  std::string tracebackHeader_;
  std::string tracebackPrefix_;
};

// Whether a line of a rank's stderr reads like the reason it failed.
bool looksLikeError(const std::string& line);

}  // namespace loom::launcher
