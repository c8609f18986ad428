#include "bootstrap/fd_passing.hpp"

#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstddef>
#include <cstring>
#include <memory>
#include <vector>

#include "base/error.hpp"

namespace loom {

namespace {

struct Request {
  uint64_t key;
};

struct Header {
  uint32_t found;
  uint32_t reserved;
  uint64_t count;         // descriptors that follow
  uint64_t payloadBytes;  // sent first, in messages of at most kPayloadPart bytes
};

constexpr size_t kPayloadPart = 64 * 1024;
// Sanity bounds on what a client accepts (a 80 GiB buffer in 2 MiB allocations is 40960).
constexpr uint64_t kMaxCount = 1 << 20;
constexpr uint64_t kMaxPayloadBytes = 64ull << 20;
// A batch message's first byte: descriptors attached, or a failure whose text follows.
constexpr char kBatchFds = 1;
constexpr char kBatchFailed = 0;
constexpr char kAck = 1;  // the client took a batch: the server may send the next

sockaddr_un abstractAddress(const std::string& name, socklen_t& length) {
  sockaddr_un a{};
  a.sun_family = AF_UNIX;
  LOOM_CHECK_ARG(!name.empty() && name.size() + 1 <= sizeof(a.sun_path),
                 "a descriptor server's name must have 1 to ", sizeof(a.sun_path) - 1,
                 " characters, got '", name, "'");
  // sun_path[0] == 0: the abstract namespace.
  std::memcpy(a.sun_path + 1, name.data(), name.size());
  length = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + name.size());
  return a;
}

void setTimeouts(int fd, int64_t timeoutMs) {
  timeval tv{};
  tv.tv_sec = static_cast<time_t>(timeoutMs / 1000);
  tv.tv_usec = static_cast<suseconds_t>((timeoutMs % 1000) * 1000);
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
}

// The socket's timeouts set to what is left until the deadline; false once it has passed.
bool armUntil(int fd, Deadline deadline) {
  const int64_t left = msUntil(deadline);
  if (left <= 0) return false;
  setTimeouts(fd, left);
  return true;
}

bool sendMessage(int fd, const void* data, size_t bytes) {
  for (;;) {
    ssize_t n = send(fd, data, bytes, MSG_NOSIGNAL);
    if (n == static_cast<ssize_t>(bytes)) return true;
    if (n < 0 && errno == EINTR) continue;
    return false;
  }
}

bool sendBatch(int fd, const std::vector<Fd>& fds) {
  char status = kBatchFds;
  iovec iov{&status, 1};
  std::vector<char> control(CMSG_SPACE(sizeof(int) * fds.size()));
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = control.data();
  msg.msg_controllen = control.size();
  cmsghdr* c = CMSG_FIRSTHDR(&msg);
  c->cmsg_level = SOL_SOCKET;
  c->cmsg_type = SCM_RIGHTS;
  c->cmsg_len = CMSG_LEN(sizeof(int) * fds.size());
  for (size_t i = 0; i < fds.size(); ++i) {
    const int raw = fds[i].get();
    std::memcpy(CMSG_DATA(c) + i * sizeof(int), &raw, sizeof(int));
  }
  for (;;) {
    ssize_t n = sendmsg(fd, &msg, MSG_NOSIGNAL);
    if (n == 1) return true;
    if (n < 0 && errno == EINTR) continue;
    return false;
  }
}

// One message into `buffer`; its size, or -1 with errno (0 at end of stream).
ssize_t receiveMessage(int fd, void* buffer, size_t bytes) {
  for (;;) {
    ssize_t n = recv(fd, buffer, bytes, 0);
    if (n < 0 && errno == EINTR) continue;
    return n;
  }
}

std::string receiveFailure(const char* what, ssize_t n) {
  if (n == 0) return std::string("the server closed the connection before ") + what;
  if (errno == EAGAIN || errno == EWOULDBLOCK) return std::string("timed out waiting for ") + what;
  return std::string("receiving ") + what + ": " + detail::errnoText(errno);
}

}  // namespace

