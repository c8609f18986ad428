#include "bootstrap/bootstrap.hpp"

#include <algorithm>
#include <cstring>
#include <mutex>
#include <thread>

#include "base/error.hpp"
#include "base/log.hpp"
#include "base/sha256.hpp"
#include "bootstrap/bootstrap_state.hpp"
#include "bootstrap/protocol.hpp"
#include "bootstrap/socket.hpp"

namespace loom {

namespace {

constexpr uint32_t kIdMagic = 0x44494d4c;  // "LMID" on the wire
constexpr uint8_t kIdVersion = 1;
constexpr uint8_t kIdFlagSecret = 1;
constexpr size_t kIdHostOffset = 4 + 1 + 1 + 2 + 8 + 16 + 1;
constexpr size_t kIdMaxHost = LOOM_UNIQUE_ID_BYTES - kIdHostOffset;

constexpr int64_t kDefaultTimeoutMs = 600000;
// The control plane carries setup exchanges, not bulk data.
constexpr uint64_t kMaxAllGatherBytes = uint64_t{64} << 20;
constexpr size_t kMaxAbortReason = 4096;
constexpr uint64_t kMaxErrorReply = 64 << 10;
constexpr size_t kTokenBytes = 8;

int hexDigit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

std::string tokenBytes(uint64_t token) {
  wire::ByteWriter w;
  w.u64(token);
  return std::move(w.str());
}

std::string abortMessage(int origin, uint64_t kind, const std::string& reason) {
  if (kind == static_cast<uint64_t>(wire::AbortKind::kConnectionLost))
    return "rank " + std::to_string(origin) + " is gone: " + reason;
  return "rank " + std::to_string(origin) + " aborted: " + reason;
}

}  // namespace

bool tryLockBefore(std::unique_lock<std::mutex>& lock, Deadline deadline) {
  while (!lock.try_lock()) {
    if (std::chrono::steady_clock::now() >= deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return true;
}

JobSecret JobSecret::random() {
  JobSecret secret;
  randomBytes(secret.bytes.data(), secret.bytes.size());
  secret.present = true;
  return secret;
}

JobSecret JobSecret::fromHex(const std::string& hex) {
  LOOM_CHECK_ARG(hex.size() == 32, "job secret must be 32 hex characters, got ", hex.size(),
                 " characters");
  JobSecret secret;
  for (size_t i = 0; i < 16; ++i) {
    int hi = hexDigit(hex[2 * i]), lo = hexDigit(hex[2 * i + 1]);
    LOOM_CHECK_ARG(hi >= 0 && lo >= 0, "job secret must be 32 hex characters, got a non-hex one");
    secret.bytes[i] = static_cast<uint8_t>(hi << 4 | lo);
  }
  secret.present = true;
  return secret;
}

std::string JobSecret::hex() const { return present ? toHex(bytes.data(), bytes.size()) : ""; }

void packUniqueId(const UniqueId& id, loomUniqueId* out) {
  LOOM_CHECK_ARG(out != nullptr, "packUniqueId: null output");
  LOOM_CHECK_ARG(!id.host.empty(), "unique id without a rendezvous host");
  LOOM_CHECK_ARG(id.host.size() <= kIdMaxHost, "rendezvous host '", id.host, "' is longer than ",
                 kIdMaxHost, " bytes, the most a unique id can carry");
  wire::ByteWriter w;
  w.u32(kIdMagic);
  w.u8(kIdVersion);
  w.u8(id.secret.present ? kIdFlagSecret : 0);
  w.u16(id.port);
  w.u64(id.jobNonce);
  w.bytes(std::string(reinterpret_cast<const char*>(id.secret.bytes.data()), 16));
  w.u8(static_cast<uint8_t>(id.host.size()));
  w.bytes(id.host);
  std::memset(out->internal, 0, sizeof(out->internal));
  std::memcpy(out->internal, w.str().data(), w.str().size());
}

UniqueId unpackUniqueId(const loomUniqueId& in) {
  std::string raw(in.internal, sizeof(in.internal));
  wire::ByteReader r(raw, "unique id");
  LOOM_CHECK_ARG(r.u32() == kIdMagic,
                 "not a Loom unique id (bad magic): was it made by loomGetUniqueId and copied "
                 "intact?");
  uint8_t version = r.u8();
  LOOM_CHECK_ARG(version == kIdVersion, "unique id version ", int{version},
                 " is not supported by this build (expects ", int{kIdVersion}, ")");
  UniqueId id;
  uint8_t flags = r.u8();
  id.port = r.u16();
  id.jobNonce = r.u64();
  std::string secret = r.bytes(16);
  std::memcpy(id.secret.bytes.data(), secret.data(), 16);
  id.secret.present = (flags & kIdFlagSecret) != 0;
  if (!id.secret.present) id.secret.bytes.fill(0);
  size_t hostLen = r.u8();
  LOOM_CHECK_ARG(hostLen > 0 && hostLen <= kIdMaxHost, "corrupt unique id (host length ", hostLen,
                 ")");
  id.host = r.bytes(hostLen);
  return id;
}

JobSecret deriveSecret(const JobSecret& parent, uint64_t jobNonce, const std::string& label) {
  JobSecret child;
  if (!parent.present) return child;
  HmacSha256 mac(parent.bytes.data(), parent.bytes.size());
  mac.update(label);
  // The separator keeps ("ab", nonce) and ("a", "b"-prefixed nonce) apart.
  uint8_t separator = 0;
  mac.update(&separator, 1);
  std::string nonce = tokenBytes(jobNonce);
  mac.update(nonce);
  Sha256Digest digest = mac.finish();
  std::memcpy(child.bytes.data(), digest.data(), child.bytes.size());
  child.present = true;
  return child;
}

void Bootstrap::State::throwIfFailed() {
  if (!failed.load()) return;
  std::lock_guard<std::mutex> lock(failMutex);
  LOOM_THROW(failCode, failMessage);
}

void Bootstrap::State::recordFailure(const Error& e) {
  std::lock_guard<std::mutex> lock(failMutex);
  if (failed.load()) return;  // the first failure is the cause; later ones are its echoes
  failCode = e.code();
  failMessage = e.what();
  failed.store(true);
}

// Reads every whole frame available now, without blocking.
void Bootstrap::State::drain(ControlPeer& peer) {
  while (true) {
    bool whole = false;
    try {
      whole = peer.reader.pump(peer.sock, peer.maxBody);
    } catch (const Error& e) {
      // A peer may send its last message and close at once (rank 0 answering a barrier, then
      // destroying its communicator): a complete message that arrived before the EOF is still
      // delivered, and the EOF is reported by the next read, when that message has been taken.
      if (e.code() == loomRemoteError && peer.hasData) return;
      if (e.code() == loomRemoteError) onPeerLost(peer, e);
      throw;
    }
    if (!whole) return;
    wire::Frame frame = peer.reader.take();
    if (takeNotice(peer, frame)) continue;
    // A peer is at most one collective ahead: it waits for each result before the next call.
    if (peer.hasData)
      LOOM_THROW(loomRemoteError, peer.sock.peer(),
                 " is out of step: a second message arrived for collective #", peer.dataSeq);
    peer.hasData = true;
    peer.dataSeq = frame.arg;
    peer.data = std::move(frame.body);
    // What follows the data (rank 0 aborting right after it answered: LOOM_CHECK found a
    // mismatch) is for the next read, once this collective has used the data.
    return;
  }
}

void Bootstrap::State::onPeerLost(ControlPeer& peer, const Error& cause) {
  peer.closed = true;
  // A goodbye: nobody else needs telling (they ask rank 0 if a call of theirs fails).
  if (peer.left)
    LOOM_THROW(loomRemoteError, "rank ", peer.rank, " ", peer.leftHow,
               peer.rank == 0 ? " (the control plane went with it)" : "");
  if (rank == 0) {
    noteNews(peer.rank, std::string("rank ") + std::to_string(peer.rank) +
                            " is gone: its control connection closed without a goodbye (" +
                            cause.what() + ")");
    // The first failure is the cause, relayed; the deaths after it are noted, not relayed: ranks
    // that exit all at once without destroying their communicators would cost a frame per pair.
    if (!failed.load())
      forwardAbort(peer.rank, wire::AbortKind::kConnectionLost,
                   std::string("its control connection to rank 0 closed (") + cause.what() + ")",
                   peer.rank);
  }
  LOOM_THROW(loomRemoteError, "rank ", peer.rank, " is gone: ", cause.what(),
             " (the process died, or exited without destroying its communicator)");
}

void Bootstrap::State::onAbortFrame(ControlPeer& peer, const wire::Frame& frame) {
  // Only rank 0 relays: everyone else's one connection leads to rank 0.
  if (rank == 0) {
    // As for deaths: the first failure is relayed, its echoes (every rank aborting) are not.
    if (!failed.load())
      forwardAbort(frame.rank, static_cast<wire::AbortKind>(frame.arg), frame.body, peer.rank);
    noteNews(frame.rank, abortMessage(frame.rank, frame.arg, frame.body));
  }
  LOOM_THROW(loomRemoteError, abortMessage(frame.rank, frame.arg, frame.body));
}

void Bootstrap::State::forwardAbort(int origin, wire::AbortKind kind, const std::string& reason,
                                    int exceptRank) noexcept {
  try {
    std::string frame =
        wire::encodeFrame(wire::FrameType::kAbort, origin, static_cast<uint64_t>(kind),
                          reason.substr(0, kMaxAbortReason));
    Deadline deadline = deadlineAfterMs(kAbortBudgetMs);
    for (auto& peer : peers)
      if (peer->rank != exceptRank) sendBestEffort(*peer, frame, deadline);
  } catch (...) {
  }
}

void Bootstrap::State::sendBestEffort(ControlPeer& peer, const std::string& frame,
                                      Deadline deadline) noexcept {
  std::unique_lock<std::mutex> lock(peer.sendMutex, std::defer_lock);
  size_t sent = 0;
  if (tryLockBefore(lock, deadline)) {
    try {
      std::vector<pollfd> fds{{peer.sock.fd(), POLLOUT, 0}};
      while (true) {
        sent += peer.sock.sendSome(frame.data() + sent, frame.size() - sent);
        if (sent == frame.size() || std::chrono::steady_clock::now() >= deadline) break;
        pollSlice(fds, deadline);
      }
    } catch (...) {
    }
  }
  // A truncated frame would leave the peer waiting for the rest; EOF at least tells it we are gone.
  if (sent != frame.size()) peer.sock.shutdown();
}

void Bootstrap::State::sendLocked(ControlPeer& peer, const std::string& frame, Deadline deadline) {
  std::lock_guard<std::mutex> lock(peer.sendMutex);
  try {
    peer.sock.sendAll(frame.data(), frame.size(), deadline, abortFlag);
  } catch (const Error& e) {
    if (e.code() == loomRemoteError && !aborted()) onPeerLost(peer, e);
    throw;
  }
}

std::vector<std::string> Bootstrap::State::gatherAtRank0(const std::string& mine,
                                                         Deadline deadline) {
  std::vector<pollfd> fds;
  while (true) {
    std::string missing;
    int missingCount = 0;
    for (auto& peer : peers) {
      if (!peer->hasData) {
        if (++missingCount <= 16)
          missing += (missing.empty() ? "" : ", ") + std::to_string(peer->rank);
      } else if (peer->dataSeq != seq) {
        LOOM_THROW(loomRemoteError, peer->sock.peer(), " is out of step: it sent collective #",
                   peer->dataSeq, " while rank 0 is in #", seq);
      }
    }
    if (missingCount == 0) break;
    throwIfAborted(abortFlag);
    if (std::chrono::steady_clock::now() >= deadline) {
      if (missingCount > 16) missing += " and " + std::to_string(missingCount - 16) + " more";
      LOOM_THROW(loomTimeout, "control collective #", seq, " timed out after ", timeoutMs,
                 " ms at rank 0 waiting for rank(s) ", missing);
    }
    // Every connection is watched, not just the missing ones, so an abort or a death anywhere
    // ends the wait at once.
    fds.clear();
    for (auto& peer : peers) fds.push_back({peer->sock.fd(), POLLIN, 0});
    pollSlice(fds, deadline);
    for (size_t i = 0; i < peers.size(); ++i)
      if (fds[i].revents != 0) drain(*peers[i]);
  }
  std::vector<std::string> all(nranks);
  all[0] = mine;
  for (auto& peer : peers) {
    all[peer->rank] = std::move(peer->data);
    peer->hasData = false;
  }
  pokeService();
  std::string reply = wire::encodeFrame(wire::FrameType::kData, 0, seq, wire::encodeTable(all));
  for (auto& peer : peers) sendLocked(*peer, reply, deadline);
  return all;
}

std::vector<std::string> Bootstrap::State::gatherAtLeaf(const std::string& mine,
                                                        Deadline deadline) {
  ControlPeer& root = *peers[0];
  sendLocked(root, wire::encodeFrame(wire::FrameType::kData, rank, seq, mine), deadline);
  std::vector<pollfd> fds{{root.sock.fd(), POLLIN, 0}};
  while (!root.hasData) {
    throwIfAborted(abortFlag);
    if (std::chrono::steady_clock::now() >= deadline)
      LOOM_THROW(loomTimeout, "control collective #", seq, " timed out after ", timeoutMs,
                 " ms at rank ", rank, " waiting for rank 0");
    fds[0].revents = 0;
    if (pollSlice(fds, deadline) > 0) drain(root);
  }
  root.hasData = false;
  if (root.dataSeq != seq)
    LOOM_THROW(loomRemoteError, "rank 0 is out of step: it answered collective #", root.dataSeq,
               " while rank ", rank, " is in #", seq);
  return wire::decodeTable(root.data, nranks, "collective result from rank 0");
}

void Bootstrap::State::acceptControl(Listener& listener, uint64_t token, const JobSecret& secret,
                                     Deadline deadline) {
  wire::GatherSpec spec;
  spec.channel = wire::Channel::kControl;
  spec.secret = secret;
  spec.nranks = nranks;
  spec.localRank = 0;
  spec.maxPayload = kTokenBytes;
  spec.deadline = deadline;
  spec.abortFlag = abortFlag;
  spec.what = "control endpoint of rank 0 (port " + std::to_string(listener.port) + ")";
  spec.logRank = 0;
  std::string expected = tokenBytes(token);
  spec.checkPayload = [&expected](const std::string& payload) -> std::string {
    return payload == expected ? "" : "belongs to a different bootstrap of this job";
  };
  wire::GatherResult result = wire::gatherHellos(listener.fd.get(), spec);
  listener.fd.reset();
  if (!result.complete) {
    std::string why = "control plane setup timed out after " + std::to_string(timeoutMs) +
                      " ms: ranks " + result.missingRanks(0) + " never connected to rank 0";
    std::string reply = wire::encodeFrame(wire::FrameType::kReply, -1, loomTimeout, why);
    for (Socket& sock : result.sockets) {
      try {
        if (sock.valid()) sock.sendSome(reply.data(), reply.size());
      } catch (const Error&) {
      }
    }
    LOOM_THROW(loomTimeout, why);
  }
  uint64_t maxBody = kMaxAllGatherBytes;
  for (int r = 1; r < nranks; ++r) {
    auto peer = std::make_unique<ControlPeer>();
    peer->rank = r;
    peer->sock = std::move(result.sockets[r]);
    peer->maxBody = maxBody;
    wire::sendFrame(peer->sock, wire::FrameType::kReply, 0, loomSuccess, "", deadline, abortFlag);
    peers.push_back(std::move(peer));
  }
}

void Bootstrap::State::connectControl(const wire::RankBlob& rank0, const JobSecret& secret,
                                      Deadline deadline) {
  if (rank0.ctrlHost.empty()) LOOM_THROW(loomRemoteError, "rank 0 published no control endpoint");
  auto peer = std::make_unique<ControlPeer>();
  peer->rank = 0;
  peer->sock =
      wire::connectAndHandshake(rank0.ctrlHost, rank0.ctrlPort,
                                "rank 0 (" + joinHostPort(rank0.ctrlHost, rank0.ctrlPort) + ")",
                                wire::Channel::kControl, secret, deadline, abortFlag, rank);
  wire::sendFrame(peer->sock, wire::FrameType::kHello, rank, static_cast<uint64_t>(nranks),
                  tokenBytes(rank0.token), deadline, abortFlag);
  wire::recvReply(peer->sock, kMaxErrorReply, deadline, abortFlag);
  // A result holds every rank's contribution, each length-prefixed.
  peer->maxBody = static_cast<uint64_t>(nranks) * (kMaxAllGatherBytes + 8);
  peers.push_back(std::move(peer));
}

Bootstrap::Bootstrap(const UniqueId& id, int rank, int nranks, const std::string& myInfo,
                     Options options)
    : state_(std::make_unique<State>()) {
  LOOM_CHECK_ARG(nranks >= 1 && nranks <= wire::kMaxRanks, "nranks = ", nranks,
                 " is out of range [1, ", wire::kMaxRanks, "]");
  LOOM_CHECK_ARG(rank >= 0 && rank < nranks, "rank ", rank,
                 " is out of range for nranks = ", nranks);
  LOOM_CHECK_ARG(myInfo.size() <= wire::kMaxInfoBytes, "rank info of ", myInfo.size(),
                 " bytes exceeds the limit of ", wire::kMaxInfoBytes, " bytes");
  State& s = *state_;
  s.rank = rank;
  s.nranks = nranks;
  s.timeoutMs = options.timeoutMs > 0 ? options.timeoutMs : kDefaultTimeoutMs;
  s.abortFlag = options.abortFlag;
  // Said once per job (rank 0), not once per rank: every rank has the same secret or none.
  if (!id.secret.present && rank == 0)
    LOOM_WARN(kSubsysBootstrap, rank,
              "the rendezvous is unauthenticated: no job secret, so any process that reaches the "
              "port can join. Give every rank the same LOOM_JOB_SECRET (32 hex digits), e.g. "
              "LOOM_JOB_SECRET=$(openssl rand -hex 16) torchrun ...; loomrun sets it itself");
  Deadline deadline = deadlineAfterMs(s.timeoutMs);

  Socket root;
  try {
    root = wire::connectAndHandshake(
        id.host, id.port, "rendezvous root " + joinHostPort(id.host, id.port),
        wire::Channel::kRendezvous, id.secret, deadline, s.abortFlag, rank);
  } catch (const Error& e) {
    if (e.code() != loomTimeout) throw;
    LOOM_THROW(loomTimeout, "rank ", rank, " could not reach the rendezvous root within ",
               s.timeoutMs, " ms: ", e.what());
  }

  // Rank 0 listens on the interface that reaches the root: the others reach the root too.
  Listener listener;
  wire::RankBlob mine;
  mine.info = myInfo;
  if (rank == 0 && nranks > 1) {
    mine.ctrlHost = root.localHost();
    listener = listenTcp(mine.ctrlHost, 0);
    mine.ctrlPort = listener.port;
    randomBytes(&mine.token, sizeof(mine.token));
  }
  wire::sendFrame(root, wire::FrameType::kHello, rank, static_cast<uint64_t>(nranks),
                  wire::encodeRankBlob(mine), deadline, s.abortFlag);
  uint64_t maxTable = static_cast<uint64_t>(nranks) * (wire::kMaxRendezvousPayload + 8);
  // A little past our own timeout (a quarter of it, at most a second): a root that gives up at
  // about the same moment sends why (which ranks never came), and that beats "timed out waiting
  // for a message".
  const auto grace = std::min<int64_t>(1000, s.timeoutMs / 4);
  std::string table = wire::recvReply(root, std::max(maxTable, kMaxErrorReply),
                                      deadline + std::chrono::milliseconds(grace), s.abortFlag);
  root.close();
  std::vector<std::string> entries = wire::decodeTable(table, nranks, "rendezvous table");
  wire::RankBlob rank0;
  s.infos.resize(nranks);
  for (int r = 0; r < nranks; ++r) {
    wire::RankBlob blob = wire::decodeRankBlob(entries[r], r);
    s.infos[r] = std::move(blob.info);
    if (r == 0) rank0 = std::move(blob);
  }
  if (nranks > 1) {
    if (rank == 0) {
      s.acceptControl(listener, mine.token, id.secret, deadline);
    } else {
      s.connectControl(rank0, id.secret, deadline);
    }
  }
  if (rank == 0 && nranks > 1) s.startService();
  LOOM_INFO(kSubsysBootstrap, rank, "bootstrap of ", nranks, " ranks via ",
            joinHostPort(id.host, id.port), " ready");
}

Bootstrap::~Bootstrap() { state_->stopService(); }

int Bootstrap::rank() const { return state_->rank; }
int Bootstrap::nranks() const { return state_->nranks; }
const std::vector<std::string>& Bootstrap::rankInfos() const { return state_->infos; }

std::vector<std::string> Bootstrap::allGather(const std::string& mine) {
  State& s = *state_;
  std::lock_guard<std::mutex> lock(s.callMutex);
  s.throwIfFailed();
  LOOM_CHECK_ARG(mine.size() <= kMaxAllGatherBytes, "bootstrap allGather of ", mine.size(),
                 " bytes exceeds the limit of ", kMaxAllGatherBytes, " bytes");
  if (s.nranks == 1) return {mine};
  ++s.seq;
  Deadline deadline = deadlineAfterMs(s.timeoutMs);
  try {
    return s.rank == 0 ? s.gatherAtRank0(mine, deadline) : s.gatherAtLeaf(mine, deadline);
  } catch (const Error& e) {
    // Partial frames may be left behind on the connections: nothing after this can be trusted.
    // The first failure is reported, not its echoes (an abort, then the aborter's EOF).
    s.recordFailure(e);
    s.throwIfFailed();
    throw;
  }
}

void Bootstrap::barrier() { allGather(std::string()); }

void Bootstrap::broadcastAbort(const std::string& reason) noexcept {
  State& s = *state_;
  try {
    s.recordFailure(Error(loomRemoteError,
                          "rank " + std::to_string(s.rank) + " aborted the bootstrap: " + reason));
  } catch (...) {
  }
  s.forwardAbort(s.rank, wire::AbortKind::kExplicit, reason, -1);
  // EOF right behind the abort: peers read the reason first, and a collective of this rank
  // blocked on another thread wakes up instead of waiting out its deadline.
  for (auto& peer : s.peers) peer->sock.shutdown();
}

void Bootstrap::checkHealth() {
  State& s = *state_;
  s.throwIfFailed();
  std::unique_lock<std::mutex> lock(s.callMutex, std::try_to_lock);
  if (!lock.owns_lock() || s.peers.empty()) return;
  std::vector<pollfd> fds;
  for (auto& peer : s.peers) fds.push_back({peer->sock.fd(), POLLIN, 0});
  if (::poll(fds.data(), fds.size(), 0) <= 0) return;
  try {
    for (size_t i = 0; i < s.peers.size(); ++i)
      if (fds[i].revents != 0) s.drain(*s.peers[i]);
  } catch (const Error& e) {
    s.recordFailure(e);
    s.throwIfFailed();
    throw;
  }
}

}  // namespace loom
