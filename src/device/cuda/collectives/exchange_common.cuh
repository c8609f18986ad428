// Pieces shared by the LL and simple exchange kernels: how a block finds its part of every
// transfer and how many chunk iterations it runs.
#pragma once

#include "device/cuda/collectives/exchange.hpp"
#include "device/cuda/collectives/primitives.cuh"

namespace loom::cuda {

// Peers in the order this rank visits them: rank+1, rank+2, ... for sends and rank-1, rank-2,
// ... for receives, so that not every rank writes to the same peer at the same moment.
__device__ __forceinline__ int sendPeer(const DevComm& c, int i) { return (c.rank + i) % c.nranks; }
__device__ __forceinline__ int recvPeer(const DevComm& c, int i) {
  return (c.rank - i + c.nranks) % c.nranks;
}

// Chunk iterations of this block: the most any of its transfers needs.
__device__ __forceinline__ size_t exchangeIterations(const DevComm& c, const ExchangeArgs& a,
                                                     size_t payload) {
  size_t most = 0;
  auto consider = [&](size_t bytes) {
    size_t k = chunkCount(splitRange(bytes, blockIdx.x, a.blocks).size(), payload);
    most = k > most ? k : most;
  };
  for (int p = 0; p < c.nranks; ++p) {
    if (p == c.rank) continue;
    consider(a.sendBytes[p]);
    consider(a.recvBytes[p]);
  }
  consider(a.reduceBytes);
  return most;
}

// Chunk k of this block's part of a transfer of `bytes`; empty when the part has fewer chunks.
__device__ __forceinline__ Range blockChunk(const ExchangeArgs& a, size_t bytes, size_t k,
                                            size_t payload) {
  Range mine = splitRange(bytes, blockIdx.x, a.blocks);
  if (k >= chunkCount(mine.size(), payload)) return Range{0, 0};
  return chunkOf(mine, k, payload);
}

// Bit q set for every peer this rank receives from (reductions: the sources besides itself).
__device__ __forceinline__ uint32_t receivingPeers(const DevComm& c, const ExchangeArgs& a) {
  uint32_t peers = 0;
  for (int q = 0; q < c.nranks; ++q)
    if (q != c.rank && a.recvBytes[q] > 0) peers |= 1u << q;
  return peers;
}

// Peers that get (bytes = a.sendBytes) or give (bytes = a.recvBytes) a chunk in iteration k of
// this block.
__device__ __forceinline__ uint32_t peersWithChunk(const DevComm& c, const ExchangeArgs& a,
                                                   const size_t* bytes, size_t k, size_t payload) {
  uint32_t peers = 0;
  for (int p = 0; p < c.nranks; ++p)
    if (p != c.rank && bytes[p] > 0 && blockChunk(a, bytes[p], k, payload).size() > 0)
      peers |= 1u << p;
  return peers;
}

// This block's share of the local copy (copy exchanges), done once.
__device__ __forceinline__ void selfCopy(const ExchangeArgs& a) {
  if (a.selfBytes == 0 || a.selfSend == a.selfRecv) return;
  Range r = splitRange(a.selfBytes, blockIdx.x, a.blocks);
  blockCopy<false>(a.selfRecv + r.begin, a.selfSend + r.begin, r.size());
}

}  // namespace loom::cuda
