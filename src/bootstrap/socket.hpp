// Small TCP helpers for the bootstrap (IPv4 and IPv6). Every socket is non-blocking and every
// wait goes through poll in short slices, so that each one
//   - gives up at its deadline with loomTimeout,
//   - returns within ~100 ms after *abortFlag becomes true, with loomRemoteError("aborted"),
//   - turns EOF and resets into loomRemoteError naming the peer.
#pragma once

#include <poll.h>
#include <sys/socket.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

namespace loom {

using Deadline = std::chrono::steady_clock::time_point;

// Deadline from a timeout; negative or huge timeouts saturate instead of overflowing.
Deadline deadlineAfterMs(int64_t timeoutMs);
// Milliseconds left until the deadline, clamped at 0.
int64_t msUntil(Deadline deadline);

// Throws loomRemoteError("aborted") if the flag is set.
void throwIfAborted(const std::atomic<bool>* abortFlag);

// Owns one file descriptor.
class Fd {
 public:
  Fd() = default;
  explicit Fd(int fd) : fd_(fd) {}
  ~Fd() { reset(); }
  Fd(Fd&& other) noexcept : fd_(other.release()) {}
  Fd& operator=(Fd&& other) noexcept;
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;

  int get() const { return fd_; }
  bool valid() const { return fd_ >= 0; }
  int release() {
    int fd = fd_;
    fd_ = -1;
    return fd;
  }
  void reset(int fd = -1);

 private:
  int fd_ = -1;
};

// An eventfd (non-blocking, close-on-exec) that wakes a thread waiting for it in poll():
// signal() from any thread makes it readable until the woken side consume()s it.
class EventFd {
 public:
  // Throws loomSystemError naming `what` when the kernel refuses one.
  explicit EventFd(const char* what);
  int get() const { return fd_.get(); }
  void signal() const noexcept;   // an eventfd write fails only on overflow, out of reach here
  void consume() const noexcept;  // takes what was signalled, if anything

 private:
  Fd fd_;
};

// "1.2.3.4:5" or "[::1]:5".
std::string formatAddress(const sockaddr* addr, socklen_t len);
// Numeric host (no port) of a socket address; IPv4-mapped IPv6 addresses come out as IPv4.
std::string numericHost(const sockaddr* addr, socklen_t len);
bool isLoopback(const sockaddr* addr);

// A connected stream socket and a human name for its peer, used in every error message.
class Socket {
 public:
  Socket() = default;
  Socket(Fd fd, std::string peer) : fd_(std::move(fd)), peer_(std::move(peer)) {}

  int fd() const { return fd_.get(); }
  bool valid() const { return fd_.valid(); }
  const std::string& peer() const { return peer_; }
  void setPeer(std::string peer) { peer_ = std::move(peer); }
  void close() { fd_.reset(); }
  // Makes the peer see EOF now, even if another thread still uses the descriptor.
  void shutdown();

  void sendAll(const void* data, size_t size, Deadline deadline,
               const std::atomic<bool>* abortFlag);
  void recvAll(void* data, size_t size, Deadline deadline, const std::atomic<bool>* abortFlag);
  // Non-blocking: the number of bytes moved, 0 if the call would block.
  size_t sendSome(const void* data, size_t size);
  size_t recvSome(void* data, size_t size);
  // Non-blocking: true if the peer has closed (or reset) the connection, without consuming data.
  bool peerClosed();
  // Numeric address of this end (the local interface that reaches the peer).
  std::string localHost() const;

 private:
  Fd fd_;
  std::string peer_;
};

// Waits until fd is ready for events; throws loomTimeout at the deadline ("waiting for <what>")
// and loomRemoteError("aborted") once the flag is set.
void waitReady(int fd, short events, Deadline deadline, const std::atomic<bool>* abortFlag,
               const std::string& what);

// One poll slice: at most ~50 ms and never past the deadline. Returns poll's count (0: nothing
// yet).
int pollSlice(std::vector<pollfd>& fds, Deadline deadline);

// A listening socket on host:port (port 0: ephemeral; host "" or a wildcard: all interfaces,
// IPv6 dual-stack when available). Throws loomSystemError if it cannot bind.
struct Listener {
  Fd fd;
  uint16_t port = 0;
  bool dualStackOrV6 = false;  // whether IPv6 clients can reach it
};
Listener listenTcp(const std::string& host, uint16_t port);
bool isWildcardHost(const std::string& host);

// Non-blocking accept; an invalid Socket if no connection is pending.
Socket acceptSome(int listenFd);

// Connects to host:port, retrying refused or unreachable attempts until the deadline so that the
// listener may start later. Throws loomTimeout with the last error at the deadline.
Socket connectWithRetry(const std::string& host, uint16_t port, Deadline deadline,
                        const std::atomic<bool>* abortFlag);

// "host:port", with brackets around IPv6 literals.
std::string joinHostPort(const std::string& host, uint16_t port);

}  // namespace loom
