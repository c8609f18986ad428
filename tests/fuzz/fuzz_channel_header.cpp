// A collective channel's first bytes in a call: the peer's call signature (the mismatch check,
// transport/checked_channel.hpp), reassembled from any split and compared with this rank's; a
// peer that sends anything else is a mismatch (loomInvalidUsage from the callback), never a crash
// or data taken as a header.
#include <cstring>
#include <memory>

#include "base/call_signature.hpp"
#include "base/error.hpp"
#include "fuzz_target.hpp"
#include "memory_channel.hpp"
#include "transport/checked_channel.hpp"

using namespace loom;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto toMe = std::make_shared<test::MemoryRing>(1 << 16);
  auto fromMe = std::make_shared<test::MemoryRing>(1 << 16);
  test::MemoryChannel peerEnd(0, toMe, fromMe);
  CallCheck check;
  check.enabled = true;
  check.mine = {5, 256, 7 << 8};
  test::MemoryChannel myEnd(1, fromMe, toMe);
  CheckedChannel channel(myEnd, check, [](int peer, const CallSignature& theirs) {
    const CallSignature back = unpack(pack(theirs), theirs.seq);
    (void)back;
    LOOM_THROW(loomInvalidUsage, "mismatch with rank ", peer);
  });
  // The peer's bytes arrive in pieces of the sizes the input's first bytes give.
  size_t at = size > 4 ? 4 : size;
  for (int piece = 0; at < size; ++piece) {
    const size_t n = std::min<size_t>(size - at, 1 + data[piece % 4] % 64);
    peerEnd.trySend(data + at, n);
    at += n;
    try {
      char out[256];
      while (channel.tryReceive(out, sizeof(out)) > 0 || !channel.peek(64).empty()) {
        std::span<const char> span = channel.peek(64);
        if (span.empty()) break;
        channel.consume(span.size());
      }
    } catch (const Error& e) {
      if (e.code() != loomInvalidUsage) __builtin_trap();
      return 0;
    }
  }
  return 0;
}

void loomFuzzSeeds(std::vector<std::string>& seeds) {
  CallSignature mine{5, 256, 7 << 8};
  std::string header(reinterpret_cast<const char*>(&mine), sizeof(mine));
  seeds = {std::string("\x08\x10\x18\x01", 4) + header + std::string(64, 'a'),
           std::string("\x01\x01\x01\x01", 4) + header};
  mine.count = 257;
  seeds.push_back(std::string("\x40\x40\x40\x40", 4) +
                  std::string(reinterpret_cast<const char*>(&mine), sizeof(mine)));
}
