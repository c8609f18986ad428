// The mismatch check's channel wrapper: each call's first bytes on a channel are the peer's call
// signature. A first transfer too large to travel with it (above kCombineBytes) lands in place on
// a direct-receiving channel (the header read alone, no peek into the channel's staging); small
// ones come in one piece with it; a header arriving in pieces is reassembled; a different
// signature is reported, never taken as data.
#include "transport/checked_channel.hpp"

#include <gtest/gtest.h>

#include <memory>
#include <numeric>
#include <string>
#include <vector>

#include "../exec/memory_channel.hpp"
#include "base/call_signature.hpp"
#include "base/error.hpp"

namespace loom {
namespace {

// A memory channel that receives directly, as a socket channel does, counting how it is read.
class DirectChannel final : public Channel {
 public:
  explicit DirectChannel(Channel& inner) : inner_(inner) {}
  int peer() const override { return inner_.peer(); }
  size_t trySend(const void* data, size_t bytes) override { return inner_.trySend(data, bytes); }
  std::span<const char> peek(size_t maxBytes) override {
    ++peeks;
    return inner_.peek(maxBytes);
  }
  void consume(size_t bytes) override { inner_.consume(bytes); }
  bool receivesDirect() const override { return true; }
  size_t tryReceive(void* dst, size_t bytes) override { return inner_.tryReceive(dst, bytes); }
  int peeks = 0;

 private:
  Channel& inner_;
};

struct CheckedEnds {
  CheckedEnds()
      : toMe(std::make_shared<test::MemoryRing>(1 << 16)),
        fromMe(std::make_shared<test::MemoryRing>(1 << 16)),
        peerEnd(0, toMe, fromMe),
        myEnd(1, fromMe, toMe),
        direct(myEnd),
        peerChecked(peerEnd, check, [](int, const CallSignature&) {}),
        mine(direct, check, [this](int peer, const CallSignature& theirs) {
          mismatchFrom = peer;
          mismatchCount = theirs.count;
          LOOM_THROW(loomInvalidUsage, "mismatch");
        }) {
    check.enabled = true;
    check.mine = {3, 4096, 7 << 8};
  }
  CallCheck check;
  std::shared_ptr<test::MemoryRing> toMe, fromMe;
  test::MemoryChannel peerEnd, myEnd;
  DirectChannel direct;
  CheckedChannel peerChecked, mine;
  int mismatchFrom = -1;
  uint64_t mismatchCount = 0;
};

std::vector<char> bytePattern(size_t bytes) {
  std::vector<char> v(bytes);
  std::iota(v.begin(), v.end(), 0);
  return v;
}

TEST(CheckedChannel, ALargeFirstTransferLandsInPlace) {
  CheckedEnds p;
  const std::vector<char> data = bytePattern(4096);
  ASSERT_EQ(p.peerChecked.trySend(data.data(), data.size()), data.size());
  std::vector<char> out(4096);
  ASSERT_EQ(p.mine.tryReceive(out.data(), out.size()), out.size());
  EXPECT_EQ(out, data);
  EXPECT_EQ(p.direct.peeks, 0) << "the header was peeked: the data would be staged first";
}

TEST(CheckedChannel, ASmallFirstTransferComesWithTheHeader) {
  CheckedEnds p;
  const std::vector<char> data = bytePattern(1000);
  ASSERT_EQ(p.peerChecked.trySend(data.data(), data.size()), data.size());
  std::vector<char> out(1000);
  ASSERT_EQ(p.mine.tryReceive(out.data(), out.size()), out.size());
  EXPECT_EQ(out, data);
}

TEST(CheckedChannel, AHeaderInPiecesIsReassembled) {
  CheckedEnds p;
  const CallSignature& sig = p.check.mine;
  const char* header = reinterpret_cast<const char*>(&sig);
  std::vector<char> out(4096);
  ASSERT_EQ(p.peerEnd.trySend(header, 16), 16u);
  EXPECT_EQ(p.mine.tryReceive(out.data(), out.size()), 0u);
  ASSERT_EQ(p.peerEnd.trySend(header + 16, 8), 8u);
  const std::vector<char> data = bytePattern(4096);
  ASSERT_EQ(p.peerEnd.trySend(data.data(), data.size()), data.size());
  ASSERT_EQ(p.mine.tryReceive(out.data(), out.size()), out.size());
  EXPECT_EQ(out, data);
  EXPECT_EQ(p.mismatchFrom, -1);
}

TEST(CheckedChannel, AnotherCallsSignatureIsAMismatch) {
  CheckedEnds p;
  CallSignature theirs = p.check.mine;
  theirs.count = 4095;
  ASSERT_EQ(p.peerEnd.trySend(&theirs, sizeof(theirs)), sizeof(theirs));
  std::vector<char> out(4096);
  EXPECT_THROW(p.mine.tryReceive(out.data(), out.size()), Error);
  EXPECT_EQ(p.mismatchFrom, 1);  // the rank at the channel's other end
  EXPECT_EQ(p.mismatchCount, 4095u);
}

}  // namespace
}  // namespace loom
