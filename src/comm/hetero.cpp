// The heterogeneous side of the communicator: its clusters (topology/cluster_map), and how it runs
// a collective across them. Flat: every rank in the host algorithm, elementwise calls in chunks
// with device ranks pipelined through host memory (algorithms/chunked). Composed (allreduce,
// reduce, broadcast, allgather, reduce-scatter; comm/composition_.heterocomposed.cpp): a cluster
// with native collectives and several ranks collapses to its leader:
//   1. the cluster's own collective inside each collapsing cluster (a CUDA cluster's kernels),
//      to its leader (reduce, gather) or, for a broadcast, from a root inside it;
//   2. the exchange, on a host communicator of those leaders and every rank of the other
//      clusters, device ranks staged (pipelined in chunks where elementwise) through host
//      memory: a collapsed cluster's bytes cross the device-host boundary once each way, on one
//      rank;
//   3. the cluster's own collective again, from its leader (broadcast, scatter) or, for a
//      reduce, to a root inside it.
// Here: deciding which calls compose (the same on every rank) and setting up the clusters' and
// the exchange's sub-communicators. Every rank of every kind ends with the same bits.
// On a device rank whose device runs host tasks every phase is enqueued on the caller's stream
// and the call returns (comm/stream_calls.cpp).
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
              : "from 1 MiB, clusters with native collectives and several "
                "ranks collapse")
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
  out << "\n" << selector_->explain();
  return out.str();
}

void Comm::executeChunked(const CollArgs& args) {
  if (onDevice())
    runInChunks(args, composition_.chunkBytes, device_.get(), deviceCalls_.staging.get());
  else
    runInChunks(args, composition_.chunkBytes, nullptr, nullptr);
}

void Comm::runInChunks(const CollArgs& args, size_t chunkSetting, Device* device,
                       HostStaging* staging) {
  const size_t elementBytes = dtypeSize(args.dtype);
  const size_t chunk = heteroChunkBytes(args.count * elementBytes, elementBytes, chunkSetting);
  auto select = [&](size_t chunkBytes) -> const Algorithm& {
    return selector_->select(args.func, chunkBytes);
  };
  if (device == nullptr)
    runChunked(select, ctx_, args, chunk);
  else
    runDeviceCall(DeviceShape::kPipelined, args, nullptr, chunk, *device, *staging);
}

bool Comm::composes(const CollArgs& args) {
  // Every rank decides the same from the call alone: a composed call is counted by the
  // sub-communicators only, a flat one by this communicator.
  const loomFunc_t f = args.func;
  const bool reduces = f == loomFuncAllReduce || f == loomFuncReduce || f == loomFuncReduceScatter;
  if (!reduces && f != loomFuncBroadcast && f != loomFuncAllGather) return false;
  // Average divides once by the whole communicator's size: its phases would each divide (by
  // their own size), so it runs flat.
  if ((reduces && args.op == loomAvg) || composition_.algo == "flat") return false;
  // Three phases cost three latencies: under 1 MiB (measured on one H100 with two CUDA ranks
  // sharing it beside two CPU ranks: 48 us composed against 18 us flat at 8 B) flat is faster.
  // Allgather and reduce-scatter: the whole gathered (scattered) array.
  constexpr size_t kComposedMinBytes = 1 << 20;
  size_t bytes = args.count * dtypeSize(args.dtype);
  if (f == loomFuncAllGather || f == loomFuncReduceScatter) bytes *= nranks_;
  if (composition_.algo == "auto" && bytes < kComposedMinBytes) return false;
  if (!composition_.ready) setUpComposition();
  return composition_.composed;
}

void Comm::prepareComposition() {
  // No cluster of several ranks: nothing collapses, the allreduce is flat, nothing to set up.
  bool several = false;
  for (int c = 0; c < clusters_.count(); ++c) several |= clusters_.size(c) > 1;
  if (!several || composition_.algo == "flat") {
    composition_.ready = true;
    composition_.composed = false;
    return;
  }
  // The sub-communicators are made by collective splits. Made at the first large allreduce, a
  // device rank's split would wait, at call time, for peers still in its earlier calls, which
  // wait for its stream: a call that must return at once could not. So where some rank is on a
  // device they are made here, at init (every rank decides the same from the same rank infos).
  bool device = false;
  for (const RankInfo& r : ranks_) device |= r.deviceKind != "cpu";
  if (device) setUpComposition();
}

