// Elementwise collectives (allreduce, reduce, broadcast) as a sequence of chunk calls, for
// heterogeneous communicators: every rank cuts a call at the same element boundaries and runs the
// host algorithm on each chunk, so a rank whose data is on a device overlaps its device-host
// copies with the exchange of the neighbouring chunks.
//
// Roles of one rank, chunk after chunk:
//   host-addressable rank: runs the chunk's algorithm on its own buffers (runChunked).
//   device rank: the pipelined shape (buildPipelined), run by either of the executor's drivers:
//     each chunk's device->host copy `kLookahead` chunks ahead of the host call on it, the
//     chunk's host->device copy right behind the call. Inline (the call blocks) or stream-ordered
//     (the copies enqueued on the caller's stream at call time, each host->device copy behind a
//     gate; the host calls on the communicator's progress queue).
// Nothing is allocated per call: schedules and staging are reused.
#pragma once

#include <functional>
#include <span>

#include "algorithms/staged.hpp"

namespace loom {

// True for the collectives whose every output element depends only on the same element of the
// inputs, so that cutting them into chunks changes nothing of the result.
bool elementwise(loomFunc_t func);

// Chunk `index` of an elementwise call cut into chunks of `chunkBytes` (whole elements; the last
// may be shorter): the same call on those elements.
CollArgs chunkOfCall(const CollArgs& args, size_t index, size_t chunkBytes);

// The chunk size, in bytes, a heterogeneous communicator uses for a call of `bytes` of elements of
// `elementBytes`: whole elements, the same on every rank (it depends only on the call and on
// `configured`, LOOM_HETERO_CHUNK_BYTES, which must agree; 0: chosen from the size).
size_t heteroChunkBytes(size_t bytes, size_t elementBytes, size_t configured);

// The algorithm to run on a chunk of `bytes` (the selector's choice for that size).
using ChunkAlgorithm = std::function<const Algorithm&(size_t bytes)>;

// Runs `args` chunk by chunk on host-addressable buffers with ctx (a CPU rank's part).
void runChunked(const ChunkAlgorithm& select, const AlgoContext& ctx, const CollArgs& args,
                size_t chunkBytes);

// Chunks copied to the host ahead of the host call that needs them.
constexpr size_t kLookahead = 2;

// The pipelined shape of an elementwise call of rank `rank` cut into chunks of `chunkBytes`: the
// staging buffer "stage" holds the whole call, in place; host call c runs chunk c. A rank that
// takes no output still ends with a marker behind its last call (the next call's copies into the
// staging wait for this call's host part).
void buildPipelined(Schedule& s, const CollArgs& args, int rank, size_t chunkBytes);
// The chunk calls of a pipelined call as its host calls run them, in place in the bound staging.
void addPipelinedCalls(AlgorithmCalls& calls, const ChunkAlgorithm& select, const Schedule& s,
                       std::span<char* const> bound, const CollArgs& args, size_t chunkBytes);

}  // namespace loom
