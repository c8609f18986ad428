// The reliable-datagram transport's packets: datagrams as anyone on the network may send them
// (parseDatagram: the MAC and identity checks must refuse them cleanly), and, behind the MAC,
// packets a peer with the key may send, however odd (acknowledgements of packets never sent,
// offsets far outside the window, resets, probes): the flow (rudp_flow.hpp) must take them
// without breaking its invariants. The first input byte picks which.
#include <cstring>

#include "fuzz_target.hpp"
#include "transport/rudp/rudp_flow.hpp"
#include "transport/rudp/rudp_packet.hpp"

using namespace loom::rudp;

namespace {

constexpr uint64_t kComm = 0x1234;
const PacketKeys& keys() {
  static const PacketKeys k(MacKey{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16});
  return k;
}

uint64_t take(const uint8_t*& data, size_t& size, int bytes) {
  uint64_t v = 0;
  for (int i = 0; i < bytes && size > 0; ++i, --size) v |= uint64_t{*data++} << (8 * i);
  return v;
}

void authenticPackets(const uint8_t* data, size_t size) {
  FlowConfig config;
  config.windowBytes = 64 << 10;
  config.mss = 1024;
  Flow flow(config);
  std::vector<char> out(64 << 10, 'x');
  flow.write(out.data(), 20000);  // data in flight to be acknowledged (or not)
  std::vector<Outgoing> sent;
  uint64_t now = 1'000'000;
  flow.collect(now, sent, 64);
  std::vector<char> datagram(kMaxDatagram);
  for (int packet = 0; packet < 16 && size >= 8; ++packet) {
    Header h;
    h.type = static_cast<PacketType>(1 + take(data, size, 1) % 4);
    h.cls = 0;
    h.commId = kComm;
    h.src = 1;
    h.dst = 0;
    h.seq = take(data, size, 8);
    h.offset = take(data, size, 8);
    h.tsval = take(data, size, 8);
    h.tsecr = take(data, size, 8);
    h.dupCount = take(data, size, 2);
    const size_t bytes = std::min<size_t>(take(data, size, 2) % 2048, size);
    h.payloadBytes = static_cast<uint32_t>(bytes);
    encodeHeader(h, keys(), {reinterpret_cast<const char*>(data), bytes}, datagram.data());
    std::memcpy(datagram.data() + kHeaderBytes, data, bytes);
    data += bytes;
    size -= bytes;
    Header parsed;
    std::span<const char> payload;
    if (parseDatagram(datagram.data(), kHeaderBytes + bytes, keys(), kComm, 0, parsed, payload) !=
        ParseResult::kOk)
      continue;  // refused as the engine would
    now += take(data, size, 3);
    flow.onPacket(parsed, payload, now);
    sent.clear();
    flow.collect(now, sent, 64);
    std::span<const char> readable = flow.readable(4096);
    flow.consume(readable.size());
    (void)flow.nextTimer();
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  if (data[0] % 2 == 0) {
    Header h;
    std::span<const char> payload;
    parseDatagram(reinterpret_cast<const char*>(data + 1), size - 1, keys(), kComm, 0, h, payload);
    return 0;
  }
  authenticPackets(data + 1, size - 1);
  return 0;
}

void loomFuzzSeeds(std::vector<std::string>& seeds) {
  // A valid data packet, as the wire carries it.
  Header h;
  h.commId = kComm;
  h.src = 1;
  h.dst = 0;
  h.seq = 1;
  h.payloadBytes = 16;
  std::string datagram(kHeaderBytes + 16, 'p');
  encodeHeader(h, keys(), {datagram.data() + kHeaderBytes, 16}, datagram.data());
  seeds.push_back(std::string(1, '\0') + datagram);
  // Field streams for the authentic path: data at offset 0, an ack of packet 3, a probe.
  std::string fields(1, '\x01');
  auto put = [&](uint64_t v, int n) {
    for (int i = 0; i < n; ++i) fields.push_back(static_cast<char>(v >> (8 * i)));
  };
  put(1, 1), put(1, 8), put(0, 8), put(5, 8), put(0, 8), put(0, 2), put(32, 2);
  fields += std::string(32, 'd');
  put(1000, 3);
  put(2, 1), put(3, 8), put(1 << 20, 8), put(6, 8), put(5, 8), put(0, 2), put(8, 2);
  put(0xff, 8);
  put(1000, 3);
  put(3, 1), put(0, 8), put(0, 8), put(7, 8), put(0, 8), put(0, 2), put(0, 2);
  seeds.push_back(fields);
}
