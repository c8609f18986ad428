// File descriptors handed between the processes of one host, for what travels only as a
// descriptor: CUDA's cuMem allocations export their memory as POSIX file descriptors, and a peer
// that maps a rank's registered buffer needs one for each of the buffer's physical allocations.
//
// The owner serves its descriptors from a thread (FdServer), so that a peer fetches them whenever
// it needs them (fetchFds) without the owner's caller taking part: a registration is published
// once and mapped by each peer when it first sees it. Roles:
//   - server thread: accepts one connection at a time on a Unix-domain SOCK_SEQPACKET socket in
//     the abstract namespace (no file to remove after a crash), answers peers of its own user
//     only (SO_PEERCRED), and sends what its Source offers under the requested key: a header,
//     the payload bytes, then the descriptors in batches of kFdsPerMessage (SCM_RIGHTS);
//   - fetching thread: connects, asks, and hands each descriptor to its caller as it arrives,
//     closing it right after, so that a buffer of thousands of allocations never holds more
//     than one batch of descriptors open.
// Every wait is bounded: the server gives a connection kConnectionTimeoutMs, a fetch its own
// timeout. The socket's name carries a random nonce (ShmSegment::uniqueName): only a process
// told the name can connect, and it must run as the same user, who could read this process's
// memory anyway. Abstract names are per network namespace: ranks in different namespaces of one
// host cannot fetch (the fetch fails with a clear error).
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

  // What the server offers. Called on the server thread.
  struct Source {
    // The payload and the number of descriptors under `key`; false: nothing is under it.
    std::function<bool(uint64_t key, std::string& payload, size_t& count)> describe;
    // A new descriptor for the key's `index`th, which the server closes once sent; -1 (with
    // `why`) if it is gone (the owner withdrew the key since describe).
    std::function<int(uint64_t key, size_t index, std::string& why)> open;
  };

  // Binds `name` and starts serving. Throws loomSystemError if the name cannot be bound.
  FdServer(const std::string& name, Source source);
  // Stops the thread (a connection being answered is cut short).
  ~FdServer();
  FdServer(const FdServer&) = delete;
  FdServer& operator=(const FdServer&) = delete;

 private:
  void serve();
  void answer(int connection);

  Source source_;
  Fd listener_;
  Fd stop_;  // an eventfd: readable once the destructor wants the thread to end
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
