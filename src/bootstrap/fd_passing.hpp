// File descriptors handed between the processes of one host, for what travels only as a
// descriptor: CUDA's cuMem allocations export their memory as POSIX file descriptors, and a peer
// that maps a rank's registered buffer needs one for each of the buffer's physical allocations.
//
// The owner serves its descriptors from a thread (FdServer), so that a peer fetches them whenever
// it needs them (fetchFds) without the owner's caller taking part: a registration is published
// once and mapped by each peer when it first sees it. Roles:
//   - server thread: accepts connections on a Unix-domain SOCK_SEQPACKET socket in the abstract
//     namespace (no file to remove after a crash) and answers each on a thread of its own, at
//     most kMaxConnections at once (peers mapping a large buffer at the same time would otherwise
//     queue past their deadlines);
//   - connection thread: answers peers of the server's user only (SO_PEERCRED), and sends what
//     the Source offers under the requested key: a header,
//     the payload bytes, then the descriptors in batches of kFdsPerMessage (SCM_RIGHTS), each
//     batch after the client acknowledged the one before. Linux counts a user's descriptors in
//     flight against its RLIMIT_NOFILE: unpaced, a buffer of a few thousand allocations failed;
//   - fetching thread: connects, checks that the server runs as its own user, asks, and hands
//     each descriptor to its caller as it arrives, closing it right after, so that neither side
//     holds more than a batch of descriptors open.
// Every wait is bounded: the server gives each step of a connection kConnectionTimeoutMs (and
// leaves it when stopped), a fetch has one deadline for the whole exchange. Abstract names are
// visible to every user (/proc/net/unix): the owner binds its name when it is made, before the
// name is used, so no other process can take it first. Abstract names are per network
// namespace: ranks in different namespaces of one host cannot fetch (a clear error).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <thread>

#include "bootstrap/socket.hpp"

namespace loom {

class FdServer {
 public:
  static constexpr size_t kFdsPerMessage = 64;
  static constexpr int kConnectionTimeoutMs = 2000;
  static constexpr size_t kMaxConnections = 8;

  // What the server offers. Called on connection threads, several at once.
  struct Source {
    // The payload and the number of descriptors under `key`; false: nothing is under it.
    std::function<bool(uint64_t key, std::string& payload, size_t& count)> describe;
    // A new descriptor for the key's `index`th, which the server closes once sent; -1 (with
    // `why`) if it is gone (the owner withdrew the key since describe).
    std::function<int(uint64_t key, size_t index, std::string& why)> open;
  };

  // Binds `name` (throws loomSystemError if it cannot). Clients are answered once started.
  FdServer(const std::string& name, Source source);
  // Stops the thread, leaving a connection being answered at its next wait.
  ~FdServer();
  FdServer(const FdServer&) = delete;
  FdServer& operator=(const FdServer&) = delete;

  // Starts the thread that answers; later calls do nothing. Not thread-safe.
  void start();

 private:
  void serve();
  void answer(int connection);
  // Until `connection` is readable: false at the timeout, on an error or once stopped.
  bool awaitReadable(int connection) const;

  Source source_;
  Fd listener_;
  EventFd stop_{"the descriptor server"};  // readable once the destructor wants the thread to end
  std::thread thread_;
};

// Asks the server `name` for `key`: false, with `why`, when it is not there (no server bound, or
// nothing under the key) or the exchange fails. On success `payload` is the server's and
// `take(index, fd)` was called once per descriptor in order; the fd is closed after it returns
// (a caller that keeps the object dups it). A `take` returning false, with `why`, ends the fetch.
bool fetchFds(const std::string& name, uint64_t key, int timeoutMs, std::string& payload,
              const std::function<bool(size_t index, int fd, std::string& why)>& take,
              std::string& why);

}  // namespace loom
