// Per collective, the exchange each rank runs (exchange.hpp): which peers it sends which bytes
// to, where what it receives goes, and what it copies or reduces locally. One function per
// collective in plans.cpp; the engine launches the result with the protocol the selector chose.
// Barrier and the two-shot allreduce have shapes of their own and stay in the engine.
#pragma once

#include "base/coll_args.hpp"
#include "device/cuda/collectives/exchange.hpp"

namespace loom::cuda {

struct PlannedExchange {
  ExchangeArgs args;
  bool reduce = false;
  size_t largest = 0;  // the transfer that sizes the grid
};

ExchangeArgs emptyExchange();

// Fills `plan` for `call` on rank `me` of `n`; false when the call moves no bytes at all.
bool planExchange(const CollArgs& call, int me, int n, PlannedExchange& plan);

}  // namespace loom::cuda
