// The composed collectives of a heterogeneous communicator (set up in comm/hetero.cpp): every
// cluster of several ranks collapses to its leader (its lowest rank); the leaders and every rank
// of the clusters of one rank form the exchange, a group on the host CPU
// (composition_.exchange, numbered in global rank order). Each collective is three phases, so that
// each byte crosses a cluster's boundary once and only on its leader:
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
// Allreduce, broadcast and reduce overlap their phases where a CPU cluster has an arena of its
// own (its ranks on one node) and the call spans several exchange chunks: the cluster's phases
// run chunk by chunk, and its leader's exchange of chunk t, where it is a schedule on channels
// (AlongsideRun, algorithms/context.hpp) and the work beside the arena does not block its waits
// (LOOM_BESIDE_WAIT spin or thread), moves while the cluster reduces chunk t+1 and broadcasts
// chunk t-1 (composedPhasesInChunks). The exchange's members see the same chunk calls either way.
// Else, e.g. where the exchange runs an arena algorithm (one node: an arena algorithm cannot move
// beside another), its chunks run one after another between the cluster's.
// Average is not composed (Comm::composes). Scratch (a leader's partial results, the allgather's
// blocks in exchange order) grows once; on device ranks it is device memory, retired on growth
// while calls in flight may use it. A device rank whose device runs host tasks enqueues every
// phase on the caller's stream (comm/device_calls.cpp) and the call returns.
#include <algorithm>
#include <cstring>
#include <optional>

#include "algorithms/chunked.hpp"
#include "algorithms/partition.hpp"
#include "base/dtype.hpp"
#include "base/log.hpp"
#include "comm/comm.hpp"

