// The composed collectives of a heterogeneous communicator (set up in comm/hetero.cpp): a cluster
// with native collectives and several ranks collapses to its leader (its lowest rank); the
// leaders and every rank of the other clusters form the exchange, a host communicator
// (leaderComm_, numbered in global rank order). Each collective is three phases, so that each
// byte crosses a cluster's boundary once and only on its leader:
//   allreduce   1. reduce to the leader inside each collapsed cluster; 2. the exchange's
//               allreduce, in place on the leaders' output, in chunks; 3. broadcast from the
//               leader inside each collapsed cluster.
//   broadcast   1. the root's cluster, where it collapses: broadcast from the root inside it
//               (its leader gets the data too); 2. the exchange's broadcast from the member that
//               stands for the root, in chunks; 3. broadcast from the leader inside every other
//               collapsed cluster.
//   reduce      1. every collapsed cluster but the root's: reduce to its leader (into scratch);
//               2. the exchange's reduce, in chunks, to the member that stands for the root (the
//               root's leader contributes its own input); 3. the root's cluster, where it
//               collapses: reduce to the root inside it, its leader contributing the exchange's
//               result. The root gets one reduce more, never a second hop.
//   allgather   1. gather to the leader inside each collapsed cluster (its ranks' blocks, in
//               cluster order); 2. the exchange's allgather with a block per member of any size:
//               an alltoallv (every member sends its blocks to all), received member after
//               member, then reordered into global rank order (skipped where that is already the
//               order: clusters in contiguous blocks of ranks); 3. broadcast of the whole output
//               from the leader inside each collapsed cluster.
//   reduce-scatter 1. reduce of the whole input to the leader inside each collapsed cluster;
//               2. per run of consecutive global ranks that one member stands for, the
//               exchange's reduce of their blocks to that member, in chunks (a reduce-scatter
//               with blocks of any size, one latency per run); 3. scatter from the leader inside
//               each collapsed cluster.
// Average is not composed (Comm::composes). Scratch (a leader's partial results, the allgather's
// blocks in exchange order) grows once; on device ranks it is device memory, retired on growth
// while calls in flight may use it. A device rank whose device runs host tasks enqueues every
// phase on the caller's stream (comm/stream_calls.cpp) and the call returns.
#include <algorithm>
#include <cstring>

#include "base/dtype.hpp"
#include "base/log.hpp"
#include "comm/comm.hpp"

