#include "loomrun_output.hpp"

#include <poll.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>

namespace loom::launcher {
namespace {

// A rank that prints megabytes without a newline must not make loomrun buffer without bound; past
// this size the partial line is written out as if it were complete.
constexpr size_t kMaxLineBytes = 1 << 20;
// The failure summary quotes one line; a longer one is not kept whole.
constexpr size_t kMaxFailureLineBytes = 4096;
constexpr const char* kTracebackHeader = "Traceback (most recent call last):";

}  // namespace

void OutputSink::write(std::string_view data) {
  while (!broken_ && !data.empty()) {
    ssize_t n = ::write(fd_, data.data(), data.size());
    if (n > 0) {
      data.remove_prefix(static_cast<size_t>(n));
    } else if (n < 0 && errno == EINTR) {
      continue;
    } else if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      // Our stdout may be a non-blocking descriptor shared with the parent shell; changing its
      // flags would affect them, so wait for room instead.
      pollfd pfd{fd_, POLLOUT, 0};
      ::poll(&pfd, 1, -1);
    } else {
      broken_ = true;
    }
  }
}

LineForwarder::LineForwarder(OutputSink* sink, std::string prefix)
    : sink_(sink), prefix_(std::move(prefix)) {}

void LineForwarder::feed(const char* data, size_t size) {
  std::string batch;
  std::string_view input(data, size);
  while (!input.empty()) {
    size_t newline = input.find('\n');
    if (newline == std::string_view::npos) {
      pending_.append(input);
      if (pending_.size() >= kMaxLineBytes) flushPartial(batch);
      break;
    }
    batch += prefix_;
    batch += pending_;
    batch.append(input.substr(0, newline + 1));
    pending_.clear();
    input.remove_prefix(newline + 1);
  }
  if (!batch.empty()) sink_->write(batch);
}

void LineForwarder::finish() {
  std::string batch;
  flushPartial(batch);
  if (!batch.empty()) sink_->write(batch);
}

void LineForwarder::flushPartial(std::string& batch) {
  if (pending_.empty()) return;
  batch += prefix_;
  batch += pending_;
  if (!prefix_.empty()) batch += '\n';
  pending_.clear();
}

bool looksLikeError(const std::string& line) {
  std::string lower = line;
  std::transform(lower.begin(), lower.end(), lower.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  for (const char* word : {"error", "fail", "exception", "traceback", "abort", "terminate"}) {
    if (lower.find(word) != std::string::npos) return true;
  }
  return false;
}

void FailureLine::feed(const char* data, size_t size) {
  if (settled()) return;
  partial_.append(data, size);
  size_t start = 0;
  for (size_t nl; !settled() && (nl = partial_.find('\n', start)) != std::string::npos;
       start = nl + 1)
    take(partial_.substr(start, nl - start));
  partial_.erase(0, start);
  if (settled() || partial_.size() > kMaxFailureLineBytes) partial_.clear();
}

void FailureLine::take(const std::string& line) {
  if (first_.empty()) first_ = line;
  if (!tracebackHeader_.empty()) {
    // Frames ("  File ...", source lines, ^^^ markers) are indented; the exception line is not.
    if (line.size() <= tracebackPrefix_.size() ||
        line.compare(0, tracebackPrefix_.size(), tracebackPrefix_) != 0)
      return;
    const char next = line[tracebackPrefix_.size()];
    if (next != ' ' && next != '\t') error_ = line;
    return;
  }
  const size_t header = line.find(kTracebackHeader);
  if (header != std::string::npos) {
    tracebackHeader_ = line;
    tracebackPrefix_ = line.substr(0, header);
    return;
  }
  if (looksLikeError(line)) error_ = line;
}

std::string FailureLine::line() const {
  if (!error_.empty()) return error_;
  return !tracebackHeader_.empty() ? tracebackHeader_ : first_;
}

}  // namespace loom::launcher