FdServer::FdServer(const std::string& name, Source source) : source_(std::move(source)) {
  socklen_t length = 0;
  const sockaddr_un address = abstractAddress(name, length);
  listener_.reset(socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0));
  LOOM_SYSCHECK(listener_.get(), "socket(AF_UNIX) for the descriptor server");
  LOOM_SYSCHECK(bind(listener_.get(), reinterpret_cast<const sockaddr*>(&address), length),
                "binding the descriptor server '" + name + "'");
  LOOM_SYSCHECK(listen(listener_.get(), 64), "listen on the descriptor server");
}

void FdServer::start() {
  if (!thread_.joinable()) thread_ = std::thread([this] { serve(); });
}

FdServer::~FdServer() {
  stop_.signal();
  if (thread_.joinable()) thread_.join();
}

void FdServer::serve() {
  struct Worker {
    std::thread thread;
    std::shared_ptr<std::atomic<bool>> done;
  };
  std::vector<Worker> workers;
  auto reap = [&](bool all) {
    for (auto it = workers.begin(); it != workers.end();) {
      if (!all && !it->done->load()) {
        ++it;
        continue;
      }
      it->thread.join();
      it = workers.erase(it);
    }
  };
  for (;;) {
    reap(false);
    // At most kMaxConnections answered at once: past that, new peers wait in the backlog.
    const bool full = workers.size() >= kMaxConnections;
    pollfd fds[2] = {{stop_.get(), POLLIN, 0}, {listener_.get(), POLLIN, 0}};
    // While answering, wake now and then to reap the finished.
    const int n = poll(fds, full ? 1 : 2, workers.empty() ? -1 : 10);
    if (n < 0 && errno != EINTR) break;
    if (n <= 0) continue;
    if (fds[0].revents != 0) break;
    if (full || (fds[1].revents & POLLIN) == 0) continue;
    Fd connection(accept4(listener_.get(), nullptr, nullptr, SOCK_CLOEXEC));
    if (!connection.valid()) continue;
    auto done = std::make_shared<std::atomic<bool>>(false);
    workers.push_back(Worker{std::thread([this, done, c = std::move(connection)] {
                               try {
                                 answer(c.get());
                               } catch (...) {
                                 // The client sees the connection close and says so.
                               }
                               done->store(true);
                             }),
                             done});
  }
  // Stopped: each connection ends at its next wait (awaitReadable sees stop_).
  reap(true);
}

bool FdServer::awaitReadable(int connection) const {
  pollfd fds[2] = {{connection, POLLIN, 0}, {stop_.get(), POLLIN, 0}};
  for (;;) {
    const int n = poll(fds, 2, kConnectionTimeoutMs);
    if (n < 0 && errno == EINTR) continue;
    return n > 0 && fds[1].revents == 0 && (fds[0].revents & POLLIN) != 0;
  }
}

