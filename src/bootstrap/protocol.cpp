#include "bootstrap/protocol.hpp"

#include <algorithm>
#include <chrono>
#include <cstring>

#include "base/error.hpp"
#include "base/log.hpp"

namespace loom::wire {

namespace {

constexpr char kClientLabel[] = "loom-client";
constexpr char kServerLabel[] = "loom-server";

Mac computeMac(const JobSecret& secret, const char* label, const Nonce& first,
               const Nonce& second) {
  Mac mac{};
  if (!secret.present) return mac;  // unauthenticated mode: all zeros both ways
  HmacSha256 h(secret.bytes.data(), secret.bytes.size());
  h.update(label, std::strlen(label));
  h.update(first.data(), first.size());
  h.update(second.data(), second.size());
  Sha256Digest digest = h.finish();
  std::memcpy(mac.data(), digest.data(), mac.size());
  return mac;
}

uint64_t loadLittleEndian(const uint8_t* p, int n) {
  uint64_t v = 0;
  for (int i = 0; i < n; ++i) v |= uint64_t{p[i]} << (8 * i);
  return v;
}

std::string secretHint(const JobSecret& secret) {
  return secret.present ? " (the job secrets differ: check LOOM_JOB_SECRET and the unique id)"
                        : " (this rank has no job secret: set LOOM_JOB_SECRET, as loomrun does)";
}

}  // namespace

const char* channelName(Channel channel) {
  switch (channel) {
    case Channel::kRendezvous:
      return "rendezvous root";
    case Channel::kControl:
      return "control endpoint";
    case Channel::kData:
      return "data endpoint";
  }
  return "endpoint";
}

Mac clientMac(const JobSecret& secret, const Nonce& serverNonce, const Nonce& clientNonce) {
  return computeMac(secret, kClientLabel, serverNonce, clientNonce);
}

Mac serverMac(const JobSecret& secret, const Nonce& clientNonce, const Nonce& serverNonce) {
  return computeMac(secret, kServerLabel, clientNonce, serverNonce);
}

std::string encodeChallenge(Channel channel, const Nonce& serverNonce) {
  ByteWriter w;
  w.u32(kProtocolMagic);
  w.u16(kProtocolVersion);
  w.u16(static_cast<uint16_t>(channel));
  w.bytes(std::string(reinterpret_cast<const char*>(serverNonce.data()), serverNonce.size()));
  return std::move(w.str());
}

void clientHandshake(Socket& sock, Channel channel, const JobSecret& secret, Deadline deadline,
                     const std::atomic<bool>* abortFlag) {
  uint8_t challenge[kChallengeBytes];
  sock.recvAll(challenge, sizeof(challenge), deadline, abortFlag);
  if (loadLittleEndian(challenge, 4) != kProtocolMagic)
    LOOM_THROW(loomInvalidArgument, sock.peer(), " is not a Loom ", channelName(channel),
               " (it does not speak the bootstrap protocol)");
  auto version = static_cast<uint16_t>(loadLittleEndian(challenge + 4, 2));
  if (version != kProtocolVersion)
    LOOM_THROW(loomInvalidUsage, sock.peer(), " speaks bootstrap protocol version ", version,
               " but this build of Loom speaks version ", kProtocolVersion);
  auto theirChannel = static_cast<Channel>(loadLittleEndian(challenge + 6, 2));
  if (theirChannel != channel)
    LOOM_THROW(loomInvalidArgument, sock.peer(), " is a Loom ", channelName(theirChannel),
               ", not a ", channelName(channel));
  Nonce serverNonce, clientNonce;
  std::memcpy(serverNonce.data(), challenge + 8, kNonceBytes);
  randomBytes(clientNonce.data(), clientNonce.size());

  uint8_t response[kResponseBytes];
  Mac mine = clientMac(secret, serverNonce, clientNonce);
  std::memcpy(response, clientNonce.data(), kNonceBytes);
  std::memcpy(response + kNonceBytes, mine.data(), kMacBytes);
  sock.sendAll(response, sizeof(response), deadline, abortFlag);

  uint8_t verdict[kVerdictBytes];
  sock.recvAll(verdict, sizeof(verdict), deadline, abortFlag);
  if (verdict[0] != 0)
    LOOM_THROW(loomInvalidArgument, sock.peer(), " refused this rank: authentication failed",
               secretHint(secret));
  Mac expected = serverMac(secret, clientNonce, serverNonce);
  // A server that cannot prove the secret may be a stale or foreign endpoint on a reused port.
  if (!constantTimeEqual(expected.data(), verdict + 1, kMacBytes))
    LOOM_THROW(loomInvalidArgument, sock.peer(), " failed to prove the job secret: not this job's ",
               channelName(channel), secretHint(secret));
}

Socket connectAndHandshake(const std::string& host, uint16_t port, const std::string& name,
                           Channel channel, const JobSecret& secret, Deadline deadline,
                           const std::atomic<bool>* abortFlag, int logRank, int64_t silenceMs) {
  int closedRetries = kHandshakeClosedRetries;
  // Why the server closed the last handshake, once one did: a server that closed on us still
  // listens, so reaching it again gets silenceMs, and failing that, the close is the error (a
  // server that died must not cost the rest of the deadline in refused connections).
  std::string closedWhy;
  for (int attempt = 1;; ++attempt) {
    const Deadline connectBy =
        closedWhy.empty() ? deadline : std::min(deadline, deadlineAfterMs(silenceMs));
    Socket sock;
    try {
      sock = connectWithRetry(host, port, connectBy, abortFlag);
    } catch (const Error& e) {
      if (e.code() != loomTimeout || closedWhy.empty()) throw;
      LOOM_THROW(loomRemoteError, closedWhy, ", and connecting again found nothing listening (",
                 e.what(), ")");
    }
    if (!name.empty()) sock.setPeer(name);
    Deadline attemptEnd = std::min(deadline, deadlineAfterMs(silenceMs));
    try {
      clientHandshake(sock, channel, secret, attemptEnd, abortFlag);
      return sock;
    } catch (const Error& e) {
      if (std::chrono::steady_clock::now() >= deadline) throw;
      throwIfAborted(abortFlag);  // an abort is no reason to connect again
      if (e.code() == loomTimeout) {
        LOOM_WARN(kSubsysBootstrap, logRank, sock.peer(), " said nothing for ", silenceMs,
                  " ms after connection ", attempt, " was made; connecting again");
      } else if (e.code() == loomRemoteError && closedRetries > 0) {
        --closedRetries;
        closedWhy = e.what();
        LOOM_WARN(kSubsysBootstrap, logRank, "the handshake on connection ", attempt, " broke (",
                  closedWhy, "); connecting again");
      } else {
        throw;
      }
    }
  }
}

std::string encodeFrame(FrameType type, int32_t rank, uint64_t arg, const std::string& body) {
  ByteWriter w;
  w.str().reserve(kFrameHeaderBytes + body.size());
  w.u32(static_cast<uint32_t>(type));
  w.u32(static_cast<uint32_t>(rank));
  w.u64(arg);
  w.u64(body.size());
  w.bytes(body);
  return std::move(w.str());
}

bool FrameReader::pump(Socket& sock, uint64_t maxBody) {
  while (true) {
    if (headerHave_ < kFrameHeaderBytes) {
      size_t got = sock.recvSome(header_.data() + headerHave_, kFrameHeaderBytes - headerHave_);
      if (got == 0) return false;
      headerHave_ += got;
      if (headerHave_ < kFrameHeaderBytes) continue;
      auto type = static_cast<uint32_t>(loadLittleEndian(header_.data(), 4));
      if (type < static_cast<uint32_t>(FrameType::kHello) ||
          type > static_cast<uint32_t>(FrameType::kNews))
        LOOM_THROW(loomRemoteError, "malformed message (type ", type, ") from ", sock.peer());
      frame_.type = static_cast<FrameType>(type);
      frame_.rank = static_cast<int32_t>(loadLittleEndian(header_.data() + 4, 4));
      frame_.arg = loadLittleEndian(header_.data() + 8, 8);
      bodyLength_ = loadLittleEndian(header_.data() + 16, 8);
      // Checked before allocating, so a corrupt length cannot exhaust memory.
      if (bodyLength_ > maxBody)
        LOOM_THROW(loomRemoteError, "message of ", bodyLength_, " bytes from ", sock.peer(),
                   " exceeds the limit of ", maxBody, " bytes");
      frame_.body.assign(bodyLength_, '\0');
      bodyHave_ = 0;
    }
    if (bodyHave_ == bodyLength_) return true;
    size_t got = sock.recvSome(frame_.body.data() + bodyHave_, bodyLength_ - bodyHave_);
    if (got == 0) return false;
    bodyHave_ += got;
  }
}

Frame FrameReader::take() {
  Frame frame = std::move(frame_);
  frame_ = Frame();
  headerHave_ = 0;
  bodyLength_ = 0;
  bodyHave_ = 0;
  return frame;
}

Frame recvFrame(Socket& sock, uint64_t maxBody, Deadline deadline,
                const std::atomic<bool>* abortFlag) {
  FrameReader reader;
  while (!reader.pump(sock, maxBody))
    waitReady(sock.fd(), POLLIN, deadline, abortFlag, "waiting for a message from " + sock.peer());
  return reader.take();
}

void sendFrame(Socket& sock, FrameType type, int32_t rank, uint64_t arg, const std::string& body,
               Deadline deadline, const std::atomic<bool>* abortFlag) {
  std::string frame = encodeFrame(type, rank, arg, body);
  sock.sendAll(frame.data(), frame.size(), deadline, abortFlag);
}

std::string recvReply(Socket& sock, uint64_t maxBody, Deadline deadline,
                      const std::atomic<bool>* abortFlag) {
  Frame frame = recvFrame(sock, maxBody, deadline, abortFlag);
  if (frame.type != FrameType::kReply)
    LOOM_THROW(loomRemoteError, "unexpected message (type ", static_cast<uint32_t>(frame.type),
               ") from ", sock.peer());
  if (frame.arg == loomSuccess) return std::move(frame.body);
  auto code = frame.arg < loomNumResults ? static_cast<loomResult_t>(frame.arg) : loomRemoteError;
  LOOM_THROW(code, sock.peer(), ": ", frame.body);
}

std::string ByteReader::bytes(size_t n) {
  if (n > in_.size() - pos_)
    LOOM_THROW(loomRemoteError, "truncated ", what_, " (", in_.size(), " bytes)");
  std::string out = in_.substr(pos_, n);
  pos_ += n;
  return out;
}

uint64_t ByteReader::get(int n) {
  if (static_cast<size_t>(n) > in_.size() - pos_)
    LOOM_THROW(loomRemoteError, "truncated ", what_, " (", in_.size(), " bytes)");
  uint64_t v = loadLittleEndian(reinterpret_cast<const uint8_t*>(in_.data()) + pos_, n);
  pos_ += static_cast<size_t>(n);
  return v;
}

std::string encodeRankBlob(const RankBlob& blob) {
  ByteWriter w;
  w.lengthPrefixed(blob.ctrlHost);
  w.u16(blob.ctrlPort);
  w.u64(blob.token);
  w.bytes(blob.info);
  return std::move(w.str());
}

RankBlob decodeRankBlob(const std::string& in, int rank) {
  ByteReader r(in, "rendezvous entry of rank " + std::to_string(rank));
  RankBlob blob;
  blob.ctrlHost = r.lengthPrefixed();
  blob.ctrlPort = r.u16();
  blob.token = r.u64();
  blob.info = r.rest();
  return blob;
}

std::vector<std::string> decodeTable(const std::string& body, int nranks, const std::string& what) {
  ByteReader r(body, what);
  std::vector<std::string> entries(nranks);
  for (std::string& e : entries) e = r.lengthPrefixed();
  if (!r.done()) LOOM_THROW(loomRemoteError, "malformed ", what, " (trailing bytes)");
  return entries;
}

std::string encodeTable(const std::vector<std::string>& entries) {
  ByteWriter w;
  for (const std::string& e : entries) w.lengthPrefixed(e);
  return std::move(w.str());
}

std::string GatherResult::missingRanks(int localRank) const {
  std::string out;
  int listed = 0, missing = 0;
  for (int r = 0; r < nranks; ++r) {
    if (r == localRank || sockets[r].valid()) continue;
    ++missing;
    if (listed < 16) {
      out += (listed > 0 ? ", " : "") + std::to_string(r);
      ++listed;
    }
  }
  if (missing > listed) out += " and " + std::to_string(missing - listed) + " more";
  return out;
}

}  // namespace loom::wire
