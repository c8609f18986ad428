#include "loomrun_output.hpp"

#include <poll.h>
#include <unistd.h>

#include <cerrno>

namespace loom::launcher {
namespace {

// A rank that prints megabytes without a newline must not make loomrun buffer without bound; past
// this size the partial line is written out as if it were complete.
constexpr size_t kMaxLineBytes = 1 << 20;

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

}  // namespace loom::launcher