void Comm::setUpComposition() {
  composition_.ready = true;
  const int cluster = clusters_.clusterOf(rank_);
  CommConfig sub = config_;
  sub.clusterSplit.clear();  // one kind each: the sub-communicators are homogeneous
  sub.abortFlag = nullptr;
  sub.progress = progress_;  // one progress queue for the tree
  sub.progressRoot = false;
  sub.name = config_.name + (config_.name.empty() ? "" : "/") + "cluster";
  sub.algo.clear();  // LOOM_ALGO names this communicator's host algorithms (the exchange's below)
  // A phase that fails on a sub-communicator's progress thread (stream-ordered device ranks)
  // fails this communicator at once, not at its next call.
  sub.onFail = [this](const Error& e) { fail(e); };
  // Built aside and published under the error lock: a progress thread failing meanwhile reads
  // them (fail()).
  std::unique_ptr<Comm> clusterComm = split(clusters_.size(cluster) > 1 ? cluster : -1, rank_, sub);
  // A cluster collapses to its leader where its own collectives beat taking part rank by rank:
  // it has native ones (CUDA) and several ranks (forced: every cluster of several ranks). The
  // others' ranks join the exchange themselves: a CPU cluster reducing to its leader and
  // broadcasting again would move its bytes through memory three times instead of once.
  const bool native = clusterComm && clusterComm->native_;
  std::vector<std::string> all =
      withBootstrap([&](Bootstrap& b) { return b.allGather(native ? "1" : "0"); });
  auto collapses = [&](int c) {
    return clusters_.size(c) > 1 &&
           (composition_.algo == "composed" || all[clusters_.leader(c)] == "1");
  };
  bool composed = false;
  for (int c = 0; c < clusters_.count(); ++c) composed |= collapses(c);
  if (!collapses(cluster) || !composed) clusterComm.reset();
  std::unique_ptr<Comm> leaderComm;
  if (composed) {
    CommConfig exchange = sub;
    exchange.device = "cpu";
    exchange.algo = config_.algo;
    exchange.name = config_.name + (config_.name.empty() ? "" : "/") + "exchange";
    const bool member = !clusterComm || clusters_.leader(cluster) == rank_;
    leaderComm = split(member ? 0 : -1, rank_, exchange);
  }
  // What every rank knows of the composition: who collapses, the exchange's numbering (split
  // key = global rank) and its blocks.
  composition_.collapses.assign(clusters_.count(), 0);
  for (int c = 0; c < clusters_.count(); ++c) composition_.collapses[c] = composed && collapses(c);
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
  {
    std::lock_guard<std::mutex> lock(composition_.publish);
    composition_.composed = composed;
    composition_.cluster = std::move(clusterComm);
    composition_.leaders = std::move(leaderComm);
  }
  LOOM_INFO(kSubsysInit, rank_,
            "heterogeneous allreduce, reduce, broadcast, allgather, reduce-scatter: ",
            composition_.composed
                ? "composed (each collapsed cluster's own collective to its leader, the "
                  "exchange of the leaders and the other ranks, the cluster's own "
                  "collective from its leader)"
                : "flat (no cluster has native collectives and several ranks)",
            composition_.cluster
                ? "; this rank's cluster collapses: " + composition_.cluster->deviceDescription()
                : std::string());
}

void Comm::collectiveInChunks(const CollArgs& args, size_t chunkSetting, Device* device,
                              HostStaging* staging) {
  beginOperation();
  failOnError([&] {
    beginCall(args);
    CollArgs a = args;
    if (a.accum < 0) a.accum = config_.accum;
    runInChunks(a, chunkSetting, device, staging);
  });
}

void Comm::collectiveStaged(const CollArgs& args, Device* device, HostStaging* staging) {
  beginOperation();
  failOnError([&] {
    beginCall(args);
    CollArgs a = args;
    if (a.accum < 0) a.accum = config_.accum;
    const Algorithm& algo = selector_->select(a.func, a.count * dtypeSize(a.dtype));
    if (device == nullptr)
      runAlgorithm(algo, ctx_, a);
    else
      runDeviceCall(DeviceShape::kStaged, a, &algo, 0, *device, *staging);
  });
}

}  // namespace loom
