// The pairwise algorithms' unit of work (algorithms/pairwise.cpp): one transfer with one peer,
// progressed together with the others of its call. The communicator keeps the list they fill
// (AlgoContext::transfers), so no call allocates once the largest has been seen.
#pragma once

#include <cstddef>

namespace loom {

struct PairTransfer {
  int peer = 0;
  bool isSend = false;
  char* data = nullptr;
  size_t bytes = 0;
  size_t position = 0;
};

}  // namespace loom
