// Shared topology-free arithmetic of the algorithms: splitting a range into N near-equal slices and
// walking a range in pipeline chunks. Kept here so no algorithm re-derives it.
#pragma once

#include <algorithm>
#include <cstddef>

namespace loom {

struct Range {
  size_t offset = 0;
  size_t count = 0;
};

// Slice `index` of `parts` near-equal slices of [0, total): the first total % parts get one more.
inline Range sliceOf(size_t total, int parts, int index) {
  size_t base = total / parts, extra = total % parts;
  size_t i = static_cast<size_t>(index);
  return {i * base + std::min(i, extra), base + (i < extra ? 1 : 0)};
}

// `index` taken modulo `n` into [0, n), also for a negative index (a rank's neighbour k steps
// back on a ring).
inline int wrapIndex(int index, int n) { return ((index % n) + n) % n; }

// Number of pipeline chunks of at most `chunk` elements covering `total` (at least 1, so that a
// zero-size call still takes part in the step sequence where an algorithm needs it).
inline size_t chunkCount(size_t total, size_t chunk) {
  return total == 0 ? 1 : (total + chunk - 1) / chunk;
}

inline Range chunkOf(size_t total, size_t chunk, size_t index) {
  size_t offset = index * chunk;
  return {offset, offset >= total ? 0 : std::min(chunk, total - offset)};
}

}  // namespace loom
