// Bootstrap: the rendezvous that turns a unique id into a group of ranks, and the small control
// plane (a star through rank 0) that the rest of Loom uses for setup exchanges, barriers and
// fault propagation. Every connection is mutually authenticated with the job secret, which never
// crosses the wire.
#pragma once

#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "loom/loom.h"

namespace loom {

using Deadline = std::chrono::steady_clock::time_point;

struct JobSecret {
  std::array<uint8_t, 16> bytes{};
  bool present = false;

  static JobSecret random();
  // 32 hex characters; anything else is loomInvalidArgument.
  static JobSecret fromHex(const std::string& hex);
  // 32 lower-case hex characters, or "" when no secret is present.
  std::string hex() const;
};

// What a loomUniqueId carries (packed into its 128 bytes).
struct UniqueId {
  std::string host;  // rendezvous root address: numeric IPv4/IPv6 or a name
  uint16_t port = 0;
  JobSecret secret;
  uint64_t jobNonce = 0;  // random per id; used to derive sub-secrets
};

// With a magic and a version; loomInvalidArgument if the host does not fit.
void packUniqueId(const UniqueId& id, loomUniqueId* out);
// loomInvalidArgument if the magic or version is wrong.
UniqueId unpackUniqueId(const loomUniqueId& in);

// Starts a rendezvous root in a detached background thread of this process, listening on
// bindHost:port (port 0: ephemeral; bindHost "": all interfaces), and returns the id that reaches
// it. For "" the id names an address other hosts could reach: the address the host name resolves
// to if not loopback, else the first non-loopback interface address, else 127.0.0.1. The root
// serves exactly one rendezvous and exits; after timeoutMs (<= 0: 600 s) it gives up with a WARN.
// Throws loomSystemError at once if it cannot bind.
UniqueId startRendezvousRoot(const std::string& bindHost, uint16_t port, const JobSecret& secret,
                             int64_t timeoutMs);

// HMAC-SHA256(parent, label | 0 | jobNonce) truncated to 16 bytes; not present if the parent is
// not.
JobSecret deriveSecret(const JobSecret& parent, uint64_t jobNonce, const std::string& label);

class Bootstrap {
 public:
  struct Options {
    int64_t timeoutMs = 600000;  // <= 0: 600 s
    const std::atomic<bool>* abortFlag = nullptr;
  };

  // Connects to the root (retrying until the deadline), authenticates, sends myInfo (opaque, up to
  // 1 MiB) and receives every rank's info. Then builds the control plane: ranks 1..n-1 connect to
  // rank 0 (whose address travels in the rendezvous) and keep that connection.
  Bootstrap(const UniqueId& id, int rank, int nranks, const std::string& myInfo, Options options);
  ~Bootstrap();
  Bootstrap(const Bootstrap&) = delete;
  Bootstrap& operator=(const Bootstrap&) = delete;

  int rank() const;
  int nranks() const;
  const std::vector<std::string>& rankInfos() const;

  // Collectives over all ranks, through rank 0; each call has the timeout as its deadline. After
  // any failure but loomInvalidArgument the bootstrap is broken and every later call rethrows it.
  std::vector<std::string> allGather(const std::string& mine);
  void barrier();

  // Reports a fault to everyone, best effort, within ~100 ms. Survivors' next control call fails
  // with loomRemoteError naming this rank and the reason. (From rank > 0 the report reaches the
  // others through rank 0's news service, which relays the first failure it hears.)
  void broadcastAbort(const std::string& reason) noexcept;

  // Non-blocking: throws loomRemoteError if a control connection of this rank was closed (peer
  // died) or an abort arrived. A no-op while another thread is inside a collective of this object.
  void checkHealth();

  // Said at destroy, best effort: this rank leaves, and how ("destroyed its communicator after
  // entering allreduce #10 (finished)"). Rank 0 notes it for anyone who asks, and its EOF then
  // reads as a goodbye, not a death; rank 0's own goes to every rank. Costs one frame per rank.
  void leave(const std::string& how) noexcept;

  // After a call of this rank failed: what the control plane knows of why, within budgetMs. An
  // abort that reaches this rank in that time (a peer's failure, relayed by rank 0), else rank
  // 0's news (ranks that left, failed or vanished), else "" (nothing known), or that rank 0 did
  // not answer (stopped or overloaded: it relays the control plane, so that says something too).
  std::string news(int64_t budgetMs);

 private:
  struct State;
  std::unique_ptr<State> state_;
};

}  // namespace loom
