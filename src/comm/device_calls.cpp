// A device rank's collectives that run host algorithms on device data (backends without native
// collectives): the shape of each call (algorithms/staged.hpp: staged, mapped; chunked.hpp:
// pipelined) built as a schedule and run by the executor (exec/executor.hpp), inline where the
// call blocks, or in stream order where the device runs host tasks: the device lane is enqueued
// on the caller's stream at call time and the host part runs as a job on the communicator's
// progress queue (comm/stream_jobs.hpp). Which shape:
//   heterogeneous allreduce / reduce / broadcast: pipelined in chunks;
//   heterogeneous composed calls (comm/hetero_composed.cpp): staged phases inside a cluster
//     (where its collapse is forced: no native collectives), the exchange pipelined (staged for
//     the allgather's alltoallv), each on its group of ranks (comm/group.hpp);
//   everything else: mapped where the device maps host memory and reduces on one node, else
//     staged.
#include "algorithms/partition.hpp"
#include "base/dtype.hpp"
#include "base/log.hpp"
#include "comm/comm.hpp"

namespace loom {

namespace {

// The call as its job runs it, after the call returned: an alltoallv's count arrays copied into
// the job (the caller's may be gone by then).
CollArgs withOwnCounts(StreamJob& job, const CollArgs& args, int nranks) {
  CollArgs a = args;
  if (a.func != loomFuncAllToAllv) return a;
  const size_t* arrays[4] = {a.sendCounts, a.sendDispls, a.recvCounts, a.recvDispls};
  for (int i = 0; i < 4; ++i) job.counts[i].assign(arrays[i], arrays[i] + nranks);
  a.sendCounts = job.counts[0].data();
  a.sendDispls = job.counts[1].data();
  a.recvCounts = job.counts[2].data();
  a.recvDispls = job.counts[3].data();
  return a;
}

// A device shape's buffers: the call's input and output, then its staging (the first staging
// buffer on the staging's receive side, the second on its send side).
void bindShape(const Schedule& s, const CollArgs& a, HostStaging& staging,
               std::vector<char*>& bound) {
  bound.clear();
  bound.push_back(static_cast<char*>(const_cast<void*>(a.send)));
  bound.push_back(static_cast<char*>(a.recv));
  int stagings = 0;
  for (size_t b = 2; b < s.buffers().size(); ++b) {
    const uint64_t bytes = s.buffers()[b].bytes;
    bound.push_back(stagings++ == 0 ? staging.recv(bytes) : staging.send(bytes));
  }
}

}  // namespace

void Comm::buildDeviceCall(Group& group, DeviceCall& call, DeviceShape shape, const CollArgs& a,
                           const Algorithm* algo, size_t chunkBytes) {
  Schedule& s = *call.schedule;
  s.clear(group.size());
  switch (shape) {
    case DeviceShape::kStaged:
      buildStaged(s, a, group.rank(), group.size());
      break;
    case DeviceShape::kMapped:
      buildMapped(s);
      break;
    case DeviceShape::kPipelined:
      buildPipelined(s, a, group.rank(), chunkBytes);
      break;
  }
  s.finish();
  bindShape(s, a, *deviceCalls_.staging, *call.bound);
  call.calls->clear(shape == DeviceShape::kMapped ? group.ctx() : group.hostCtx());
  if (shape == DeviceShape::kStaged) call.calls->add(*algo, stagedHostArgs(s, *call.bound, a));
  if (shape == DeviceShape::kMapped) call.calls->add(*algo, a);
  if (shape == DeviceShape::kPipelined) {
    // `algo`, where given, runs every chunk (Comm::chunksRun). Two lambdas of at most two
    // pointers each: a std::function holds those without allocating.
    auto chosen = [algo](size_t) -> const Algorithm& { return *algo; };
    auto perChunk = [&](size_t bytes) -> const Algorithm& { return group.select(a.func, bytes); };
    addPipelinedCalls(*call.calls,
                      algo != nullptr ? ChunkAlgorithm(chosen) : ChunkAlgorithm(perChunk), s,
                      *call.bound, a, chunkBytes);
  }
}

ExecEnv Comm::deviceEnv(const Group& group, loomStream_t stream, HostCalls& calls) {
  const AlgoContext& host = group.hostCtx();
  ExecEnv env;
  env.device = hostDevice_.get();
  env.channels = std::span<Channel* const>(*host.channels);
  env.check = &host.check;
  env.pollSet = host.pollSet;
  env.corePeers = host.peers;
  env.streamingMinBytes = host.streamingMinBytes;
  env.streamDevice = device_.get();
  env.stream = stream;
  env.calls = &calls;
  env.observer = host.observer;
  return env;
}

void Comm::runDeviceCall(Group& group, DeviceShape shape, const CollArgs& a, const Algorithm* algo,
                         size_t chunkBytes) {
  // Blocking calls: nothing in flight uses old staging memory.
  deviceCalls_.staging->releaseRetired();
  DeviceCall call{&deviceCalls_.schedule, &deviceCalls_.bound, &deviceCalls_.calls};
  buildDeviceCall(group, call, shape, a, algo, chunkBytes);
  LOOM_TRACE(kSubsysColl, rank_, deviceCalls_.schedule.describe());
  deviceCalls_.executor.run(deviceCalls_.schedule, deviceCalls_.bound,
                            deviceEnv(group, a.stream, deviceCalls_.calls));
}

void Comm::releaseStagingIfIdle() {
  // Staging memory that grew stays allocated while calls in flight may use it (HostStaging).
  if (deviceCalls_.staging->retiring() && deviceCalls_.jobs->idle())
    deviceCalls_.staging->releaseRetired();
}

void Comm::enqueueDeviceCall(Group& group, DeviceShape shape, const CollArgs& args,
                             const Algorithm* algo, size_t chunkBytes) {
  releaseStagingIfIdle();
  StreamJob& job = deviceCalls_.jobs->begin(args.stream);
  checkUsable();  // a full queue may have waited for a job that failed
  const CollArgs a = withOwnCounts(job, args, group.size());
  job.group = &group;
  job.args = a;
  job.flight = recordQueued(group, a, algo);
  DeviceCall call{&job.schedule, &job.bound, &job.calls};
  try {
    buildDeviceCall(group, call, shape, a, algo, chunkBytes);
    job.order.prepare(job.schedule, [&] {
      job.events.push_back(deviceCalls_.jobs->takeEvent());
      return job.events.back();
    });
  } catch (...) {
    deviceCalls_.jobs->abandon(job, args.stream);
    throw;
  }
  // Handed over first: the host part must run while the stream side is enqueued (a call of many
  // chunks can fill the device's launch queue behind its first gate).
  LOOM_TRACE(kSubsysColl, rank_, job.schedule.describe());
  deviceCalls_.jobs->submitEarly();
  try {
    Executor::enqueueDeviceLane(job.schedule, job.bound, deviceEnv(group, a.stream, job.calls),
                                deviceCalls_.jobs->gate(), job.order);
  } catch (...) {
    deviceCalls_.jobs->abandon(job,
                               args.stream);  // the failure aborts the communicator (the caller's)
    throw;
  }
  deviceCalls_.jobs->enqueued(args.stream);
}

void Comm::enqueueCollective(const Algorithm& algo, const CollArgs& args) {
  // The call's number and signature (the mismatch check) are taken when its host part runs, on
  // the progress queue, in issue order (runJob). A composed call's phases are counted by the
  // groups they run on, as on the ranks that do not run in stream order; LOOM_CHECK=2 does not
  // fingerprint it (the groups have no bootstrap; their signatures still meet).
  CollArgs a = args;
  if (a.accum < 0) a.accum = config_.accum;
  if (composition_.hetero && composes(a, algo)) return executeComposed(a);
  if (main_->checker().mode() >= 2) verifyFingerprint(args);
  LOOM_INFO(kSubsysColl, rank_, funcName(args.func), " count ", args.count, " ",
            dtypeName(args.dtype), " -> ", algo.name,
            composition_.hetero && elementwise(args.func) ? " (heterogeneous: in chunks)" : "",
            " (in stream order)");
  if (composition_.hetero && elementwise(a.func)) {
    return enqueueDeviceCall(*main_, DeviceShape::kPipelined, a, chunksRun(algo), heteroChunk(a));
  }
  const bool mapped = transports_->singleNode() && runsMapped(algo, device_->caps());
  enqueueDeviceCall(*main_, mapped ? DeviceShape::kMapped : DeviceShape::kStaged, a, &algo, 0);
}

void Comm::runJob(StreamJob& job) {
  Group& group = *job.group;
  startClock();  // each call's host part has the communicator's timeout from its start
  flight_->start(job.flight, group.checker().calls() + 1, nullptr);  // beginCall's number
  beginCall(group, job.args);
  deviceCalls_.executor.runHostLanes(job.schedule, job.bound,
                                     deviceEnv(group, job.args.stream, job.calls),
                                     deviceCalls_.jobs->gate(), job.order);
  flight_->finish(job.flight, loomSuccess);
}

}  // namespace loom
