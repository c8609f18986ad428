// The bootstrap's wire formats, as a stranger or a broken peer may send them: frames on a
// rendezvous or control connection (FrameReader), the rendezvous entries and tables inside them,
// a rank's info (RankInfo), the server side of the handshake as a client reads it, the unique id's
// 128 bytes and the job secret's text. The first input byte picks the format.
#include <fcntl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstring>

#include "base/error.hpp"
#include "bootstrap/bootstrap.hpp"
#include "bootstrap/protocol.hpp"
#include "bootstrap/socket.hpp"
#include "fuzz_target.hpp"
#include "topology/rank_info.hpp"

using namespace loom;

namespace {

// A connection whose peer sent `bytes` and closed: reads end in EOF, never in a wait.
Socket connectionOf(const uint8_t* bytes, size_t size) {
  int fds[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds) != 0) std::abort();
  size_t sent = 0;
  while (sent < size) {
    const ssize_t n = ::write(fds[1], bytes + sent, size - sent);
    if (n <= 0) break;
    sent += static_cast<size_t>(n);
  }
  ::close(fds[1]);
  ::fcntl(fds[0], F_SETFL, ::fcntl(fds[0], F_GETFL) | O_NONBLOCK);
  return Socket(Fd(fds[0]), "fuzz");
}

void frames(const uint8_t* data, size_t size) {
  Socket sock = connectionOf(data, size);
  wire::FrameReader reader;
  try {
    for (int i = 0; i < 64 && reader.pump(sock, 1 << 20); ++i) {
      const wire::Frame f = reader.take();
      try {
        wire::decodeRankBlob(f.body, f.rank);
      } catch (const Error&) {
      }
      try {
        wire::decodeTable(f.body, 1 + static_cast<int>(f.arg % 5), "table");
      } catch (const Error&) {
      }
      try {
        RankInfo::deserialize(f.body);
      } catch (const Error&) {
      }
    }
  } catch (const Error&) {
  }
}

void handshake(const uint8_t* data, size_t size, bool withSecret) {
  Socket sock = connectionOf(data, size);
  JobSecret secret;
  if (withSecret) secret = JobSecret::fromHex("00112233445566778899aabbccddeeff");
  try {
    wire::clientHandshake(sock, wire::Channel::kRendezvous, secret, deadlineAfterMs(1000), nullptr);
    // Past the handshake (no secret: zero MACs), the reply a root would send.
    wire::recvReply(sock, 1 << 20, deadlineAfterMs(1000), nullptr);
  } catch (const Error&) {
  }
}

void uniqueId(const uint8_t* data, size_t size) {
  loomUniqueId raw{};
  std::memcpy(raw.internal, data, std::min(size, sizeof(raw.internal)));
  try {
    const UniqueId id = unpackUniqueId(raw);
    loomUniqueId again{};
    packUniqueId(id, &again);  // whatever unpacks packs again, identically
    const UniqueId back = unpackUniqueId(again);
    if (back.host != id.host || back.port != id.port || back.jobNonce != id.jobNonce) std::abort();
  } catch (const Error&) {
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const uint8_t kind = data[0] % 6;
  ++data;
  --size;
  switch (kind) {
    case 0:
      frames(data, size);
      break;
    case 1:
      handshake(data, size, false);
      break;
    case 2:
      handshake(data, size, true);
      break;
    case 3:
      uniqueId(data, size);
      break;
    case 4:
      try {
        JobSecret::fromHex(std::string(reinterpret_cast<const char*>(data), size));
      } catch (const Error&) {
      }
      break;
    default:
      try {
        RankInfo::deserialize(std::string(reinterpret_cast<const char*>(data), size));
      } catch (const Error&) {
      }
  }
  return 0;
}

void loomFuzzSeeds(std::vector<std::string>& seeds) {
  auto with = [&](char kind, const std::string& body) {
    seeds.push_back(std::string(1, kind) + body);
  };
  wire::RankBlob blob;
  blob.ctrlHost = "127.0.0.1";
  blob.ctrlPort = 4000;
  blob.token = 42;
  blob.info = "loomrank4 0 123 4026531836 -1 3 cpu 4 host 12 host/boot/ns 0 0 0 0";
  with(0, wire::encodeFrame(wire::FrameType::kHello, 0, 2, wire::encodeRankBlob(blob)) +
              wire::encodeFrame(wire::FrameType::kReply, -1, 0,
                                wire::encodeTable({wire::encodeRankBlob(blob), "x"})));
  with(0, wire::encodeFrame(wire::FrameType::kAbort, 1, 0, "rank 1 aborted"));
  with(0, wire::encodeFrame(wire::FrameType::kData, 1, 7, wire::encodeTable({"a", "bc", ""})));
  wire::Nonce nonce{};
  const std::string challenge = wire::encodeChallenge(wire::Channel::kRendezvous, nonce);
  std::string verdict(wire::kVerdictBytes, '\0');
  with(1, challenge + verdict + wire::encodeFrame(wire::FrameType::kReply, -1, 0, "table"));
  with(2, challenge + verdict);
  UniqueId id;
  id.host = "node0.example";
  id.port = 29500;
  id.jobNonce = 7;
  id.secret = JobSecret::fromHex("00112233445566778899aabbccddeeff");
  loomUniqueId packed{};
  packUniqueId(id, &packed);
  with(3, std::string(packed.internal, sizeof(packed.internal)));
  with(4, "00112233445566778899aabbccddeeff");
  RankInfo info;
  info.hostname = "host";
  info.hostId = "host/boot/ns";
  with(5, info.serialize());
}