namespace loom {

void Comm::executeComposed(const CollArgs& args) {
  LOOM_INFO(kSubsysColl, rank_, funcName(args.func), " count ", args.count, " ",
            dtypeName(args.dtype), " -> composed (heterogeneous: ",
            clusterComm_ ? (clusters_.leader(clusters_.clusterOf(rank_)) == rank_
                                ? "this rank leads its collapsed cluster"
                                : "this rank's cluster collapses to its leader")
                         : "this rank takes part in the exchange",
            ")");
  switch (args.func) {
    case loomFuncAllReduce:
      return composedAllReduce(args);
    case loomFuncBroadcast:
      return composedBroadcast(args);
    case loomFuncReduce:
      return composedReduce(args);
    case loomFuncAllGather:
      return composedAllGather(args);
    case loomFuncReduceScatter:
      return composedReduceScatter(args);
    default:
      LOOM_THROW(loomInternalError, funcName(args.func), " is not composed");
  }
}

int Comm::exchangeRoot(int rank) const {
  const int c = clusters_.clusterOf(rank);
  return exchangeRank_[collapses_[c] ? clusters_.leader(c) : rank];
}

char* Comm::composedScratch(size_t bytes, loomStream_t stream) {
  bytes = std::max<size_t>(bytes, 1);
  if (!onDevice()) {
    if (composedHost_.size() < bytes) composedHost_.resize(bytes);
    return composedHost_.data();
  }
  if (!composedDevice_) composedDevice_ = std::make_unique<DeviceScratch>(*device_);
  // Stream-ordered ranks: what growing replaced is freed once no call of this communicator or
  // of its cluster's is in flight. The others wait for their stream (growth happens rarely).
  if (jobs_ && composedDevice_->retiring() && jobs_->idle() &&
      (!clusterComm_ || !clusterComm_->jobs_ || clusterComm_->jobs_->idle()))
    composedDevice_->releaseRetired();
  char* scratch = composedDevice_->get(bytes);
  if (!jobs_ && composedDevice_->retiring()) {
    device_->synchronize(stream);
    composedDevice_->releaseRetired();
  }
  return scratch;
}

void Comm::copyLocal(void* dst, const void* src, size_t bytes, loomStream_t stream) {
  if (bytes == 0 || dst == src) return;
  if (onDevice())
    device_->copyAsync(dst, src, bytes, CopyKind::kDeviceToDevice, stream);
  else
    std::memcpy(dst, src, bytes);
}

void Comm::exchangeInChunks(const CollArgs& args) {
  // In chunks on every member (the same boundaries), pipelined on device members: in stream
  // order, a job of this communicator whose host part runs on the leaders' communicator.
  if (jobs_)
    enqueueDeviceCall(DeviceShape::kPipelined, args, nullptr,
                      heteroChunkBytes(args.count * dtypeSize(args.dtype), dtypeSize(args.dtype),
                                       heteroChunkBytes_),
                      *leaderComm_);
  else if (onDevice())
    leaderComm_->collectiveInChunks(args, heteroChunkBytes_, device_.get(), staging_.get());
  else
    leaderComm_->collectiveInChunks(args, heteroChunkBytes_, nullptr, nullptr);
}

void Comm::exchangeInOnePiece(const CollArgs& args) {
  if (jobs_)
    enqueueDeviceCall(
        DeviceShape::kStaged, args,
        &leaderComm_->selector_->select(args.func, args.count * dtypeSize(args.dtype)), 0,
        *leaderComm_);
  else if (onDevice())
    leaderComm_->collectiveStaged(args, device_.get(), staging_.get());
  else
    leaderComm_->collectiveStaged(args, nullptr, nullptr);
}

void Comm::composedAllReduce(const CollArgs& args) {
  const size_t bytes = args.count * dtypeSize(args.dtype);
  // 1. Into the leader's output buffer.
  if (clusterComm_) {
    CollArgs reduce = args;
    reduce.func = loomFuncReduce;
    reduce.root = 0;
    clusterComm_->collective(reduce);
  } else {
    copyLocal(args.recv, args.send, bytes, args.stream);
  }
  // 2. The leaders, in place on their output.
  if (leaderComm_) {
    CollArgs exchange = args;
    exchange.send = args.recv;
    exchangeInChunks(exchange);
  }
  // 3. From the leader to the rest of its cluster.
  if (clusterComm_) {
    CollArgs broadcast = args;
    broadcast.func = loomFuncBroadcast;
    broadcast.root = 0;
    broadcast.send = args.recv;
    clusterComm_->collective(broadcast);
  }
}

void Comm::composedBroadcast(const CollArgs& args) {
  const int rootCluster = clusters_.clusterOf(args.root);
  const bool inRootCluster = clusters_.clusterOf(rank_) == rootCluster;
  // 1. Inside the root's collapsed cluster, from the root: its leader then holds the data.
  if (clusterComm_ && inRootCluster) {
    CollArgs local = args;
    local.root = clusters_.localIndex(args.root);
    clusterComm_->collective(local);
  }
  // 2. From the member that stands for the root: the root itself (from its input) or its
  // leader (from its output).
  if (leaderComm_) {
    CollArgs exchange = args;
    exchange.root = exchangeRoot(args.root);
    exchange.send = rank_ == args.root && !clusterComm_ ? args.send : args.recv;
    exchangeInChunks(exchange);
  }
  // 3. From the leader inside every other collapsed cluster.
  if (clusterComm_ && !inRootCluster) {
    CollArgs local = args;
    local.root = 0;
    local.send = args.recv;
    clusterComm_->collective(local);
  }
}

void Comm::composedReduce(const CollArgs& args) {
  const size_t bytes = args.count * dtypeSize(args.dtype);
  const int rootCluster = clusters_.clusterOf(args.root);
  const bool inRootCluster = clusters_.clusterOf(rank_) == rootCluster;
  const bool leader = clusterComm_ && clusters_.leader(clusters_.clusterOf(rank_)) == rank_;
  // A leader's partial result: in the root's output where the leader is the root, else in
  // scratch (a non-root's output buffer need not exist).
  char* partial = nullptr;
  if (leader)
    partial =
        rank_ == args.root ? static_cast<char*>(args.recv) : composedScratch(bytes, args.stream);
  // 1. Every other collapsed cluster, to its leader.
  if (clusterComm_ && !inRootCluster) {
    CollArgs local = args;
    local.root = 0;
    if (leader) local.recv = partial;
    clusterComm_->collective(local);
  }
  // 2. To the member that stands for the root; the root's leader adds its own input.
  if (leaderComm_) {
    CollArgs exchange = args;
    exchange.root = exchangeRoot(args.root);
    if (leader) {
      exchange.send = inRootCluster ? args.send : partial;
      exchange.recv = partial;
    }
    exchangeInChunks(exchange);
  }
  // 3. Inside the root's collapsed cluster, to the root: its leader adds the exchange's result
  // (in place where the leader is the root).
  if (clusterComm_ && inRootCluster) {
    CollArgs local = args;
    local.root = clusters_.localIndex(args.root);
    if (leader) local.send = partial;
    clusterComm_->collective(local);
  }
}

void Comm::composedAllGather(const CollArgs& args) {
  const size_t es = dtypeSize(args.dtype);
  const size_t block = args.count * es;
  const int cluster = clusters_.clusterOf(rank_);
  const bool leader = clusterComm_ && clusters_.leader(cluster) == rank_;
  const size_t myBlocks = clusterComm_ ? clusters_.size(cluster) : 1;
  // A leader's scratch: its cluster's blocks, then (not in order) every block in exchange order.
  char* scratch = nullptr;
  if (leader || (leaderComm_ && !exchangeInOrder_))
    scratch = composedScratch(
        (leader ? myBlocks * block : 0) + (exchangeInOrder_ ? 0 : nranks_ * block), args.stream);
  char* gathered = scratch;
  char* exchanged =
      exchangeInOrder_ ? static_cast<char*>(args.recv) : scratch + (leader ? myBlocks * block : 0);
  // 1. The cluster's blocks to its leader, in cluster order.
  if (clusterComm_) {
    CollArgs local = args;
    local.func = loomFuncGather;
    local.root = 0;
    local.recv = leader ? gathered : nullptr;
    clusterComm_->collective(local);
  }
  if (leaderComm_) {
    // 2. Every member's blocks to every member: its blocks from offset 0 to all, theirs
    // received member after member.
    const size_t members = exchangeFirst_.size() - 1;
    size_t* sendCounts = exchangeCounts_.data();
    size_t* sendDispls = sendCounts + members;
    size_t* recvCounts = sendDispls + members;
    size_t* recvDispls = recvCounts + members;
    for (size_t m = 0; m < members; ++m) {
      sendCounts[m] = myBlocks * args.count;
      sendDispls[m] = 0;
      recvCounts[m] = static_cast<size_t>(exchangeFirst_[m + 1] - exchangeFirst_[m]) * args.count;
      recvDispls[m] = static_cast<size_t>(exchangeFirst_[m]) * args.count;
    }
    CollArgs exchange = args;
    exchange.func = loomFuncAllToAllv;
    exchange.send = leader ? gathered : args.send;
    exchange.recv = exchanged;
    exchange.sendCounts = sendCounts;
    exchange.sendDispls = sendDispls;
    exchange.recvCounts = recvCounts;
    exchange.recvDispls = recvDispls;
    exchangeInOnePiece(exchange);
    // Into global rank order, a run of consecutive ranks at a time.
    if (!exchangeInOrder_) {
      for (int i = 0; i < nranks_;) {
        int j = i + 1;
        while (j < nranks_ && exchangeOrder_[j] == exchangeOrder_[j - 1] + 1) ++j;
        copyLocal(static_cast<char*>(args.recv) + exchangeOrder_[i] * block, exchanged + i * block,
                  (j - i) * block, args.stream);
        i = j;
      }
    }
  }
  // 3. The whole output from the leader to the rest of its cluster.
  if (clusterComm_) {
    CollArgs local = args;
    local.func = loomFuncBroadcast;
    local.root = 0;
    local.count = args.count * nranks_;
    local.send = args.recv;
    clusterComm_->collective(local);
  }
}

void Comm::composedReduceScatter(const CollArgs& args) {
  const size_t es = dtypeSize(args.dtype);
  const size_t block = args.count * es;
  const int cluster = clusters_.clusterOf(rank_);
  const bool leader = clusterComm_ && clusters_.leader(cluster) == rank_;
  const size_t myBlocks = clusterComm_ ? clusters_.size(cluster) : 1;
  // A leader's scratch: its cluster's partial sum of the whole input, then its cluster's blocks
  // of the result in cluster order.
  char* partial = leader ? composedScratch((nranks_ + myBlocks) * block, args.stream) : nullptr;
  char* result = leader ? partial + nranks_ * block : nullptr;
  // 1. The cluster's sum of the whole input, to its leader.
  if (clusterComm_) {
    CollArgs local = args;
    local.func = loomFuncReduce;
    local.root = 0;
    local.count = args.count * nranks_;
    local.recv = leader ? partial : nullptr;
    clusterComm_->collective(local);
  }
  // 2. Each run of consecutive ranks that one member stands for, reduced to that member.
  if (leaderComm_) {
    const char* input = leader ? partial : static_cast<const char*>(args.send);
    const int me = exchangeRank_[rank_];
    for (const ExchangeRun& run : exchangeRuns_) {
      CollArgs exchange = args;
      exchange.func = loomFuncReduce;
      exchange.root = run.member;
      exchange.count = args.count * run.length;
      exchange.send = input + run.first * block;
      exchange.recv = nullptr;
      if (run.member == me)
        exchange.recv = leader ? result + clusters_.localIndex(run.first) * block : args.recv;
      exchangeInChunks(exchange);
    }
  }
  // 3. Each rank's block from its leader.
  if (clusterComm_) {
    CollArgs local = args;
    local.func = loomFuncScatter;
    local.root = 0;
    local.send = leader ? result : nullptr;
    clusterComm_->collective(local);
  }
}

}  // namespace loom
