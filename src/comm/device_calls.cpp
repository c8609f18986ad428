// A device rank's collectives that run host algorithms on device data (backends without native
// collectives): the shape of each call (algorithms/staged.hpp: staged, mapped; chunked.hpp:
// pipelined) built as a schedule and run by the executor (exec/executor.hpp), inline where the
// call blocks, or in stream order where the device runs host tasks: the device lane is enqueued
// on the caller's stream at call time and the host part runs as a job on the communicator's
// progress queue (comm/stream_jobs.hpp). Which shape:
//   heterogeneous allreduce / reduce / broadcast: pipelined in chunks;
//   heterogeneous composed calls (comm/composition_.heterocomposed.cpp): the phases inside a
//   cluster are
//     calls of the cluster's communicator; the leaders' exchange is a call of this one whose host
//     calls run on the leaders' host communicator (pipelined, or staged for the allgather's
//     alltoallv);
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

void Comm::buildDeviceCall(DeviceCall& call, DeviceShape shape, const CollArgs& a,
                           const Algorithm* algo, size_t chunkBytes, HostStaging& staging) {
  Schedule& s = *call.schedule;
  s.clear(nranks_);
  switch (shape) {
    case DeviceShape::kStaged:
      buildStaged(s, a, rank_, nranks_);
      break;
    case DeviceShape::kMapped:
      buildMapped(s);
      break;
    case DeviceShape::kPipelined:
      buildPipelined(s, a, rank_, chunkBytes);
      break;
  }
  s.finish();
  bindShape(s, a, staging, *call.bound);
  call.calls->clear(shape == DeviceShape::kMapped ? ctx_ : hostCtx_);
  if (shape == DeviceShape::kStaged) call.calls->add(*algo, stagedHostArgs(s, *call.bound, a));
  if (shape == DeviceShape::kMapped) call.calls->add(*algo, a);
  if (shape == DeviceShape::kPipelined) {
    auto select = [&](size_t bytes) -> const Algorithm& {
      return selector_->select(a.func, bytes);
    };
    addPipelinedCalls(*call.calls, select, s, *call.bound, a, chunkBytes);
  }
}

ExecEnv Comm::deviceEnv(Device& device, loomStream_t stream, HostCalls& calls) {
  ExecEnv env;
  env.device = hostDevice_.get();
  env.channels = std::span<Channel* const>(*hostCtx_.channels);
  env.check = &hostCtx_.check;
  env.pollSet = &workspace_.pollSet;
  env.corePeers = hostCtx_.peers;
  env.streamingMinBytes = hostCtx_.streamingMinBytes;
  env.streamDevice = &device;
  env.stream = stream;
  env.calls = &calls;
  env.observer = hostCtx_.observer;
  return env;
}

void Comm::runDeviceCall(DeviceShape shape, const CollArgs& a, const Algorithm* algo,
                         size_t chunkBytes, Device& device, HostStaging& staging) {
  staging.releaseRetired();  // blocking calls: nothing in flight uses old staging memory
  DeviceCall call{&deviceCalls_.schedule, &deviceCalls_.bound, &deviceCalls_.calls};
  buildDeviceCall(call, shape, a, algo, chunkBytes, staging);
  deviceCalls_.executor.run(deviceCalls_.schedule, deviceCalls_.bound,
                            deviceEnv(device, a.stream, deviceCalls_.calls));
}

void Comm::releaseStagingIfIdle() {
  // Staging memory that grew stays allocated while calls in flight may use it (HostStaging).
  if (deviceCalls_.staging->retiring() && deviceCalls_.jobs->idle())
    deviceCalls_.staging->releaseRetired();
}

void Comm::enqueueDeviceCall(DeviceShape shape, const CollArgs& args, const Algorithm* algo,
                             size_t chunkBytes, Comm& host) {
  releaseStagingIfIdle();
  StreamJob& job = deviceCalls_.jobs->begin(args.stream);
  checkUsable();  // a full queue may have waited for a job that failed
  const CollArgs a = withOwnCounts(job, args, host.nranks_);
  job.host = &host == this ? nullptr : &host;
  job.args = a;
  job.flight = recordQueued(a, algo);
  DeviceCall call{&job.schedule, &job.bound, &job.calls};
  try {
    host.buildDeviceCall(call, shape, a, algo, chunkBytes, *deviceCalls_.staging);
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
  deviceCalls_.jobs->submitEarly();
  try {
    Executor::enqueueDeviceLane(job.schedule, job.bound, deviceEnv(*device_, a.stream, job.calls),
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
  // the progress queue, in issue order (runJob). A composed call is the sub-communicators'
  // (counted and fingerprinted there), as on the ranks that do not run in stream order.
  CollArgs a = args;
  if (a.accum < 0) a.accum = config_.accum;
  if (composition_.hetero && composes(a)) return executeComposed(a);
  if (checker_.mode() >= 2) verifyFingerprint(args);
  LOOM_INFO(kSubsysColl, rank_, funcName(args.func), " count ", args.count, " ",
            dtypeName(args.dtype), " -> ", algo.name,
            composition_.hetero && elementwise(args.func) ? " (heterogeneous: in chunks)" : "",
            " (in stream order)");
  if (composition_.hetero && elementwise(a.func)) {
    const size_t esize = dtypeSize(a.dtype);
    const size_t chunk = heteroChunkBytes(a.count * esize, esize, composition_.chunkBytes);
    return enqueueDeviceCall(DeviceShape::kPipelined, a, nullptr, chunk, *this);
  }
  const bool mapped = transports_->singleNode() && runsMapped(algo, device_->caps());
  enqueueDeviceCall(mapped ? DeviceShape::kMapped : DeviceShape::kStaged, a, &algo, 0, *this);
}

void Comm::runJob(StreamJob& job) {
  Comm& host = job.host != nullptr ? *job.host : *this;
  flight_->start(job.flight, host.checker_.calls() + 1, nullptr);  // beginCall's number
  host.runJobHost(job, *device_, deviceCalls_.jobs->gate());
  flight_->finish(job.flight, loomSuccess);
}

void Comm::runJobHost(StreamJob& job, Device& device, StreamGate& gate) {
  auto run = [&] {
    beginCall(job.args);
    deviceCalls_.executor.runHostLanes(
        job.schedule, job.bound, deviceEnv(device, job.args.stream, job.calls), gate, job.order);
  };
  if (&device == device_.get()) {
    startClock();  // each call's host part has the communicator's timeout from its start
    return run();
  }
  // The leaders' host communicator, on the parent's progress queue (its only user).
  beginOperation();
  failOnError(run);
}

}  // namespace loom