void FdServer::answer(int connection) {
  ucred peer{};
  socklen_t peerLength = sizeof(peer);
  if (getsockopt(connection, SOL_SOCKET, SO_PEERCRED, &peer, &peerLength) != 0 ||
      peer.uid != geteuid())
    return;
  setTimeouts(connection, kConnectionTimeoutMs);
  Request request{};
  if (!awaitReadable(connection) ||
      receiveMessage(connection, &request, sizeof(request)) != sizeof(request))
    return;
  std::string payload;
  size_t count = 0;
  Header header{};
  header.found = source_.describe(request.key, payload, count) ? 1 : 0;
  header.count = header.found != 0 ? count : 0;
  header.payloadBytes = header.found != 0 ? payload.size() : 0;
  if (!sendMessage(connection, &header, sizeof(header)) || header.found == 0) return;
  for (size_t at = 0; at < payload.size(); at += kPayloadPart)
    if (!sendMessage(connection, payload.data() + at, std::min(kPayloadPart, payload.size() - at)))
      return;
  std::vector<Fd> batch;
  for (size_t first = 0; first < count; first += kFdsPerMessage) {
    // Paced by the client: a user's descriptors in flight count against its RLIMIT_NOFILE.
    char ack = 0;
    if (first > 0 &&
        (!awaitReadable(connection) || receiveMessage(connection, &ack, 1) != 1 || ack != kAck))
      return;
    batch.clear();
    const size_t last = std::min(count, first + kFdsPerMessage);
    for (size_t i = first; i < last; ++i) {
      std::string why;
      Fd fd(source_.open(request.key, i, why));
      if (!fd.valid()) {
        const std::string failure = std::string(1, kBatchFailed) + why;
        sendMessage(connection, failure.data(), failure.size());
        return;
      }
      batch.push_back(std::move(fd));
    }
    if (!sendBatch(connection, batch)) {
      const std::string failure =
          std::string(1, kBatchFailed) + "sendmsg(SCM_RIGHTS): " + detail::errnoText(errno);
      sendMessage(connection, failure.data(), failure.size());
      return;
    }
  }
}

namespace {

// The client's end of one exchange with a descriptor server: each step below sets `why` and
// returns false when it fails.
struct FetchExchange {
  const std::string& name;
  int timeoutMs;
  Deadline deadline;
  std::string& why;
  Fd s;
  bool timedOut(const char* what) {
    why = std::string("the exchange with descriptor server '") + name + "' ran past its " +
          std::to_string(timeoutMs) + " ms (" + what + ")";
    return false;
  }
};

bool connectToServer(FetchExchange& x, const sockaddr_un& address, socklen_t length) {
  x.s = Fd(socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0));
  if (!x.s.valid()) {
    x.why = "socket(AF_UNIX): " + detail::errnoText(errno);
    return false;
  }
  if (!armUntil(x.s.get(), x.deadline)) return x.timedOut("connecting");
  int connected = 0;
  do {
    connected = connect(x.s.get(), reinterpret_cast<const sockaddr*>(&address), length);
  } while (connected != 0 && errno == EINTR);
  if (connected != 0) {
    x.why = "connecting to descriptor server '" + x.name + "': " + detail::errnoText(errno) +
            (errno == ECONNREFUSED ? " (its process is gone, or runs in another network namespace)"
                                   : "");
    return false;
  }
  // The name is public: only a server of this user is trusted with the request.
  ucred server{};
  socklen_t serverLength = sizeof(server);
  if (getsockopt(x.s.get(), SOL_SOCKET, SO_PEERCRED, &server, &serverLength) != 0 ||
      server.uid != geteuid()) {
    x.why = "descriptor server '" + x.name + "' runs as user " + std::to_string(server.uid) +
            ", not as this process's " + std::to_string(geteuid());
    return false;
  }
  return true;
}

// Sends the request for `key`; the answer's header, within the sanity bounds.
bool requestKey(FetchExchange& x, uint64_t key, Header& header) {
  const Request request{key};
  if (!sendMessage(x.s.get(), &request, sizeof(request))) {
    x.why = "sending the request: " + detail::errnoText(errno);
    return false;
  }
  if (!armUntil(x.s.get(), x.deadline)) return x.timedOut("the answer");
  ssize_t n = receiveMessage(x.s.get(), &header, sizeof(header));
  if (n != static_cast<ssize_t>(sizeof(header))) {
    x.why = n > 0 ? "a malformed answer" : receiveFailure("the answer", n);
    return false;
  }
  if (header.found == 0) {
    x.why = "the server has nothing under key " + std::to_string(key);
    return false;
  }
  if (header.count > kMaxCount || header.payloadBytes > kMaxPayloadBytes) {
    x.why = "an answer past the sanity bounds (" + std::to_string(header.count) + " descriptors, " +
            std::to_string(header.payloadBytes) + " payload bytes)";
    return false;
  }
  return true;
}

