// The wire format of the reliable-datagram transport. Every datagram is one fixed header followed
// by a payload: stream bytes (kData) or the selective-ACK bitmap (kAck). All fields are
// little-endian. The header names the communicator (commId), the sending and receiving rank and
// the channel class, so that one set of sockets carries every flow of a communicator, and it ends
// with a MAC: SipHash-2-4, keyed with a secret derived from the job secret, over a keyed universal
// hash of the header's fields followed by the payload (two NH sums, UMAC's NH with 32-bit words,
// keys 4 words apart; RFC 4418) and the payload's length. The NH sums never travel, so a forger
// who changes any byte must guess them (a chance of about 2^-64 per try), and NH reads the bytes
// at memory speed with vector multiplies where a cryptographic hash over every byte would cost
// more than the copies (version 2 ran SipHash over all 72 header bytes: per 1392-byte datagram
// that took as long as NH over the payload). A datagram of a stranger, another communicator or a
// stale job fails the MAC or the identity check and is dropped and counted; replays of valid
// datagrams are old sequence numbers or old acknowledgements, which the flow ignores.
//
// Sequence numbers are 64-bit packet numbers starting at 1; a retransmission reuses its packet's
// number and stream offset. An ACK says: every packet below `ack` has arrived, and bit i of the
// bitmap (word i / 64, bit i % 64) says whether packet ack + 1 + i has arrived. Packet `ack` itself
// is missing by definition.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

namespace loom::rudp {

enum class PacketType : uint8_t {
  kData = 1,
  kAck = 2,
  kProbe = 3,  // asks for an ACK at once (liveness, a window update that may have been lost)
  kReset = 4,  // the sender's communicator failed: the flow fails at once
};

using MacKey = std::array<uint8_t, 16>;

struct Header {
  PacketType type = PacketType::kData;
  uint8_t cls = 0;   // channel class: one flow per (peer, class)
  uint8_t path = 0;  // which of the sender's sockets sent it (counters only)
  uint64_t commId = 0;
  uint32_t src = 0, dst = 0;  // ranks
  uint32_t payloadBytes = 0;
  uint64_t seq = 0;       // kData: packet number; kAck: the cumulative ack (next expected packet)
  uint64_t offset = 0;    // kData: stream offset of the payload; kAck: receive limit (flow control)
  uint64_t tsval = 0;     // the sender's clock (ns) when this datagram left
  uint64_t tsecr = 0;     // kAck: the tsval of the data packet that triggered it, echoed
  uint64_t dupCount = 0;  // kAck: duplicates the receiver has seen so far (reordering hint)
};

constexpr uint32_t kMagic = 0x55524d4c;  // "LMRU"
constexpr uint8_t kVersion = 3;
constexpr size_t kHeaderBytes = 80;
constexpr size_t kMaxDatagram = 65507;  // IPv4's UDP limit
constexpr size_t kMaxPayload = kMaxDatagram - kHeaderBytes;
constexpr size_t kMaxSackWords = (kMaxPayload / 8);

// Why a datagram was refused; kOk when it was not.
enum class ParseResult {
  kOk,
  kShort,
  kBadMagic,
  kBadVersion,
  kBadType,
  kBadLength,
  kBadMac,
  kForeign
};

uint64_t sipHash24(const MacKey& key, const void* data, size_t bytes);

// NH (RFC 4418, 32-bit words, pairs of adjacent words), twice with keys 4 words apart: sum over
// pairs of (m[2i] + k[2i]) * (m[2i+1] + k[2i+1]) (additions mod 2^32, products and sum mod 2^64),
// then the same with k shifted by 4. The data is zero-padded to whole 8-byte words; the key
// needs 2 words per 8 bytes plus 4.
std::array<uint64_t, 2> nhHash(const uint32_t* key, const void* data, size_t bytes);

// The keys of a communicator's packets, both derived from one secret: SipHash's, and NH's for
// the header's fields and payloads up to kMaxPayload bytes.
class PacketKeys {
 public:
  explicit PacketKeys(const MacKey& secret);
  const MacKey& mac() const { return mac_; }
  // The two NH sums of the header's fields (all before the MAC) followed by the payload
  // (zero-padded to whole 8-byte words). bytes <= kMaxPayload.
  std::array<uint64_t, 2> packetHash(const char* header, const void* payload, size_t bytes) const;

 private:
  MacKey mac_;
  std::vector<uint32_t> nh_;
};

// Writes the header (MAC included) for this payload into out[0, kHeaderBytes).
void encodeHeader(const Header& h, const PacketKeys& keys, std::span<const char> payload,
                  char* out);

// Parses and authenticates a datagram meant for (commId, rank). On kOk, h and payload are set.
ParseResult parseDatagram(const char* data, size_t bytes, const PacketKeys& keys, uint64_t commId,
                          uint32_t rank, Header& h, std::span<const char>& payload);
// The same for a header and a payload that lie apart (a payload received in place).
ParseResult parsePacket(const char* header, std::span<const char> payload, const PacketKeys& keys,
                        uint64_t commId, uint32_t rank, Header& h);

}  // namespace loom::rudp
