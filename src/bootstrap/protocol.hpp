// Wire protocol shared by the rendezvous root and the control plane (internal to bootstrap/).
//
// Every connection starts with a mutual challenge/response so that the job secret never crosses
// the wire:
//   server -> client  challenge: u32 magic, u16 version, u16 channel, 16-byte server nonce
//   client -> server  response:  16-byte client nonce, HMAC(secret, "loom-client"|sn|cn)
//   server -> client  verdict:   u8 status (0: accepted), HMAC(secret, "loom-server"|cn|sn)
// Without a secret both MACs are all zeros. After that, both sides exchange frames:
//   u32 type, i32 rank, u64 arg, u64 length, then length bytes of body (all little-endian).
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "base/sha256.hpp"
#include "bootstrap/bootstrap.hpp"
#include "bootstrap/socket.hpp"

namespace loom::wire {

constexpr uint32_t kProtocolMagic = 0x53424d4c;  // "LMBS" on the wire
constexpr uint16_t kProtocolVersion = 1;
constexpr size_t kNonceBytes = 16;
constexpr size_t kMacBytes = 32;
constexpr size_t kChallengeBytes = 4 + 2 + 2 + kNonceBytes;
constexpr size_t kResponseBytes = kNonceBytes + kMacBytes;
constexpr size_t kVerdictBytes = 1 + kMacBytes;
constexpr size_t kFrameHeaderBytes = 4 + 4 + 8 + 8;

// A stranger gets this long to authenticate and say hello; real ranks need milliseconds.
constexpr int64_t kHandshakeTimeoutMs = 5000;
constexpr size_t kMaxInfoBytes = size_t{1} << 20;
// A rank's rendezvous payload: its info plus the control endpoint that travels with it.
constexpr size_t kMaxRendezvousPayload = kMaxInfoBytes + 4096;
constexpr int kMaxRanks = 1 << 20;

// kData: the TCP transport's connections between ranks (transport/tcp/).
enum class Channel : uint16_t { kRendezvous = 1, kControl = 2, kData = 3 };
const char* channelName(Channel channel);

using Nonce = std::array<uint8_t, kNonceBytes>;
using Mac = std::array<uint8_t, kMacBytes>;

Mac clientMac(const JobSecret& secret, const Nonce& serverNonce, const Nonce& clientNonce);
Mac serverMac(const JobSecret& secret, const Nonce& clientNonce, const Nonce& serverNonce);
std::string encodeChallenge(Channel channel, const Nonce& serverNonce);

// Client side of the handshake; throws if the server refuses us or fails to prove the secret.
void clientHandshake(Socket& sock, Channel channel, const JobSecret& secret, Deadline deadline,
                     const std::atomic<bool>* abortFlag);

// How long a client waits for a server that says nothing before it connects again: twice the
// server's own bound, after which the server has dropped any connection it still held.
constexpr int64_t kClientSilenceMs = 2 * kHandshakeTimeoutMs;

// A server that closes the connection before its verdict is tried again this many times: on a
// lossy link it may have given up on our response after kHandshakeTimeoutMs (seen at 10 % loss).
// A server that closes every connection, or stops listening after it closed, still fails the
// client with the close (within silenceMs), not at its deadline.
constexpr int kHandshakeClosedRetries = 2;

// connectWithRetry, then clientHandshake, connecting again each time the server stays silent for
// silenceMs: on a lossy link a connection can be open at our end only (the server never got the
// handshake's last ACK, or its reset was lost), and the server never speaks on it. Also connects
// again, kHandshakeClosedRetries times, when the server closes the connection before its verdict.
// Names the socket `name` ("" keeps host:port). Throws as they do once the deadline has passed.
Socket connectAndHandshake(const std::string& host, uint16_t port, const std::string& name,
                           Channel channel, const JobSecret& secret, Deadline deadline,
                           const std::atomic<bool>* abortFlag, int logRank,
                           int64_t silenceMs = kClientSilenceMs);

enum class FrameType : uint32_t {
  kHello = 1,  // rank, arg = nranks, body = payload
  kReply = 2,  // arg = loomResult_t status, body = result or error message
  kData = 3,   // rank = sender, arg = sequence number, body = data
  kAbort = 4,  // rank = the rank that failed, arg = AbortKind, body = reason
  kLeave = 5,  // rank = the rank destroying its communicator, body = how ("destroyed ... after")
  kQuery = 6,  // a rank asks rank 0 for the news (who left, failed or vanished)
  kNews = 7,   // rank 0's answer: body = the news, "" when there is none
};
enum class AbortKind : uint64_t { kExplicit = 0, kConnectionLost = 1 };

struct Frame {
  FrameType type = FrameType::kHello;
  int32_t rank = 0;
  uint64_t arg = 0;
  std::string body;
};

std::string encodeFrame(FrameType type, int32_t rank, uint64_t arg, const std::string& body);

// Reassembles frames from a non-blocking socket across calls, so that a health probe can read
// whatever has arrived without losing a partial frame that a later collective completes.
class FrameReader {
 public:
  // Reads what is available without blocking; true once a whole frame is buffered. Throws
  // loomRemoteError on EOF, on an unknown type, or on a body longer than maxBody.
  bool pump(Socket& sock, uint64_t maxBody);
  Frame take();

