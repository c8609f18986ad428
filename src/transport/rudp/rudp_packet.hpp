// The wire format of the reliable-datagram transport. Every datagram is one fixed header followed
// by a payload: stream bytes (kData) or the selective-ACK bitmap (kAck). All fields are
// little-endian. The header names the communicator (commId), the sending and receiving rank and
// the channel class, so that one set of sockets carries every flow of a communicator, and it ends
// with a MAC: SipHash-2-4, keyed with a secret derived from the job secret, over the header, which
// includes a digest of the payload. A datagram of a stranger, another communicator or a stale job
// fails the MAC or the identity check and is dropped and counted; replays of valid datagrams are
// old sequence numbers or old acknowledgements, which the flow ignores.
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
constexpr uint8_t kVersion = 1;
constexpr size_t kHeaderBytes = 88;
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
// A fast, unkeyed 64-bit digest of the payload; the keyed MAC covers it.
uint64_t payloadDigest(const void* data, size_t bytes);

// Writes the header (MAC included) for this payload into out[0, kHeaderBytes).
void encodeHeader(const Header& h, const MacKey& key, std::span<const char> payload, char* out);

// Parses and authenticates a datagram meant for (commId, rank). On kOk, h and payload are set.
ParseResult parseDatagram(const char* data, size_t bytes, const MacKey& key, uint64_t commId,
                          uint32_t rank, Header& h, std::span<const char>& payload);

}  // namespace loom::rudp
