// The intra-node phases of the hierarchical allreduce and reduce over the node's own arena
// (ShmStage), the node group's context (Hierarchy::node). Both work on "pieces": byte ranges of a
// buffer whose layout is the same on every rank, so a piece is named by its offset alone. Which
// ranks own which pieces is a function every rank can evaluate for every node rank
// (`pieces(local, visit)` calls visit(offset, bytes) for each piece of that rank, in order), so
// no piece list travels and nothing is allocated per call.
//
//   nodeReduce: every node rank contributes its whole input; each owner ends with its pieces
//               reduced over the node's ranks (in local-rank order). A step stages one window of
//               every owner's pieces side by side, so all owners reduce at once.
//   nodeShare:  each owner's pieces travel to the other node ranks, a slot's worth per step;
//               `land(local, offset, bytes, data)` decides what a reader keeps and where.
//
// Why the arena and not the node's pair channels: a channel moves each byte twice (into its ring,
// out into the receiver's buffer) before the reduction reads it; the arena is written once and
// read in place, and one step synchronizes the whole node. Measured at 2 x 4 ranks (netns, tcp):
// allreduce 16-64 MiB 1.5-1.8x faster than the same phases as channel operations.
//
// The column's schedule of the same call may run beside them (AlongsideRun, context.hpp): on a
// thread of its own, or taking a pass at every step (ShmStage) and moving in every wait
// (AlgoContext::wait), so the network carries one chunk while these phases work on another.
#pragma once

#include <algorithm>
#include <cstddef>

#include "algorithms/context.hpp"
#include "algorithms/shm_stage.hpp"

namespace loom {

// Calls f(pieceOffset, bytes, streamPos) for the parts of rank `local`'s pieces that lie in
// [lo, hi) of the stream formed by its pieces one after another.
template <typename Pieces, typename F>
void forWindow(const Pieces& pieces, int local, size_t lo, size_t hi, F&& f) {
  size_t pos = 0;
  pieces(local, [&](size_t offset, size_t bytes) {
    size_t begin = std::max(pos, lo), end = std::min(pos + bytes, hi);
    if (begin < end) f(offset + (begin - pos), end - begin, begin);
    pos += bytes;
  });
}

template <typename Pieces>
size_t streamBytes(const Pieces& pieces, int local) {
  size_t total = 0;
  pieces(local, [&](size_t, size_t bytes) { total += bytes; });
  return total;
}

struct NodeReduction {
  loomDataType_t dtype;
  size_t esize;
  loomRedOp_t op;  // a kernel op (average divides later)
  int accum;
};

// Reduces `send` over the node's ranks into `dst` (same offsets), owner by owner.
template <typename Pieces>
void nodeReduce(const AlgoContext& node, const char* send, char* dst, const Pieces& pieces,
                const NodeReduction& red) {
  const int n = node.nranks, me = node.rank;
  if (n == 1) {  // nothing to stage: this rank's input is the node's sum
    pieces(me, [&](size_t offset, size_t bytes) {
      if (dst + offset != send + offset) node.device->copy(dst + offset, send + offset, bytes);
    });
    return;
  }
  int owners = 0;
  size_t longest = 0;
  for (int r = 0; r < n; ++r) {
    size_t bytes = streamBytes(pieces, r);
    owners += bytes > 0;
    longest = std::max(longest, bytes);
  }
  if (longest == 0) return;
  // Each owner's window sits at owner * window in every slot; whole elements only.
  size_t window = std::max(node.arena->slotBytes() / owners / red.esize, size_t{1}) * red.esize;
  std::vector<const void*>& srcs = *node.sources;
  for (size_t lo = 0; lo < longest; lo += window) {
    ShmStage stage(node);
    int slotIndex = 0, mySlot = -1;
    for (int r = 0; r < n; ++r) {
      if (streamBytes(pieces, r) == 0) continue;
      char* base = stage.myIn() + slotIndex * window;
      forWindow(pieces, r, lo, lo + window, [&](size_t offset, size_t bytes, size_t pos) {
        node.device->copy(base + (pos - lo), send + offset, bytes);
      });
      if (r == me) mySlot = slotIndex;
      ++slotIndex;
    }
    stage.publishIn();
    if (mySlot >= 0) {
      stage.waitAllIn();
      forWindow(pieces, me, lo, lo + window, [&](size_t offset, size_t bytes, size_t pos) {
        for (int r = 0; r < n; ++r) srcs[r] = stage.in(r) + mySlot * window + (pos - lo);
        node.device->reduce(dst + offset, srcs.data(), n, bytes / red.esize, red.dtype, red.op,
                            red.accum, 1);
      });
    }
    stage.publishDone();
  }
}

// Sends every owner's pieces of `src` to the other node ranks; each reader lands what it needs.
template <typename Pieces, typename Land>
void nodeShare(const AlgoContext& node, const char* src, const Pieces& pieces, Land&& land) {
  const int n = node.nranks, me = node.rank;
  if (n == 1) return;
  size_t longest = 0;
  for (int r = 0; r < n; ++r) longest = std::max(longest, streamBytes(pieces, r));
  if (longest == 0) return;
  size_t slot = node.arena->slotBytes() & ~size_t{7};
  for (size_t lo = 0; lo < longest; lo += slot) {
    ShmStage stage(node);
    forWindow(pieces, me, lo, lo + slot, [&](size_t offset, size_t bytes, size_t pos) {
      node.device->copy(stage.myIn() + (pos - lo), src + offset, bytes);
    });
    stage.publishIn();
    for (int r = 0; r < n; ++r) {
      if (r == me) continue;
      bool waited = false;
      forWindow(pieces, r, lo, lo + slot, [&](size_t offset, size_t bytes, size_t pos) {
        if (!waited) stage.waitIn(r), waited = true;
        land(r, offset, bytes, stage.in(r) + (pos - lo));
      });
    }
    stage.publishDone();
  }
}

}  // namespace loom
