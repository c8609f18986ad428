// Checked reductions: allreduce, reduce, reducescatter (see gpu_checks.hpp).
#include <string>
#include <vector>

#include "base/dtype.hpp"
#include "gpu_checks.hpp"

namespace loom::gputest {

void checkAllReduce(Harness& h, loomDataType_t t, loomRedOp_t op, size_t count, Layout layout) {
  if (!h.ok()) return;
  const size_t bytes = count * dtypeSize(t), first = h.nextFirst();
  const std::string what = h.describe("allreduce", t, opName(op), count, layout);
  const std::vector<char> in = values(t, gRank, count, first);
  const Span send = h.span(h.a(), layout, t, bytes);
  const Span recv = layout.inPlace ? send : h.span(h.b(), layout, t, bytes);
  h.poison(send);
  if (!layout.inPlace) h.poison(recv);
  h.upload(send.data(), in);
  if (!h.call(loomAllReduce(send.data(), recv.data(), count, t, op, h.comm(), h.loomStream()),
              what) ||
      !h.settle(what))
    return;
  h.expectData(reduceReference(t, op, h.accum(), count, first, gRanks), recv.data(), t, what);
  h.expectGuards(recv, what);
  if (!layout.inPlace) h.expectData(in, send.data(), t, what + ": input changed");
}

void checkReduce(Harness& h, loomDataType_t t, loomRedOp_t op, size_t count, Layout layout) {
  if (!h.ok()) return;
  const size_t bytes = count * dtypeSize(t), first = h.nextFirst();
  const int root = rootFor(t, static_cast<int>(op), count);
  const std::string what =
      h.describe("reduce", t, opName(op), count, layout) + " root " + std::to_string(root);
  const std::vector<char> in = values(t, gRank, count, first);
  const Span send = h.span(h.a(), layout, t, bytes);
  const Span recv = layout.inPlace ? send : h.span(h.b(), layout, t, bytes);
  h.poison(send);
  if (!layout.inPlace) h.poison(recv);
  h.upload(send.data(), in);
  if (!h.call(loomReduce(send.data(), recv.data(), count, t, op, root, h.comm(), h.loomStream()),
              what) ||
      !h.settle(what))
    return;
  if (gRank == root) {
    h.expectData(reduceReference(t, op, h.accum(), count, first, gRanks), recv.data(), t, what);
    h.expectGuards(recv, what);
  }
  if (!layout.inPlace) h.expectData(in, send.data(), t, what + ": input changed");
}

void checkReduceScatter(Harness& h, loomDataType_t t, loomRedOp_t op, size_t count, Layout layout) {
  if (!h.ok()) return;
  const size_t esize = dtypeSize(t), bytes = count * esize, first = h.nextFirst();
  const size_t total = count * static_cast<size_t>(gRanks);
  const std::string what = h.describe("reducescatter", t, opName(op), count, layout);
  // Each rank's input is nranks blocks of one sequence; block r of the sum is rank r's result.
  const std::vector<char> in = values(t, gRank, total, first);
  const Span send = h.span(h.a(), layout, t, total * esize);
  Span recv = h.span(h.b(), layout, t, bytes);
  if (layout.inPlace) recv = Span{send.base, send.lead + gRank * bytes, bytes};
  h.poison(send);
  if (!layout.inPlace) h.poison(recv);
  h.upload(send.data(), in);
  if (!h.call(loomReduceScatter(send.data(), recv.data(), count, t, op, h.comm(), h.loomStream()),
              what) ||
      !h.settle(what))
    return;
  std::vector<char> reduced = reduceReference(t, op, h.accum(), total, first, gRanks);
  std::vector<char> want(reduced.begin() + gRank * bytes, reduced.begin() + (gRank + 1) * bytes);
  h.expectData(want, recv.data(), t, what);
  if (layout.inPlace) {
    h.expectGuards(Span{send.base, send.lead, send.bytes}, what);
  } else {
    h.expectGuards(recv, what);
    h.expectData(in, send.data(), t, what + ": input changed");
  }
}

}  // namespace loom::gputest
