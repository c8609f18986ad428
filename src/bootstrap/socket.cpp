#include "bootstrap/socket.hpp"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <thread>

#include "base/error.hpp"

namespace loom {

namespace {

using Clock = std::chrono::steady_clock;

// The longest single sleep in any wait: bounds how late an abort is noticed.
constexpr int64_t kSliceMs = 50;

void setNoDelay(int fd) {
  // Control messages are small request/response exchanges; Nagle would add delayed-ACK stalls.
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
}

bool isRetryableConnectError(int err) {
  return err == ECONNREFUSED || err == ETIMEDOUT || err == EHOSTUNREACH || err == ENETUNREACH ||
         err == ECONNRESET || err == ECONNABORTED || err == EAGAIN || err == EADDRNOTAVAIL;
}

// Connecting to a local ephemeral port nobody listens on can succeed as a TCP "simultaneous
// open" with itself when the kernel picks the same port as the source.
bool isSelfConnected(int fd) {
  sockaddr_storage local{}, remote{};
  socklen_t localLen = sizeof(local), remoteLen = sizeof(remote);
  if (getsockname(fd, reinterpret_cast<sockaddr*>(&local), &localLen) != 0) return false;
  if (getpeername(fd, reinterpret_cast<sockaddr*>(&remote), &remoteLen) != 0) return false;
  return localLen == remoteLen && std::memcmp(&local, &remote, localLen) == 0;
}

void sleepWithAbort(int64_t ms, Deadline deadline, const std::atomic<bool>* abortFlag) {
  Deadline until = std::min(deadline, Clock::now() + std::chrono::milliseconds(ms));
  while (Clock::now() < until) {
    throwIfAborted(abortFlag);
    std::this_thread::sleep_for(
        std::min<Clock::duration>(until - Clock::now(), std::chrono::milliseconds(kSliceMs)));
  }
  throwIfAborted(abortFlag);
}

// One non-blocking connect attempt to one resolved address. Returns the connected fd, or an
// invalid Fd with *err set when the attempt failed.
Fd tryConnect(const addrinfo* ai, Deadline deadline, const std::atomic<bool>* abortFlag, int* err) {
  Fd fd(socket(ai->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
  if (!fd.valid()) {
    *err = errno;
    return Fd();
  }
  if (connect(fd.get(), ai->ai_addr, ai->ai_addrlen) != 0) {
    if (errno != EINPROGRESS) {
      *err = errno;
      return Fd();
    }
    std::vector<pollfd> pfd{{fd.get(), POLLOUT, 0}};
    while (true) {
      throwIfAborted(abortFlag);
      if (pollSlice(pfd, deadline) > 0) break;
      if (Clock::now() >= deadline) {
        *err = ETIMEDOUT;
        return Fd();
      }
    }
    int soError = 0;
    socklen_t len = sizeof(soError);
    getsockopt(fd.get(), SOL_SOCKET, SO_ERROR, &soError, &len);
    if (soError != 0) {
      *err = soError;
      return Fd();
    }
  }
  if (isSelfConnected(fd.get())) {
    *err = ECONNREFUSED;
    return Fd();
  }
  setNoDelay(fd.get());
  return fd;
}

}  // namespace

Deadline deadlineAfterMs(int64_t timeoutMs) {
  // Saturate at ~100 years so that "forever" cannot overflow the clock's representation.
  constexpr int64_t kMaxMs = int64_t{100} * 365 * 24 * 3600 * 1000;
  return Clock::now() + std::chrono::milliseconds(std::clamp<int64_t>(timeoutMs, 0, kMaxMs));
}

int64_t msUntil(Deadline deadline) {
  auto left = deadline - Clock::now();
  if (left <= Clock::duration::zero()) return 0;
  // Rounded up so that a caller polling for the remainder does not spin on 0 ms.
  return std::chrono::ceil<std::chrono::milliseconds>(left).count();
}

void throwIfAborted(const std::atomic<bool>* abortFlag) {
  if (abortFlag != nullptr && abortFlag->load(std::memory_order_relaxed))
    LOOM_THROW(loomRemoteError, "aborted");
}

Fd& Fd::operator=(Fd&& other) noexcept {
  if (this != &other) reset(other.release());
  return *this;
}

void Fd::reset(int fd) {
  if (fd_ >= 0) ::close(fd_);
  fd_ = fd;
}

EventFd::EventFd(const char* what) : fd_(::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC)) {
  if (!fd_.valid()) LOOM_THROW(loomSystemError, "eventfd for ", what, ": ", std::strerror(errno));
}

void EventFd::signal() const noexcept {
  const uint64_t one = 1;
  (void)!::write(fd_.get(), &one, sizeof(one));
}

void EventFd::consume() const noexcept {
  uint64_t count = 0;
  (void)!::read(fd_.get(), &count, sizeof(count));
}

std::string numericHost(const sockaddr* addr, socklen_t len) {
  if (addr->sa_family == AF_INET6) {
    const auto* in6 = reinterpret_cast<const sockaddr_in6*>(addr);
    if (IN6_IS_ADDR_V4MAPPED(&in6->sin6_addr)) {
      char text[INET_ADDRSTRLEN];
      inet_ntop(AF_INET, &in6->sin6_addr.s6_addr[12], text, sizeof(text));
      return text;
    }
  }
  char host[NI_MAXHOST];
  if (getnameinfo(addr, len, host, sizeof(host), nullptr, 0, NI_NUMERICHOST) != 0) return "?";
  return host;
}

std::string formatAddress(const sockaddr* addr, socklen_t len) {
  uint16_t port = 0;
  if (addr->sa_family == AF_INET)
    port = ntohs(reinterpret_cast<const sockaddr_in*>(addr)->sin_port);
  if (addr->sa_family == AF_INET6)
    port = ntohs(reinterpret_cast<const sockaddr_in6*>(addr)->sin6_port);
  return joinHostPort(numericHost(addr, len), port);
}

bool isLoopback(const sockaddr* addr) {
  if (addr->sa_family == AF_INET) {
    uint32_t ip = ntohl(reinterpret_cast<const sockaddr_in*>(addr)->sin_addr.s_addr);
    return (ip >> 24) == 127;
  }
  if (addr->sa_family == AF_INET6) {
    const in6_addr& a = reinterpret_cast<const sockaddr_in6*>(addr)->sin6_addr;
    return IN6_IS_ADDR_LOOPBACK(&a) || (IN6_IS_ADDR_V4MAPPED(&a) && a.s6_addr[12] == 127);
  }
  return false;
}

std::string joinHostPort(const std::string& host, uint16_t port) {
  if (host.find(':') != std::string::npos) return "[" + host + "]:" + std::to_string(port);
  return host + ":" + std::to_string(port);
}

bool isWildcardHost(const std::string& host) {
  return host.empty() || host == "0.0.0.0" || host == "::" || host == "*";
}

void Socket::shutdown() {
  if (fd_.valid()) ::shutdown(fd_.get(), SHUT_RDWR);
}

size_t Socket::sendSome(const void* data, size_t size) {
  if (size == 0) return 0;
  ssize_t sent = ::send(fd_.get(), data, size, MSG_NOSIGNAL | MSG_DONTWAIT);
  if (sent >= 0) return static_cast<size_t>(sent);
  int err = errno;
  if (err == EAGAIN || err == EWOULDBLOCK || err == EINTR) return 0;
  if (err == EPIPE || err == ECONNRESET || err == ENOTCONN)
    LOOM_THROW(loomRemoteError, "connection to ", peer_, " was closed by the peer (",
               detail::errnoText(err), ")");
  LOOM_THROW(loomSystemError, "send to ", peer_, ": ", detail::errnoText(err));
}

size_t Socket::recvSome(void* data, size_t size) {
  if (size == 0) return 0;
  ssize_t got = ::recv(fd_.get(), data, size, MSG_DONTWAIT);
  if (got > 0) return static_cast<size_t>(got);
  if (got == 0) LOOM_THROW(loomRemoteError, "connection closed by ", peer_);
  int err = errno;
  if (err == EAGAIN || err == EWOULDBLOCK || err == EINTR) return 0;
  if (err == ECONNRESET || err == ENOTCONN || err == ETIMEDOUT || err == EPIPE)
    LOOM_THROW(loomRemoteError, "connection to ", peer_, " lost (", detail::errnoText(err), ")");
  LOOM_THROW(loomSystemError, "recv from ", peer_, ": ", detail::errnoText(err));
}

void Socket::sendAll(const void* data, size_t size, Deadline deadline,
                     const std::atomic<bool>* abortFlag) {
  const auto* p = static_cast<const uint8_t*>(data);
  while (size > 0) {
    throwIfAborted(abortFlag);
    size_t sent = sendSome(p, size);
    p += sent;
    size -= sent;
    if (size > 0 && sent == 0) waitReady(fd(), POLLOUT, deadline, abortFlag, "sending to " + peer_);
  }
}

void Socket::recvAll(void* data, size_t size, Deadline deadline,
                     const std::atomic<bool>* abortFlag) {
  auto* p = static_cast<uint8_t*>(data);
  while (size > 0) {
    throwIfAborted(abortFlag);
    size_t got = recvSome(p, size);
    p += got;
    size -= got;
    if (size > 0 && got == 0) waitReady(fd(), POLLIN, deadline, abortFlag, "data from " + peer_);
  }
}

bool Socket::peerClosed() {
  char byte;
  ssize_t got = ::recv(fd_.get(), &byte, 1, MSG_PEEK | MSG_DONTWAIT);
  if (got == 0) return true;
  if (got > 0) return false;
  return errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR;
}

std::string Socket::localHost() const {
  sockaddr_storage addr{};
  socklen_t len = sizeof(addr);
  LOOM_SYSCHECK(getsockname(fd_.get(), reinterpret_cast<sockaddr*>(&addr), &len), "getsockname");
  return numericHost(reinterpret_cast<sockaddr*>(&addr), len);
}

void waitReady(int fd, short events, Deadline deadline, const std::atomic<bool>* abortFlag,
               const std::string& what) {
  std::vector<pollfd> pfd{{fd, events, 0}};
  while (true) {
    throwIfAborted(abortFlag);
    // Any revents (POLLERR/POLLHUP included) ends the wait: the next send/recv reports it.
    if (pollSlice(pfd, deadline) > 0) return;
    if (Clock::now() >= deadline) LOOM_THROW(loomTimeout, "timed out ", what);
  }
}

int pollSlice(std::vector<pollfd>& fds, Deadline deadline) {
  int timeout = static_cast<int>(std::min<int64_t>(msUntil(deadline), kSliceMs));
  int ready = ::poll(fds.data(), fds.size(), timeout);
  if (ready < 0) {
    if (errno == EINTR) return 0;
    LOOM_THROW(loomSystemError, "poll: ", detail::errnoText(errno));
  }
  return ready;
}

Listener listenTcp(const std::string& host, uint16_t port) {
  std::vector<sockaddr_storage> candidates;
  std::vector<socklen_t> lengths;
  auto addCandidate = [&](const sockaddr* addr, socklen_t len) {
    sockaddr_storage storage{};
    std::memcpy(&storage, addr, len);
    candidates.push_back(storage);
    lengths.push_back(len);
  };
  if (host.empty() || host == "*" || host == "::") {
    sockaddr_in6 any6{};
    any6.sin6_family = AF_INET6;
    any6.sin6_addr = in6addr_any;
    any6.sin6_port = htons(port);
    addCandidate(reinterpret_cast<sockaddr*>(&any6), sizeof(any6));
  }
  if (host.empty() || host == "*" || host == "0.0.0.0") {
    // IPv4 wildcard: the fallback on hosts without IPv6.
    sockaddr_in any4{};
    any4.sin_family = AF_INET;
    any4.sin_addr.s_addr = htonl(INADDR_ANY);
    any4.sin_port = htons(port);
    addCandidate(reinterpret_cast<sockaddr*>(&any4), sizeof(any4));
  }
  if (candidates.empty()) {
    addrinfo hints{};
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
    addrinfo* results = nullptr;
    std::string service = std::to_string(port);
    int rc = getaddrinfo(host.c_str(), service.c_str(), &hints, &results);
    if (rc != 0)
      LOOM_THROW(loomSystemError, "cannot listen on ", joinHostPort(host, port),
                 ": cannot resolve: ", gai_strerror(rc));
    for (addrinfo* ai = results; ai != nullptr; ai = ai->ai_next)
      addCandidate(ai->ai_addr, ai->ai_addrlen);
    freeaddrinfo(results);
  }

  std::string lastError = "no address";
  for (size_t i = 0; i < candidates.size(); ++i) {
    const auto* addr = reinterpret_cast<const sockaddr*>(&candidates[i]);
    Fd fd(socket(addr->sa_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
    if (!fd.valid()) {
      lastError = detail::errnoText(errno);
      continue;
    }
    int one = 1, zero = 0;
    setsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    bool wildcard6 =
        addr->sa_family == AF_INET6 &&
        IN6_IS_ADDR_UNSPECIFIED(&reinterpret_cast<const sockaddr_in6*>(addr)->sin6_addr);
    // Dual stack for the wildcard so that IPv4 and IPv6 clients both reach one listener.
    if (wildcard6) setsockopt(fd.get(), IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof(zero));
    if (bind(fd.get(), addr, lengths[i]) != 0 || listen(fd.get(), SOMAXCONN) != 0) {
      lastError = detail::errnoText(errno);
      continue;
    }
    sockaddr_storage bound{};
    socklen_t boundLen = sizeof(bound);
    LOOM_SYSCHECK(getsockname(fd.get(), reinterpret_cast<sockaddr*>(&bound), &boundLen),
                  "getsockname");
    Listener listener;
    listener.port =
        ntohs(bound.ss_family == AF_INET6 ? reinterpret_cast<sockaddr_in6*>(&bound)->sin6_port
                                          : reinterpret_cast<sockaddr_in*>(&bound)->sin_port);
    listener.dualStackOrV6 = addr->sa_family == AF_INET6;
    listener.fd = std::move(fd);
    return listener;
  }
  LOOM_THROW(loomSystemError, "cannot listen on ", joinHostPort(host.empty() ? "*" : host, port),
             ": ", lastError);
}

Socket acceptSome(int listenFd) {
  sockaddr_storage addr{};
  socklen_t len = sizeof(addr);
  int fd =
      accept4(listenFd, reinterpret_cast<sockaddr*>(&addr), &len, SOCK_NONBLOCK | SOCK_CLOEXEC);
  if (fd < 0) {
    int err = errno;
    // Transient: nothing pending, or a client that went away between SYN and accept.
    if (err == EAGAIN || err == EWOULDBLOCK || err == EINTR || err == ECONNABORTED ||
        err == EPROTO || err == EPERM)
      return Socket();
    LOOM_THROW(loomSystemError, "accept: ", detail::errnoText(err));
  }
  setNoDelay(fd);
  return Socket(Fd(fd), formatAddress(reinterpret_cast<sockaddr*>(&addr), len));
}

Socket connectWithRetry(const std::string& host, uint16_t port, Deadline deadline,
                        const std::atomic<bool>* abortFlag) {
  const std::string target = joinHostPort(host, port);
  const std::string service = std::to_string(port);
  std::string lastError = "no attempt";
  int64_t backoffMs = 10;
  while (true) {
    throwIfAborted(abortFlag);
    addrinfo hints{};
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_NUMERICSERV;
    addrinfo* results = nullptr;
    int rc = getaddrinfo(host.c_str(), service.c_str(), &hints, &results);
    if (rc == 0) {
      for (addrinfo* ai = results; ai != nullptr; ai = ai->ai_next) {
        int err = 0;
        Fd fd;
        try {
          fd = tryConnect(ai, deadline, abortFlag, &err);
        } catch (...) {
          freeaddrinfo(results);
          throw;
        }
        if (fd.valid()) {
          freeaddrinfo(results);
          return Socket(std::move(fd), target);
        }
        lastError = detail::errnoText(err);
        if (!isRetryableConnectError(err)) {
          freeaddrinfo(results);
          LOOM_THROW(loomSystemError, "cannot connect to ", target, ": ", lastError);
        }
      }
      freeaddrinfo(results);
    } else if (rc == EAI_AGAIN) {
      lastError = gai_strerror(rc);  // DNS may come back; keep trying until the deadline
    } else {
      LOOM_THROW(loomInvalidArgument, "cannot resolve '", host, "': ", gai_strerror(rc));
    }
    if (Clock::now() >= deadline)
      LOOM_THROW(loomTimeout, "timed out connecting to ", target, " (last error: ", lastError, ")");
    sleepWithAbort(backoffMs, deadline, abortFlag);
    backoffMs = std::min<int64_t>(backoffMs * 2, 200);
  }
}

}  // namespace loom
