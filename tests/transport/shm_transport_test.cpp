// The shared arena's layout rules and the pair channels' byte-stream contract, with both ends of
// a channel in one process.
#include <gtest/gtest.h>
#include <unistd.h>

#include <numeric>
#include <string>
#include <vector>

#include "base/error.hpp"
#include "transport/shm/shm_arena.hpp"
#include "transport/shm/shm_channel.hpp"

namespace loom {
namespace {

std::string uniqueName(const char* tag) {
  static int counter = 0;
  return "/loom-test-" + std::to_string(getpid()) + "-" + tag + std::to_string(counter++);
}

TEST(ArenaLayout, SlotFitsOneElementPerRankForAnyRankCount) {
  // Regression: with 4 KiB slots and 600 ranks, slot / (8 * nranks) was 0 elements and the
  // direct reduce-scatter divided by zero.
  for (int nranks : {1, 2, 7, 512, 600, 1025}) {
    ArenaLayout layout = ArenaLayout::compute(nranks, 4096, 4096);
    EXPECT_GE(layout.slotBytes / (sizeof(uint64_t) * nranks), 1u) << nranks << " ranks";
    EXPECT_GE(layout.slotBytes, 2 * sizeof(uint64_t) * nranks) << "alltoallv count tables";
    EXPECT_EQ(layout.slotBytes % 4096, 0u);
  }
  EXPECT_EQ(ArenaLayout::compute(4, 512 * 1024, 256 * 1024).slotBytes, 512u * 1024);
}

TEST(ArenaLayout, RegionsDoNotOverlap) {
  ArenaLayout l = ArenaLayout::compute(5, 8192, 4096);
  EXPECT_LT(l.flagsOffset, l.reasonsOffset);
  EXPECT_LE(l.reasonsOffset + kAbortReasonBytes * 5, l.slotsOffset);
  EXPECT_LE(l.slotsOffset + 4 * 5 * l.slotBytes, l.channelsOffset);
  EXPECT_LE(l.channelsOffset, l.totalBytes);
}

TEST(ShmArena, AttachChecksLayoutAndAbortKeepsFirstFailure) {
  std::string name = uniqueName("abort");
  ArenaLayout layout = ArenaLayout::compute(3, 4096, 4096);
  ShmArena creator = ShmArena::create(name, layout);
  ShmArena other = ShmArena::attach(name, layout);
  EXPECT_THROW(ShmArena::attach(name, ArenaLayout::compute(4, 4096, 4096)), Error);
  creator.unlinkName();
  EXPECT_FALSE(other.aborted());
  other.raiseAbort(loomTimeout, 2, "rank 2 timed out");
  creator.raiseAbort(loomRemoteError, 0, "second failure");
  ASSERT_TRUE(creator.aborted());
  ArenaAbort info = creator.abortInfo();
  EXPECT_EQ(info.code, loomTimeout);
  EXPECT_EQ(info.rank, 2);
  EXPECT_EQ(info.reason, "rank 2 timed out");
}

class ChannelTest : public ::testing::Test {
 protected:
  void SetUp() override {
    arena_ = ShmArena::create(uniqueName("chan"), ArenaLayout::compute(2, 4096, 4096));
    arena_.unlinkName();
    a_ = std::make_unique<ShmChannel>(arena_, ChannelClass::kCollective, 0, 1);
    b_ = std::make_unique<ShmChannel>(arena_, ChannelClass::kCollective, 1, 0);
  }
  // Moves `bytes` from a_ to b_ through the 4 KiB ring in uneven pieces.
  std::vector<char> transfer(const std::vector<char>& data, size_t piece) {
    std::vector<char> out(data.size());
    size_t sent = 0, got = 0;
    while (got < data.size()) {
      if (sent < data.size()) {
        size_t want = std::min(piece, data.size() - sent);
        if (want < data.size() - sent) want &= ~size_t{7};  // only a transfer's end is partial
        sent += a_->trySend(data.data() + sent, want);
      }
      std::span<const char> span = b_->peek(data.size() - got);
      size_t n = std::min(span.size(), data.size() - got);
      std::copy(span.begin(), span.begin() + n, out.begin() + got);
      b_->consume(n);
      got += n;
    }
    return out;
  }
  ShmArena arena_;
  std::unique_ptr<ShmChannel> a_, b_;
};

TEST_F(ChannelTest, StreamsAcrossWrapAroundInAnyPieces) {
  for (size_t size : {1ul, 7ul, 8ul, 4095ul, 4096ul, 4097ul, 50000ul + 3}) {
    for (size_t piece : {8ul, 24ul, 1000ul, 4096ul, 1ul << 20}) {
      std::vector<char> data(size);
      std::iota(data.begin(), data.end(), static_cast<char>(size + piece));
      EXPECT_EQ(transfer(data, piece), data) << size << " bytes in pieces of " << piece;
    }
  }
}

TEST_F(ChannelTest, FullRingTakesNothingAndPadsToEightBytes) {
  std::vector<char> big(8192, 'x');
  EXPECT_EQ(a_->trySend(big.data(), big.size()), 4096u);  // the ring holds 4 KiB
  EXPECT_EQ(a_->trySend(big.data(), 8), 0u);
  EXPECT_EQ(b_->peek(1 << 20).size(), 4096u);
  b_->consume(4096);
  char three[3] = {1, 2, 3};
  EXPECT_EQ(a_->trySend(three, 3), 3u);
  std::span<const char> span = b_->peek(3);
  ASSERT_EQ(span.size(), 8u);  // padded to the 8-byte granule, pad zeroed
  EXPECT_EQ(span[2], 3);
  EXPECT_EQ(span[3], 0);
}

}  // namespace
}  // namespace loom
