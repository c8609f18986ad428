// The heterogeneous side of the communicator: its clusters (topology/cluster_map), and how it runs
// a collective across them. Flat: every rank in the host algorithm, elementwise calls in chunks
// with device ranks pipelined through host memory (algorithms/chunked). Composed (allreduce,
// reduce, broadcast, allgather, reduce-scatter; comm/hetero_composed.cpp): every cluster of
// several ranks collapses to its leader (one without native collectives runs host algorithms):
//   1. the cluster's own collective inside each collapsing cluster (a CUDA cluster's kernels),
//      to its leader (reduce, gather) or, for a broadcast, from a root inside it;
//   2. the exchange, a group on the host CPU of those leaders and every rank of the clusters of
//      one rank, device ranks staged (pipelined in chunks where elementwise) through host
//      memory: a collapsed cluster's bytes cross the device-host boundary once each way, on one
//      rank;
//   3. the cluster's own collective again, from its leader (broadcast, scatter) or, for a
//      reduce, to a root inside it.
// Here: deciding which calls compose (the same on every rank) and setting up the clusters' and
// the exchange as groups of this communicator's ranks (comm/group.hpp: their own call check,
// table and workspaces over the communicator's channels; no sub-communicator, no second
// bootstrap). Every rank of every kind ends with the same bits.
// On a device rank whose device runs host tasks every phase is enqueued on the caller's stream
// and the call returns (comm/device_calls.cpp).
#include <algorithm>
#include <cstring>
#include <sstream>

#include "base/dtype.hpp"
#include "base/env.hpp"
#include "base/log.hpp"
#include "comm/comm.hpp"