namespace loom {

void Comm::executeComposed(const CollArgs& args) {
  LOOM_INFO(kSubsysColl, rank_, funcName(args.func), " count ", args.count, " ",
            dtypeName(args.dtype), " -> composed (heterogeneous: ",
            composition_.cluster ? (clusters_.leader(clusters_.clusterOf(rank_)) == rank_
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
  return composition_.exchangeRank[composition_.collapses[c] ? clusters_.leader(c) : rank];
}

char* Comm::composedScratch(size_t bytes, loomStream_t stream) {
  bytes = std::max<size_t>(bytes, 1);
  if (!onDevice()) {
    if (composition_.hostScratch.size() < bytes) composition_.hostScratch.resize(bytes);
    return composition_.hostScratch.data();
  }
  if (!composition_.deviceScratch)
    composition_.deviceScratch = std::make_unique<DeviceScratch>(*device_);
  // Stream-ordered ranks: what growing replaced is freed once no call of this communicator is
  // in flight. The others wait for their stream (growth happens rarely).
  if (deviceCalls_.jobs && composition_.deviceScratch->retiring() && deviceCalls_.jobs->idle())
    composition_.deviceScratch->releaseRetired();
  char* scratch = composition_.deviceScratch->get(bytes);
  if (!deviceCalls_.jobs && composition_.deviceScratch->retiring()) {
    device_->synchronize(stream);
    composition_.deviceScratch->releaseRetired();
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

void Comm::clusterCollective(const CollArgs& args) {
  // The cluster's own collective: its device's native one, or (collapse forced) the host
  // algorithm, device ranks staged; in stream order where this rank's calls are.
  Group& cluster = *composition_.cluster;
  const Algorithm& algo = cluster.select(args.func, args.count * dtypeSize(args.dtype));
  if (deviceCalls_.jobs && algo.native < 0)
    return enqueueDeviceCall(cluster, DeviceShape::kStaged, args, &algo, 0);
  beginCall(cluster, args);
  if (algo.native >= 0 || !onDevice()) return runAlgorithm(algo, cluster.ctx(), args);
  runDeviceCall(cluster, DeviceShape::kStaged, args, &algo, 0);
}

void Comm::exchangeInChunks(const CollArgs& args) {
  // In chunks on every member (the same boundaries), pipelined on device members: in stream
  // order, a job whose host part runs the exchange's host algorithms.
  Group& exchange = *composition_.exchange;
  if (deviceCalls_.jobs)
    return enqueueDeviceCall(exchange, DeviceShape::kPipelined, args, nullptr, heteroChunk(args));
  beginCall(exchange, args);
  runInChunks(exchange, args);
}

void Comm::exchangeInOnePiece(const CollArgs& args) {
  Group& exchange = *composition_.exchange;
  const Algorithm& algo = exchange.select(args.func, args.count * dtypeSize(args.dtype));
  if (deviceCalls_.jobs) return enqueueDeviceCall(exchange, DeviceShape::kStaged, args, &algo, 0);
  beginCall(exchange, args);
  if (onDevice()) return runDeviceCall(exchange, DeviceShape::kStaged, args, &algo, 0);
  runAlgorithm(algo, exchange.ctx(), args);
}

bool Comm::clusterPhasesInChunks(const CollArgs& args, size_t chunk) const {
  // A CPU cluster on its own arena cuts its phases at the exchange's chunk boundaries, so that its
  // leader's exchange of one chunk moves while the arena works on the next or the one before.
  // Every rank of the cluster decides alike: same kind, same arena, same call. Chunks chosen by
  // size must be 2 MiB or more (calls from 16 MiB): each is an arena call of the cluster, and
  // below that their cost showed (2 cores, clusters of 2, 4 MiB in 1 MiB chunks: 1.1-1.35x).
  constexpr size_t kMinChosenChunk = size_t{2} << 20;
  const Group* cluster = composition_.cluster.get();
  return cluster != nullptr && !onDevice() && cluster->native() == nullptr &&
         cluster->ctx().arena != nullptr && elementwise(args.func) &&
         chunk < args.count * dtypeSize(args.dtype) &&
         (composition_.chunkBytes > 0 || chunk >= kMinChosenChunk);
}

void Comm::runComposedPhases(const ComposedPhases& phases, const CollArgs& args) {
  const size_t chunk = heteroChunk(args);
  if (clusterPhasesInChunks(args, chunk)) return composedPhasesInChunks(phases, args, chunk);
  if (phases.before) clusterCollective(*phases.before);
  if (phases.exchange) exchangeInChunks(*phases.exchange);
  if (phases.after) clusterCollective(*phases.after);
}

void Comm::composedPhasesInChunks(const ComposedPhases& phases, const CollArgs& args,
                                  size_t chunk) {
  // Chunk t's exchange runs beside the cluster's phase before the exchange of chunk t+1 and its
  // phase after the exchange of chunk t-1, each a call of the cluster (every rank of it makes the
  // same calls in the same order: before 0, before 1, after 0, before 2, after 1, ...). The
  // exchange's members see the same chunk calls as from exchangeInChunks.
  const size_t chunks = chunkCount(args.count * dtypeSize(args.dtype), chunk);
  auto part = [chunk](const CollArgs& a, size_t t) { return chunkOfCall(a, t, chunk); };
  Group* exchange = phases.exchange ? composition_.exchange.get() : nullptr;
  if (exchange != nullptr) beginCall(*exchange, *phases.exchange);
  std::optional<AlongsideRun> beside;  // the exchange of the chunk before
  size_t besides = 0;
  for (size_t t = 0; t <= chunks; ++t) {
    if (t < chunks && phases.before) clusterCollective(part(*phases.before, t));
    if (beside) {
      beside->finish();
      beside.reset();
    }
    if (t < chunks && exchange != nullptr)
      besides += exchangeChunkBeside(part(*phases.exchange, t), beside) ? 1 : 0;
    if (t > 0 && phases.after) clusterCollective(part(*phases.after, t - 1));
  }
  LOOM_INFO(kSubsysColl, rank_, funcName(args.func), ": the cluster's phases in ", chunks,
            " chunks of ", chunk, " B",
            exchange != nullptr
                ? "; " + std::to_string(besides) + " of them exchanged beside the cluster's phases"
                : std::string());
}

bool Comm::exchangeChunkBeside(const CollArgs& args, std::optional<AlongsideRun>& beside) {
  // The algorithm every member runs on this chunk (runChunked's and the pipelined shape's choice).
  // A schedule on the channels moves beside the cluster's arena; any other runs now. So does
  // every chunk where waits beside would block (not spinning, no thread): the leader's one
  // thread then does the same work either way, and an arena wait that must also watch sockets
  // blocks in slices (measured on 2 cores, CPU clusters of 2 on 2 fake nodes, 16-64 MiB:
  // 1.12-1.24x the time of running it now).
  Group& exchange = *composition_.exchange;
  const AlgoContext& ctx = exchange.ctx();
  const AlgoContext& cluster = composition_.cluster->ctx();
  const uint64_t bytes = args.count * dtypeSize(args.dtype);
  const Algorithm& algo = exchange.select(args.func, bytes);
  const bool onThread = cluster.threadsBeside(bytes);  // decided once: it may change call to call
  if (algo.native >= 0 || algo.run != nullptr || algo.runWith || algo.build == nullptr ||
      !(onThread || cluster.spinsBeside())) {
    runAlgorithm(algo, ctx, args);
    return false;
  }
  buildSchedule(ctx, args, algo.build);
  beside.emplace(ctx, cluster, *ctx.schedule, args.send, args.recv, onThread);
  return true;
}

void Comm::composedAllReduce(const CollArgs& args) {
  const size_t bytes = args.count * dtypeSize(args.dtype);
  ComposedPhases phases;
  // 1. Into the leader's output buffer.
  if (composition_.cluster) {
    CollArgs reduce = args;
    reduce.func = loomFuncReduce;
    reduce.root = 0;
    phases.before = reduce;
  } else {
    copyLocal(args.recv, args.send, bytes, args.stream);
  }
  // 2. The leaders, in place on their output.
  if (composition_.exchange) {
    CollArgs exchange = args;
    exchange.send = args.recv;
    phases.exchange = exchange;
  }
  // 3. From the leader to the rest of its cluster.
  if (composition_.cluster) {
    CollArgs broadcast = args;
    broadcast.func = loomFuncBroadcast;
    broadcast.root = 0;
    broadcast.send = args.recv;
    phases.after = broadcast;
  }
  runComposedPhases(phases, args);
}

void Comm::composedBroadcast(const CollArgs& args) {
  const int rootCluster = clusters_.clusterOf(args.root);
  const bool inRootCluster = clusters_.clusterOf(rank_) == rootCluster;
  ComposedPhases phases;
  // 1. Inside the root's collapsed cluster, from the root: its leader then holds the data.
  if (composition_.cluster && inRootCluster) {
    CollArgs local = args;
    local.root = clusters_.localIndex(args.root);
    phases.before = local;
  }
  // 2. From the member that stands for the root: the root itself (from its input) or its
  // leader (from its output).
  if (composition_.exchange) {
    CollArgs exchange = args;
    exchange.root = exchangeRoot(args.root);
    exchange.send = rank_ == args.root && !composition_.cluster ? args.send : args.recv;
    phases.exchange = exchange;
  }
  // 3. From the leader inside every other collapsed cluster.
  if (composition_.cluster && !inRootCluster) {
    CollArgs local = args;
    local.root = 0;
    local.send = args.recv;
    phases.after = local;
  }
  runComposedPhases(phases, args);
}

void Comm::composedReduce(const CollArgs& args) {
  const size_t bytes = args.count * dtypeSize(args.dtype);
  const int rootCluster = clusters_.clusterOf(args.root);
  const bool inRootCluster = clusters_.clusterOf(rank_) == rootCluster;
  const bool leader = composition_.cluster && clusters_.leader(clusters_.clusterOf(rank_)) == rank_;
  // A leader's partial result: in the root's output where the leader is the root, else in
  // scratch (a non-root's output buffer need not exist).
  char* partial = nullptr;
  if (leader)
    partial =
        rank_ == args.root ? static_cast<char*>(args.recv) : composedScratch(bytes, args.stream);
  ComposedPhases phases;
  // 1. Every other collapsed cluster, to its leader.
  if (composition_.cluster && !inRootCluster) {
    CollArgs local = args;
    local.root = 0;
    if (leader) local.recv = partial;
    phases.before = local;
  }
  // 2. To the member that stands for the root; the root's leader adds its own input.
  if (composition_.exchange) {
    CollArgs exchange = args;
    exchange.root = exchangeRoot(args.root);
    if (leader) {
      exchange.send = inRootCluster ? args.send : partial;
      exchange.recv = partial;
    }
    phases.exchange = exchange;
  }
  // 3. Inside the root's collapsed cluster, to the root: its leader adds the exchange's result
  // (in place where the leader is the root).
  if (composition_.cluster && inRootCluster) {
    CollArgs local = args;
    local.root = clusters_.localIndex(args.root);
    if (leader) local.send = partial;
    phases.after = local;
  }
  runComposedPhases(phases, args);
}

void Comm::composedAllGather(const CollArgs& args) {
  const size_t es = dtypeSize(args.dtype);
  const size_t block = args.count * es;
  const int cluster = clusters_.clusterOf(rank_);
  const bool leader = composition_.cluster && clusters_.leader(cluster) == rank_;
  const size_t myBlocks = composition_.cluster ? clusters_.size(cluster) : 1;
  // A leader's scratch: its cluster's blocks, then (not in order) every block in exchange order.
  char* scratch = nullptr;
  if (leader || (composition_.exchange && !composition_.inOrder))
    scratch = composedScratch(
        (leader ? myBlocks * block : 0) + (composition_.inOrder ? 0 : nranks_ * block),
        args.stream);
  char* gathered = scratch;
  char* exchanged = composition_.inOrder ? static_cast<char*>(args.recv)
                                         : scratch + (leader ? myBlocks * block : 0);
  // 1. The cluster's blocks to its leader, in cluster order.
  if (composition_.cluster) {
    CollArgs local = args;
    local.func = loomFuncGather;
    local.root = 0;
    local.recv = leader ? gathered : nullptr;
    clusterCollective(local);
  }
  if (composition_.exchange) {
    // 2. Every member's blocks to every member: its blocks from offset 0 to all, theirs
    // received member after member.
    const size_t members = composition_.first.size() - 1;
    size_t* sendCounts = composition_.counts.data();
    size_t* sendDispls = sendCounts + members;
    size_t* recvCounts = sendDispls + members;
    size_t* recvDispls = recvCounts + members;
    for (size_t m = 0; m < members; ++m) {
      sendCounts[m] = myBlocks * args.count;
      sendDispls[m] = 0;
      recvCounts[m] =
          static_cast<size_t>(composition_.first[m + 1] - composition_.first[m]) * args.count;
      recvDispls[m] = static_cast<size_t>(composition_.first[m]) * args.count;
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
    if (!composition_.inOrder) {
      for (int i = 0; i < nranks_;) {
        int j = i + 1;
        while (j < nranks_ && composition_.order[j] == composition_.order[j - 1] + 1) ++j;
        copyLocal(static_cast<char*>(args.recv) + composition_.order[i] * block,
                  exchanged + i * block, (j - i) * block, args.stream);
        i = j;
      }
    }
  }
  // 3. The whole output from the leader to the rest of its cluster.
  if (composition_.cluster) {
    CollArgs local = args;
    local.func = loomFuncBroadcast;
    local.root = 0;
    local.count = args.count * nranks_;
    local.send = args.recv;
    clusterCollective(local);
  }
}

void Comm::composedReduceScatter(const CollArgs& args) {
  const size_t es = dtypeSize(args.dtype);
  const size_t block = args.count * es;
  const int cluster = clusters_.clusterOf(rank_);
  const bool leader = composition_.cluster && clusters_.leader(cluster) == rank_;
  const size_t myBlocks = composition_.cluster ? clusters_.size(cluster) : 1;
  // A leader's scratch: its cluster's partial sum of the whole input, then its cluster's blocks
  // of the result in cluster order.
  char* partial = leader ? composedScratch((nranks_ + myBlocks) * block, args.stream) : nullptr;
  char* result = leader ? partial + nranks_ * block : nullptr;
  // 1. The cluster's sum of the whole input, to its leader.
  if (composition_.cluster) {
    CollArgs local = args;
    local.func = loomFuncReduce;
    local.root = 0;
    local.count = args.count * nranks_;
    local.recv = leader ? partial : nullptr;
    clusterCollective(local);
  }
  // 2. Each run of consecutive ranks that one member stands for, reduced to that member.
  if (composition_.exchange) {
    const char* input = leader ? partial : static_cast<const char*>(args.send);
    const int me = composition_.exchangeRank[rank_];
    for (const Composition::Run& run : composition_.runs) {
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
  if (composition_.cluster) {
    CollArgs local = args;
    local.func = loomFuncScatter;
    local.root = 0;
    local.send = leader ? result : nullptr;
    clusterCollective(local);
  }
}

}  // namespace loom