 private:
  std::array<uint8_t, kFrameHeaderBytes> header_{};
  size_t headerHave_ = 0;
  Frame frame_;
  uint64_t bodyLength_ = 0;
  size_t bodyHave_ = 0;
};

Frame recvFrame(Socket& sock, uint64_t maxBody, Deadline deadline,
                const std::atomic<bool>* abortFlag);
void sendFrame(Socket& sock, FrameType type, int32_t rank, uint64_t arg, const std::string& body,
               Deadline deadline, const std::atomic<bool>* abortFlag);
// Waits for a kReply; returns its body if the status is success, else throws it as an Error.
std::string recvReply(Socket& sock, uint64_t maxBody, Deadline deadline,
                      const std::atomic<bool>* abortFlag);

// Little-endian serialization of the small structures carried in frame bodies.
class ByteWriter {
 public:
  void u8(uint8_t v) { put(v, 1); }
  void u16(uint16_t v) { put(v, 2); }
  void u32(uint32_t v) { put(v, 4); }
  void u64(uint64_t v) { put(v, 8); }
  void bytes(const std::string& s) { out_ += s; }
  void lengthPrefixed(const std::string& s) {
    u64(s.size());
    out_ += s;
  }
  std::string& str() { return out_; }

 private:
  void put(uint64_t v, int n) {
    for (int i = 0; i < n; ++i) out_.push_back(static_cast<char>(v >> (8 * i)));
  }
  std::string out_;
};

// Reads what ByteWriter wrote; throws loomRemoteError naming `what` on truncated input.
class ByteReader {
 public:
  ByteReader(const std::string& in, std::string what) : in_(in), what_(std::move(what)) {}
  uint8_t u8() { return static_cast<uint8_t>(get(1)); }
  uint16_t u16() { return static_cast<uint16_t>(get(2)); }
  uint32_t u32() { return static_cast<uint32_t>(get(4)); }
  uint64_t u64() { return get(8); }
  std::string bytes(size_t n);
  std::string lengthPrefixed() { return bytes(u64()); }
  std::string rest() { return bytes(in_.size() - pos_); }
  bool done() const { return pos_ == in_.size(); }

 private:
  uint64_t get(int n);
  const std::string& in_;
  std::string what_;
  size_t pos_ = 0;
};

// What a rank sends to the rendezvous root: the control endpoint (rank 0 only) and the caller's
// info; and the table the root sends back, every rank's entry length-prefixed in rank order.
struct RankBlob {
  std::string ctrlHost;
  uint16_t ctrlPort = 0;
  uint64_t token = 0;  // proves that a control connection belongs to this very bootstrap
  std::string info;
};
std::string encodeRankBlob(const RankBlob& blob);
RankBlob decodeRankBlob(const std::string& in, int rank);  // throws loomRemoteError if malformed
std::string encodeTable(const std::vector<std::string>& entries);
// Exactly nranks entries, nothing after them; else loomRemoteError naming `what`.
std::vector<std::string> decodeTable(const std::string& body, int nranks, const std::string& what);

// Server side: accepts connections on a listener, authenticates them and collects one hello per
// rank, handling every pending connection concurrently in one poll loop so that a silent or
// hostile stranger delays nobody. Rank and nranks conflicts are answered with loomInvalidArgument
// and logged; strangers are refused and logged.
struct GatherSpec {
  Channel channel = Channel::kRendezvous;
  JobSecret secret;
  int nranks = 0;      // 0: learned from the first valid hello
  int localRank = -1;  // a rank served in this process, so no connection may claim it
  int expected = -1;   // >= 0: done after this many hellos (not every id has to arrive)
  uint64_t maxPayload = 0;
  Deadline deadline;
  const std::atomic<bool>* abortFlag = nullptr;
  std::string what;  // names the server in logs
  int logRank = -1;
  // Extra check of a hello's payload: an error message, or "" to accept.
  std::function<std::string(const std::string&)> checkPayload;
};

struct GatherResult {
  bool complete = false;
  int nranks = 0;
  std::vector<Socket> sockets;  // by rank; invalid where none (yet) arrived
  std::vector<std::string> payloads;
  int arrived = 0;
  std::string missingRanks(int localRank) const;  // "2, 5, 7" (abbreviated when long)
};

// Returns when every rank arrived, or at the deadline (complete = false). Throws only if the
// abort flag is set or the listener fails.
GatherResult gatherHellos(int listenFd, const GatherSpec& spec);

}  // namespace loom::wire