namespace loom {

void Comm::setUpClusters() {
  // Every rank sees the same rank infos, so every rank decides the same (none is left waiting in
  // an exchange the others skip, such as a backend's native setup).
  for (const RankInfo& r : ranks_)
    LOOM_CHECK_ARG(r.clusterSplit == ranks_[0].clusterSplit,
                   "LOOM_CLUSTER_SPLIT differs between "
                   "ranks: '",
                   ranks_[0].clusterSplit, "' on rank 0, '", r.clusterSplit, "' on rank ", r.rank);
  clusters_ = ClusterMap::compute(ranks_, ranks_[0].clusterSplit);
  composition_.hetero = clusters_.heterogeneous();
  if (!composition_.hetero) return;
  // Chunk boundaries must be the same everywhere, or the ranks' chunk calls would not meet.
  int64_t configured = env::heteroChunkBytes();
  LOOM_CHECK_ARG(configured >= 0, "LOOM_HETERO_CHUNK_BYTES=", configured, " must be >= 0");
  composition_.algo = env::heteroAlgo();
  LOOM_CHECK_ARG(
      composition_.algo == "auto" || composition_.algo == "flat" || composition_.algo == "composed",
      "LOOM_HETERO_ALGO='", composition_.algo, "' is not auto, flat or composed");
  std::string mine = "LOOM_HETERO_CHUNK_BYTES=" + std::to_string(configured) +
                     " LOOM_HETERO_ALGO=" + composition_.algo;
  std::vector<std::string> all = withBootstrap([&](Bootstrap& b) { return b.allGather(mine); });
  for (int r = 0; r < nranks_; ++r)
    LOOM_CHECK_ARG(all[r] == all[0], "heterogeneous settings differ between ranks: ", all[0],
                   " on rank 0, ", all[r], " on rank ", r);
  composition_.chunkBytes = static_cast<size_t>(configured);
  LOOM_INFO(kSubsysInit, rank_, "heterogeneous communicator: ", clusters_.describe(),
            "; this rank is in cluster ", clusters_.clusterOf(rank_));
}

std::string Comm::describeHeterogeneous() const {
  if (!composition_.hetero) return std::string();
  std::ostringstream out;
  out << "heterogeneous communicator, " << clusters_.describe() << "\n"
      << "  allreduce, reduce, broadcast: in chunks of "
      << (composition_.chunkBytes > 0 ? std::to_string(composition_.chunkBytes) + " B"
                                      : std::string("1/8 of the call (1 to 4 MiB)"))
      << ", each chunk by the host algorithm below; device ranks copy chunks to and from pinned "
         "host memory, pipelined with the exchange, in the caller's stream order where the device "
         "runs host tasks\n"
      << "  other collectives and send/recv: the host algorithm below; device ranks stage the "
         "whole call through pinned host memory\n"
      << "  composed (LOOM_HETERO_ALGO=" << composition_.algo << ": "
      << (composition_.algo == "flat" ? "never"
          : composition_.algo == "composed"
              ? "every call, every cluster of several ranks collapses"
              : "never (auto: flat, which measured faster at every size)")
      << "): allreduce, reduce, broadcast, allgather, reduce-scatter (not avg) run the cluster's "
         "own collective to its leader, an exchange of the leaders and the other ranks (chunked; "
         "allgather: alltoallv then reorder; reduce-scatter: a reduce per run of ranks), the "
         "cluster's own collective from its leader";
  if (composition_.ready) {
    out << "; ";
    if (!composition_.composed) out << "nothing collapses here";
    for (int c = 0; c < clusters_.count() && composition_.composed; ++c)
      if (composition_.collapses[c])
        out << "cluster " << c << " collapses to rank " << clusters_.leader(c) << ", ";
    if (composition_.composed)
      out << "the exchange has " << composition_.first.size() - 1 << " members"
          << (composition_.inOrder ? "" : " (allgather reorders its blocks)");
  }
  out << "\n" << main_->selector().explain();
  return out.str();
}

void Comm::executeChunked(const Algorithm& algo, const CollArgs& args) {
  runInChunks(*main_, args, chunksRun(algo));
}

const Algorithm* Comm::chunksRun(const Algorithm& algo) {
  // A plan was chosen for the call's size (its size range, the selector callback and LOOM_ALGO
  // speak of calls) and runs on every chunk; the built-in table chooses for each chunk's size.
  return isPlan(algo) ? &algo : nullptr;
}

size_t Comm::heteroChunk(const CollArgs& args) const {
  const size_t elementBytes = dtypeSize(args.dtype);
  return heteroChunkBytes(args.count * elementBytes, elementBytes, composition_.chunkBytes);
}

void Comm::runInChunks(Group& group, const CollArgs& args, const Algorithm* everyChunk) {
  const size_t chunk = heteroChunk(args);
  if (onDevice()) return runDeviceCall(group, DeviceShape::kPipelined, args, everyChunk, chunk);
  // Two lambdas of at most two pointers each: a std::function holds those without allocating.
  auto chosen = [everyChunk](size_t) -> const Algorithm& { return *everyChunk; };
  auto perChunk = [&](size_t bytes) -> const Algorithm& { return group.select(args.func, bytes); };
  runChunked(everyChunk != nullptr ? ChunkAlgorithm(chosen) : ChunkAlgorithm(perChunk), group.ctx(),
             args, chunk);
}

bool Comm::composes(const CollArgs& args, const Algorithm& chosen) {
  // Every rank decides the same from the call alone: a composed call is counted by the
  // groups only, a flat one by this communicator.
  const loomFunc_t f = args.func;
  const bool reduces = f == loomFuncAllReduce || f == loomFuncReduce || f == loomFuncReduceScatter;
  if (!reduces && f != loomFuncBroadcast && f != loomFuncAllGather) return false;
  // Average divides once by the whole communicator's size: its phases would each divide (by
  // their own size), so it runs flat.
  if (reduces && args.op == loomAvg) return false;
  // flat and auto run flat. Composed lost at every size where it was measured with each GPU rank
  // on its own GPU (4xH200, 2026-11-28, GGCC allreduce: 6.4-7.3 ms per call up to 4 MiB, a floor
  // not yet explained, and 1.7-2.0x flat's time from 16 MiB); under 1 MiB it lost on one H100
  // shared by two CUDA ranks too (48 us against 18 us at 8 B). It runs when asked for.
  if (composition_.algo != "composed") return false;
  // An execution plan is for the whole communicator's ranks: the call runs flat. `chosen` is the
  // call's one selection (a selector callback is asked once per call).
  if (isPlan(chosen)) return false;
  if (!composition_.ready) setUpComposition();
  return composition_.composed;
}

void Comm::prepareComposition() {
  // No cluster of several ranks: nothing collapses, the allreduce is flat, nothing to set up.
  bool several = false;
  for (int c = 0; c < clusters_.count(); ++c) several |= clusters_.size(c) > 1;
  if (!several || composition_.algo != "composed") {
    composition_.ready = true;
    composition_.composed = false;
    return;
  }
  // The groups are set up collectively (the bootstrap, the cluster's native set-up). Made at the
  // first large allreduce, a device rank's set-up would wait, at call time, for peers still in
  // its earlier calls, which wait for its stream: a call that must return at once could not. So
  // where some rank is on a device they are made here, at init (every rank decides the same from
  // the same rank infos).
  bool device = false;
  for (const RankInfo& r : ranks_) device |= r.deviceKind != "cpu";
  if (device) setUpComposition();
}

std::unique_ptr<Group> Comm::makeGroup(std::vector<int> members, bool onHost) {
  GroupSetup setup = groupSetup(std::move(members));
  if (onHost) setup.device = hostDevice_.get();
  // LOOM_ALGO names the host algorithms: the exchange's, not a cluster's native ones.
  if (onHost) setup.algo = config_.algo;
  setup.deviceName = onHost ? "cpu" : device_->identity().kind;
  setup.awaitsNative = !onHost;  // a cluster's group: setUpNative follows
  return std::make_unique<Group>(std::move(setup));
}

void Comm::attachGroupArena(Group* group) {
  // Collective over the whole communicator (the names travel through the bootstrap); a group on
  // one node gets an arena of its own ranks, made by its first rank.
  bool oneNode = group != nullptr;
  for (int i = 0; oneNode && i < group->size(); ++i)
    oneNode = nodes_.nodeOf(group->member(i)) == nodes_.nodeOf(rank_);
  const size_t chunk = static_cast<size_t>(std::max<int64_t>(env::shmChunkBytes(), 0));
  ArenaLayout layout = oneNode ? ArenaLayout::compute(group->size(), chunk, 4096) : ArenaLayout{};
  std::string name;
  ShmArena arena;
  if (oneNode && group->rank() == 0) {
    name = ShmSegment::uniqueName("/loom-group-");
    arena = ShmArena::create(name, layout);
  }
  std::vector<std::string> all = withBootstrap([&](Bootstrap& b) { return b.allGather(name); });
  if (oneNode && group->rank() != 0) arena = ShmArena::attach(all[group->member(0)], layout);
  withBootstrap([](Bootstrap& b) { b.barrier(); });  // everyone mapped it: the name can go
  if (!oneNode) return;
  if (group->rank() == 0) arena.unlinkName();
  group->attachArena(std::move(arena));
}

void Comm::setUpComposition() {
  composition_.ready = true;
  const int cluster = clusters_.clusterOf(rank_);
  // A cluster of several ranks is a group of this communicator (its own call check, table and
  // the device's native collectives, set up over its ranks' channels).
  std::unique_ptr<Group> clusterGroup;
  if (clusters_.size(cluster) > 1) {
    clusterGroup = makeGroup(clusters_.members(cluster), false);
    setUpNative(*clusterGroup);
  }
  // Composed (asked for: Comm::composes): every cluster of several ranks collapses to its leader.
  composition_.collapses.assign(clusters_.count(), 0);
  bool composed = false;
  for (int c = 0; c < clusters_.count(); ++c) {
    composition_.collapses[c] = clusters_.size(c) > 1;
    composed |= composition_.collapses[c] != 0;
  }
  numberExchange();
  // The exchange: the collapsed clusters' leaders and every rank of the other clusters, in
  // global rank order, on the host CPU (device ranks staged).
  std::unique_ptr<Group> exchange;
  if (composed && composition_.exchangeRank[rank_] >= 0) {
    std::vector<int> members;
    for (int g = 0; g < nranks_; ++g)
      if (composition_.exchangeRank[g] >= 0) members.push_back(g);
    exchange = makeGroup(std::move(members), true);
  }
  if (composed) {
    attachGroupArena(clusterGroup && !clusterGroup->native() ? clusterGroup.get() : nullptr);
    attachGroupArena(exchange.get());
  }
  {
    std::lock_guard<std::mutex> lock(composition_.publish);
    composition_.composed = composed;
    composition_.cluster = std::move(clusterGroup);
    composition_.exchange = std::move(exchange);
  }
  LOOM_INFO(kSubsysInit, rank_,
            "heterogeneous allreduce, reduce, broadcast, allgather, reduce-scatter: ",
            composition_.composed
                ? "composed (each collapsed cluster's own collective to its leader, the "
                  "exchange of the leaders and the other ranks, the cluster's own "
                  "collective from its leader)"
                : "flat (no cluster has several ranks)",
            composition_.cluster
                ? "; this rank's cluster collapses: " +
                      (composition_.cluster->native() ? composition_.cluster->native()->describe()
                                                      : deviceDescription_)
                : std::string());
}

void Comm::numberExchange() {
  // What every rank knows of the composition: each rank's number in the exchange (members in
  // global rank order) and the exchange's blocks.
  composition_.exchangeRank.assign(nranks_, -1);
  composition_.order.clear();
  composition_.first.clear();
  composition_.runs.clear();
  int members = 0;
  for (int g = 0; g < nranks_; ++g) {
    const int c = clusters_.clusterOf(g);
    if (composition_.collapses[c] && clusters_.leader(c) != g) continue;
    composition_.exchangeRank[g] = members++;
    composition_.first.push_back(static_cast<int>(composition_.order.size()));
    if (composition_.collapses[c])
      composition_.order.insert(composition_.order.end(), clusters_.members(c).begin(),
                                clusters_.members(c).end());
    else
      composition_.order.push_back(g);
  }
  composition_.first.push_back(nranks_);
  composition_.inOrder = true;
  for (int i = 0; i < nranks_; ++i) composition_.inOrder &= composition_.order[i] == i;
  for (int g = 0; g < nranks_; ++g) {
    const int member = exchangeRoot(g);
    if (!composition_.runs.empty() && composition_.runs.back().member == member)
      ++composition_.runs.back().length;
    else
      composition_.runs.push_back({g, 1, member});
  }
  composition_.counts.assign(4 * static_cast<size_t>(members), 0);
}

}  // namespace loom