bool receivePayload(FetchExchange& x, uint64_t bytes, std::string& payload) {
  payload.resize(bytes);
  for (size_t at = 0; at < payload.size();) {
    const size_t part = std::min(kPayloadPart, payload.size() - at);
    if (!armUntil(x.s.get(), x.deadline)) return x.timedOut("the payload");
    ssize_t n = receiveMessage(x.s.get(), payload.data() + at, part);
    if (n != static_cast<ssize_t>(part)) {
      x.why = n > 0 ? "a malformed payload" : receiveFailure("the payload", n);
      return false;
    }
    at += part;
  }
  return true;
}

// The `count` descriptors, in batches of FdServer::kFdsPerMessage, each handed to `take`.
bool receiveDescriptors(FetchExchange& x, uint64_t count,
                        const std::function<bool(size_t index, int fd, std::string& why)>& take) {
  std::vector<char> text(1024);
  std::vector<char> control(CMSG_SPACE(sizeof(int) * FdServer::kFdsPerMessage));
  for (size_t first = 0; first < count; first += FdServer::kFdsPerMessage) {
    const size_t expected = std::min<size_t>(FdServer::kFdsPerMessage, count - first);
    iovec iov{text.data(), text.size()};
    msghdr msg{};
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control.data();
    msg.msg_controllen = control.size();
    if (!armUntil(x.s.get(), x.deadline)) return x.timedOut("descriptors");
    ssize_t n;
    do {
      n = recvmsg(x.s.get(), &msg, MSG_CMSG_CLOEXEC);
    } while (n < 0 && errno == EINTR);
    std::vector<Fd> received;  // closed on every way out
    for (cmsghdr* c = CMSG_FIRSTHDR(&msg); n > 0 && c != nullptr; c = CMSG_NXTHDR(&msg, c)) {
      if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
      const size_t k = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
      for (size_t i = 0; i < k; ++i) {
        int fd = -1;
        std::memcpy(&fd, CMSG_DATA(c) + i * sizeof(int), sizeof(int));
        received.emplace_back(fd);
      }
    }
    if (n <= 0) {
      x.why = receiveFailure("descriptors", n);
      return false;
    }
    if (text[0] == kBatchFailed) {
      x.why = "the server could not give descriptor " + std::to_string(first + received.size()) +
              ": " + std::string(text.data() + 1, static_cast<size_t>(n) - 1);
      return false;
    }
    if ((msg.msg_flags & MSG_CTRUNC) != 0 || received.size() != expected) {
      x.why = "expected " + std::to_string(expected) + " descriptors in a message, got " +
              std::to_string(received.size()) +
              ((msg.msg_flags & MSG_CTRUNC) != 0 ? " (truncated: is RLIMIT_NOFILE reached?)" : "");
      return false;
    }
    for (size_t i = 0; i < received.size(); ++i)
      if (!take(first + i, received[i].get(), x.why)) return false;
    received.clear();  // closed before the next batch comes
    if (first + expected < count &&
        (!armUntil(x.s.get(), x.deadline) || !sendMessage(x.s.get(), &kAck, 1))) {
      x.why = "acknowledging descriptors: " + detail::errnoText(errno);
      return false;
    }
  }
  return true;
}

}  // namespace

bool fetchFds(const std::string& name, uint64_t key, int timeoutMs, std::string& payload,
              const std::function<bool(size_t index, int fd, std::string& why)>& take,
              std::string& why) {
  payload.clear();
  socklen_t length = 0;
  const sockaddr_un address = abstractAddress(name, length);
  FetchExchange x{name, timeoutMs, deadlineAfterMs(std::max(timeoutMs, 1)), why, Fd()};
  Header header{};
  return connectToServer(x, address, length) && requestKey(x, key, header) &&
         receivePayload(x, header.payloadBytes, payload) &&
         receiveDescriptors(x, header.count, take);
}

}  // namespace loom
