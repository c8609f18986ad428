// Copy with non-temporal stores: the destination bypasses the cache, so writing a large output
// costs one memory write per line instead of a read-for-ownership plus a write. Only worth it for
// outputs much larger than the last-level cache that nobody reads right away.
#pragma once

#include <cstddef>

namespace loom {

void streamingCopy(void* dst, const void* src, size_t bytes);

}  // namespace loom
