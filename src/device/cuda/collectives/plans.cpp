#include "device/cuda/collectives/plans.hpp"

#include <algorithm>

#include "base/dtype.hpp"
#include "base/error.hpp"

namespace loom::cuda {

namespace {

struct Call {
  const CollArgs& c;
  int me, n;
  size_t es, bytes;
  const char* send;
  char* recv;
};

// Every other rank gets `each` bytes from sendAt(p) and sends `each` bytes to recvAt(q).
template <typename SendAt, typename RecvAt>
void toAll(const Call& k, ExchangeArgs& a, SendAt sendAt, RecvAt recvAt, size_t each) {
  for (int p = 0; p < k.n; ++p) {
    if (p == k.me) continue;
    a.send[p] = sendAt(p), a.sendBytes[p] = each;
    a.recv[p] = recvAt(p), a.recvBytes[p] = each;
  }
}

void allReduce(const Call& k, PlannedExchange& p) {
  ExchangeArgs& a = p.args;
  toAll(
      k, a, [&](int) { return k.send; }, [&](int) { return k.recv; }, k.bytes);
  a.selfSend = k.send, a.reduceOut = k.recv, a.reduceBytes = k.bytes;
  p.reduce = true;
}

void broadcast(const Call& k, PlannedExchange& p) {
  ExchangeArgs& a = p.args;
  if (k.me == k.c.root) {
    for (int q = 0; q < k.n; ++q)
      if (q != k.me) a.send[q] = k.send, a.sendBytes[q] = k.bytes;
    a.selfSend = k.send, a.selfRecv = k.recv, a.selfBytes = k.bytes;
  } else {
    a.recv[k.c.root] = k.recv, a.recvBytes[k.c.root] = k.bytes;
  }
}

void reduce(const Call& k, PlannedExchange& p) {
  ExchangeArgs& a = p.args;
  p.reduce = true;
  if (k.me == k.c.root) {
    for (int q = 0; q < k.n; ++q)
      if (q != k.me) a.recvBytes[q] = k.bytes;
    a.selfSend = k.send, a.reduceOut = k.recv, a.reduceBytes = k.bytes;
  } else {
    a.send[k.c.root] = k.send, a.sendBytes[k.c.root] = k.bytes;
  }
}

void allGather(const Call& k, PlannedExchange& p) {
  ExchangeArgs& a = p.args;
  toAll(
      k, a, [&](int) { return k.send; }, [&](int q) { return k.recv + q * k.bytes; }, k.bytes);
  a.selfSend = k.send, a.selfRecv = k.recv + k.me * k.bytes, a.selfBytes = k.bytes;
}

void reduceScatter(const Call& k, PlannedExchange& p) {
  ExchangeArgs& a = p.args;
  toAll(
      k, a, [&](int q) { return k.send + q * k.bytes; }, [&](int) { return nullptr; }, k.bytes);
  a.selfSend = k.send + k.me * k.bytes, a.reduceOut = k.recv, a.reduceBytes = k.bytes;
  p.reduce = true;
}

void allToAll(const Call& k, PlannedExchange& p) {
  ExchangeArgs& a = p.args;
  toAll(
      k, a, [&](int q) { return k.send + q * k.bytes; },
      [&](int q) { return k.recv + q * k.bytes; }, k.bytes);
  a.selfSend = k.send + k.me * k.bytes, a.selfRecv = k.recv + k.me * k.bytes;
  a.selfBytes = k.bytes;
}

void allToAllv(const Call& k, PlannedExchange& p) {
  ExchangeArgs& a = p.args;
  const CollArgs& c = k.c;
  for (int q = 0; q < k.n; ++q) {
    if (q == k.me) continue;
    a.send[q] = k.send + c.sendDispls[q] * k.es, a.sendBytes[q] = c.sendCounts[q] * k.es;
    a.recv[q] = k.recv + c.recvDispls[q] * k.es, a.recvBytes[q] = c.recvCounts[q] * k.es;
  }
  a.selfSend = k.send + c.sendDispls[k.me] * k.es;
  a.selfRecv = k.recv + c.recvDispls[k.me] * k.es;
  a.selfBytes = std::min(c.sendCounts[k.me], c.recvCounts[k.me]) * k.es;
  // Peers do not know each other's counts: the grid cannot depend on them.
  p.largest = static_cast<size_t>(1) << 40;
}

void gather(const Call& k, PlannedExchange& p) {
  ExchangeArgs& a = p.args;
  if (k.me == k.c.root) {
    for (int q = 0; q < k.n; ++q)
      if (q != k.me) a.recv[q] = k.recv + q * k.bytes, a.recvBytes[q] = k.bytes;
    a.selfSend = k.send, a.selfRecv = k.recv + k.me * k.bytes, a.selfBytes = k.bytes;
  } else {
    a.send[k.c.root] = k.send, a.sendBytes[k.c.root] = k.bytes;
  }
}

void scatter(const Call& k, PlannedExchange& p) {
  ExchangeArgs& a = p.args;
  if (k.me == k.c.root) {
    for (int q = 0; q < k.n; ++q)
      if (q != k.me) a.send[q] = k.send + q * k.bytes, a.sendBytes[q] = k.bytes;
    a.selfSend = k.send + k.me * k.bytes, a.selfRecv = k.recv, a.selfBytes = k.bytes;
  } else {
    a.recv[k.c.root] = k.recv, a.recvBytes[k.c.root] = k.bytes;
  }
}

}  // namespace

ExchangeArgs emptyExchange() {
  ExchangeArgs a{};
  a.divisor = 1;
  return a;
}

bool planExchange(const CollArgs& c, int me, int n, PlannedExchange& plan) {
  const size_t es = dtypeSize(c.dtype);
  Call k{c, me, n, es, c.count * es, static_cast<const char*>(c.send), static_cast<char*>(c.recv)};
  plan.args = emptyExchange();
  plan.args.divisor = averageDivisor(c.op, n);
  plan.reduce = false;
  plan.largest = k.bytes;
  using Planner = void (*)(const Call&, PlannedExchange&);
  Planner planner = nullptr;
  switch (c.func) {
    case loomFuncAllReduce:
      planner = allReduce;
      break;
    case loomFuncBroadcast:
      planner = broadcast;
      break;
    case loomFuncReduce:
      planner = reduce;
      break;
    case loomFuncAllGather:
      planner = allGather;
      break;
    case loomFuncReduceScatter:
      planner = reduceScatter;
      break;
    case loomFuncAllToAll:
      planner = allToAll;
      break;
    case loomFuncAllToAllv:
      planner = allToAllv;
      break;
    case loomFuncGather:
      planner = gather;
      break;
    case loomFuncScatter:
      planner = scatter;
      break;
    default:
      LOOM_THROW(loomInternalError, "no GPU exchange for collective ", static_cast<int>(c.func));
  }
  planner(k, plan);
  return c.func == loomFuncAllToAllv || k.bytes > 0;
}

}  // namespace loom::cuda
