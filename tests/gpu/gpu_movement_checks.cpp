// Checked data movement: broadcast, allgather, gather, scatter, alltoall, alltoallv and a
// send/recv ring in a group (see gpu_checks.hpp).
#include <string>
#include <vector>

#include "base/dtype.hpp"
#include "gpu_checks.hpp"

namespace loom::gputest {
namespace {

// Sequence ids of the roles (a rank's own input is its rank).
int broadcastId(int root) { return 100 + root; }
int scatterId(int root) { return 200 + root; }
int pairId(int from, int to) { return 1000 + from * 64 + to; }
int ringId(int rank, int direction) { return 300 + 2 * rank + direction; }

void append(std::vector<char>& out, const std::vector<char>& more) {
  out.insert(out.end(), more.begin(), more.end());
}

}  // namespace

void checkBroadcast(Harness& h, loomDataType_t t, size_t count, Layout layout) {
  if (!h.ok()) return;
  const size_t bytes = count * dtypeSize(t), first = h.nextFirst();
  const int root = rootFor(t, 11, count);
  const std::string what =
      h.describe("broadcast", t, nullptr, count, layout) + " root " + std::to_string(root);
  const std::vector<char> in = values(t, broadcastId(root), count, first);
  const Span send = h.span(h.a(), layout, t, bytes);
  const Span recv = layout.inPlace ? send : h.span(h.b(), layout, t, bytes);
  h.poison(send);
  if (!layout.inPlace) h.poison(recv);
  if (gRank == root) h.upload(send.data(), in);
  if (!h.call(loomBroadcast(send.data(), recv.data(), count, t, root, h.comm(), h.loomStream()),
              what) ||
      !h.settle(what))
    return;
  h.expectData(in, recv.data(), t, what);
  h.expectGuards(recv, what);
  if (!layout.inPlace && gRank == root) h.expectData(in, send.data(), t, what + ": input changed");
}

void checkAllGather(Harness& h, loomDataType_t t, size_t count, Layout layout) {
  if (!h.ok()) return;
  const size_t bytes = count * dtypeSize(t), first = h.nextFirst();
  const std::string what = h.describe("allgather", t, nullptr, count, layout);
  const std::vector<char> mine = values(t, gRank, count, first);
  const Span recv = h.span(h.b(), layout, t, bytes * gRanks);
  const Span send = layout.inPlace ? Span{recv.base, recv.lead + gRank * bytes, bytes}
                                   : h.span(h.a(), layout, t, bytes);
  h.poison(recv);
  if (!layout.inPlace) h.poison(send);
  h.upload(send.data(), mine);
  if (!h.call(loomAllGather(send.data(), recv.data(), count, t, h.comm(), h.loomStream()), what) ||
      !h.settle(what))
    return;
  h.expectData(allBlocks(t, count, first), recv.data(), t, what);
  h.expectGuards(recv, what);
  if (!layout.inPlace) h.expectData(mine, send.data(), t, what + ": input changed");
}

void checkGather(Harness& h, loomDataType_t t, size_t count, Layout layout) {
  if (!h.ok()) return;
  const size_t bytes = count * dtypeSize(t), first = h.nextFirst();
  const int root = rootFor(t, 5, count);
  const std::string what =
      h.describe("gather", t, nullptr, count, layout) + " root " + std::to_string(root);
  const std::vector<char> mine = values(t, gRank, count, first);
  const Span recv = h.span(h.b(), layout, t, bytes * gRanks);
  const Span send = layout.inPlace ? Span{recv.base, recv.lead + gRank * bytes, bytes}
                                   : h.span(h.a(), layout, t, bytes);
  h.poison(recv);
  if (!layout.inPlace) h.poison(send);
  h.upload(send.data(), mine);
  // Out of place, only the root passes a receive buffer.
  void* recvPtr = layout.inPlace || gRank == root ? recv.data() : nullptr;
  if (!h.call(loomGather(send.data(), recvPtr, count, t, root, h.comm(), h.loomStream()), what) ||
      !h.settle(what))
    return;
  if (gRank == root) {
    h.expectData(allBlocks(t, count, first), recv.data(), t, what);
    h.expectGuards(recv, what);
  }
  if (!layout.inPlace) h.expectData(mine, send.data(), t, what + ": input changed");
}

void checkScatter(Harness& h, loomDataType_t t, size_t count, Layout layout) {
  if (!h.ok()) return;
  const size_t bytes = count * dtypeSize(t), first = h.nextFirst();
  const int root = rootFor(t, 7, count);
  const std::string what =
      h.describe("scatter", t, nullptr, count, layout) + " root " + std::to_string(root);
  const std::vector<char> all = values(t, scatterId(root), count * gRanks, first);
  const Span send = h.span(layout.inPlace ? h.b() : h.a(), layout, t, bytes * gRanks);
  const Span recv = layout.inPlace ? Span{send.base, send.lead + gRank * bytes, bytes}
                                   : h.span(h.b(), layout, t, bytes);
  h.poison(send);
  if (!layout.inPlace) h.poison(recv);
  if (gRank == root) h.upload(send.data(), all);
  // Out of place, only the root passes a send buffer.
  const void* sendPtr = layout.inPlace || gRank == root ? send.data() : nullptr;
  if (!h.call(loomScatter(sendPtr, recv.data(), count, t, root, h.comm(), h.loomStream()), what) ||
      !h.settle(what))
    return;
  const std::vector<char> want(all.begin() + gRank * bytes, all.begin() + (gRank + 1) * bytes);
  h.expectData(want, recv.data(), t, what);
  if (!layout.inPlace) {
    h.expectGuards(recv, what);
    if (gRank == root) h.expectData(all, send.data(), t, what + ": input changed");
  }
}

void checkAllToAll(Harness& h, loomDataType_t t, size_t count, Layout layout) {
  if (!h.ok()) return;
  layout.inPlace = false;
  const size_t bytes = count * dtypeSize(t), first = h.nextFirst();
  const std::string what = h.describe("alltoall", t, nullptr, count, layout);
  std::vector<char> in, want;
  for (int r = 0; r < gRanks; ++r) {
    append(in, values(t, pairId(gRank, r), count, first));
    append(want, values(t, pairId(r, gRank), count, first));
  }
  const Span send = h.span(h.a(), layout, t, bytes * gRanks);
  const Span recv = h.span(h.b(), layout, t, bytes * gRanks);
  h.poison(send);
  h.poison(recv);
  h.upload(send.data(), in);
  if (!h.call(loomAllToAll(send.data(), recv.data(), count, t, h.comm(), h.loomStream()), what) ||
      !h.settle(what))
    return;
  h.expectData(want, recv.data(), t, what);
  h.expectGuards(recv, what);
  h.expectData(in, send.data(), t, what + ": input changed");
}

void checkAllToAllv(Harness& h, loomDataType_t t, size_t count, Layout layout) {
  if (!h.ok()) return;
  layout.inPlace = false;
  const size_t esize = dtypeSize(t), first = h.nextFirst();
  const std::string what = h.describe("alltoallv", t, nullptr, count, layout);
  // From i to j: 0, 1/3, 2/3 or all of count elements.
  auto pairCount = [&](int i, int j) { return (count * static_cast<size_t>((i + 2 * j) % 4)) / 3; };
  const size_t n = static_cast<size_t>(gRanks);
  std::vector<size_t> sc(n), sd(n), rc(n), rd(n);
  size_t sTotal = 0, rTotal = 0;
  for (int j = gRanks - 1; j >= 0; --j) {  // reverse peer order; one element gaps on receive
    sc[j] = pairCount(gRank, j), sd[j] = sTotal, sTotal += sc[j];
    rc[j] = pairCount(j, gRank), rd[j] = rTotal, rTotal += rc[j] + 1;
  }
  std::vector<char> in(sTotal * esize), want(rTotal * esize, static_cast<char>(kPoison));
  for (int j = 0; j < gRanks; ++j) {
    std::vector<char> out = values(t, pairId(gRank, j), sc[j], first);
    std::copy(out.begin(), out.end(), in.begin() + sd[j] * esize);
    std::vector<char> back = values(t, pairId(j, gRank), rc[j], first);
    std::copy(back.begin(), back.end(), want.begin() + rd[j] * esize);
  }
  const Span send = h.span(h.a(), layout, t, in.size());
  const Span recv = h.span(h.b(), layout, t, want.size());
  h.poison(send);
  h.poison(recv);
  h.upload(send.data(), in);
  if (!h.call(loomAllToAllv(send.data(), sc.data(), sd.data(), recv.data(), rc.data(), rd.data(), t,
                            h.comm(), h.loomStream()),
              what) ||
      !h.settle(what))
    return;
  h.expectData(want, recv.data(), t, what + " (gaps between blocks must stay unwritten)");
  h.expectGuards(recv, what);
  h.expectData(in, send.data(), t, what + ": input changed");
}

void checkSendRecvRing(Harness& h, loomDataType_t t, size_t count, Layout layout) {
  if (!h.ok()) return;
  layout.inPlace = false;
  const size_t bytes = count * dtypeSize(t), first = h.nextFirst();
  const std::string what = h.describe("send/recv ring", t, nullptr, count, layout);
  const int right = (gRank + 1) % gRanks, left = (gRank + gRanks - 1) % gRanks;
  std::vector<char> in = values(t, ringId(gRank, 0), count, first);
  append(in, values(t, ringId(gRank, 1), count, first));
  std::vector<char> want = values(t, ringId(left, 0), count, first);
  append(want, values(t, ringId(right, 1), count, first));
  const Span send = h.span(h.a(), layout, t, 2 * bytes);  // to the right, to the left
  const Span recv = h.span(h.b(), layout, t, 2 * bytes);  // from the left, from the right
  h.poison(send);
  h.poison(recv);
  h.upload(send.data(), in);
  // Sends first on every rank: only the group makes this safe for any size. With two ranks both
  // messages go to the same peer and match in issue order.
  loomStream_t s = h.loomStream();
  loomResult_t results[6];
  results[0] = loomGroupStart();
  results[1] = loomSend(send.data(), count, t, right, h.comm(), s);
  results[2] = loomSend(send.data() + bytes, count, t, left, h.comm(), s);
  results[3] = loomRecv(recv.data(), count, t, left, h.comm(), s);
  results[4] = loomRecv(recv.data() + bytes, count, t, right, h.comm(), s);
  results[5] = loomGroupEnd();
  for (int i = 0; i < 6; ++i)
    if (!h.call(results[i], what + " (call " + std::to_string(i) + " of the group)")) return;
  if (!h.settle(what)) return;
  h.expectData(want, recv.data(), t, what);
  h.expectGuards(recv, what);
  h.expectData(in, send.data(), t, what + ": input changed");
}

}  // namespace loom::gputest
