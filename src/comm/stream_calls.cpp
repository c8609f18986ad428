// Collectives of a device rank in stream order (comm/stream_jobs.hpp): at call time the stream
// side of the call is enqueued on the caller's stream and a job handed to the communicator's
// progress thread; the job later runs the host side. Which halves:
//   heterogeneous allreduce / reduce / broadcast: pipelined staging in chunks (algorithms/chunked);
//   heterogeneous allreduce, reduce, broadcast, allgather, reduce-scatter, composed
//     (comm/hetero_composed.cpp): the phases inside a cluster are calls of the cluster's
//     communicator (its own kernels or its own jobs), the leaders' exchange a job of this
//     communicator whose host part runs on the leaders' host communicator (chunked, or for the
//     allgather's alltoallv gated), the allgather's reorder copies on the stream between them;
//   everything else: staged or mapped with one gate (algorithms/staged).
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

}  // namespace

void Comm::enqueueCollective(const Algorithm& algo, const CollArgs& args) {
  // The call's number and signature (the mismatch check) are taken when its host part runs, on
  // the progress thread, in issue order (runJob). A composed call is the sub-communicators'
  // (counted and fingerprinted there), as on the ranks that do not run in stream order.
  CollArgs a = args;
  if (a.accum < 0) a.accum = config_.accum;
  if (hetero_ && composes(a)) return executeComposed(a);
  if (checkMode_ >= 2) verifyFingerprint(args);
  LOOM_INFO(kSubsysColl, rank_, funcName(args.func), " count ", args.count, " ",
            dtypeName(args.dtype), " -> ", algo.name,
            hetero_ && elementwise(args.func) ? " (heterogeneous: in chunks)" : "",
            " (in stream order)");
  if (hetero_ && elementwise(a.func)) return enqueueChunked(a, *this, heteroChunkBytes_);
  enqueueGated(algo, a);
}

void Comm::releaseStagingIfIdle() {
  // Staging memory that grew stays allocated while calls in flight may use it (HostStaging).
  if (staging_->retiring() && jobs_->idle()) staging_->releaseRetired();
}

void Comm::enqueueChunked(const CollArgs& args, Comm& host, size_t chunkSetting) {
  const size_t elementBytes = dtypeSize(args.dtype), total = args.count * elementBytes;
  const size_t chunk = heteroChunkBytes(total, elementBytes, chunkSetting);
  releaseStagingIfIdle();
  char* staging = staging_->recv(total);
  StreamJob& job = jobs_->begin(args.stream);
  checkUsable();  // a full queue may have waited for a job that failed
  job.kind = StreamJob::Kind::kChunked;
  job.host = &host == this ? nullptr : &host;
  job.args = args;
  job.staging = staging;
  job.chunkBytes = chunk;
  for (size_t i = 0, n = chunkCount(total, chunk); i < n; ++i)
    job.inputs.push_back(jobs_->takeEvent());
  // Handed over first: the host part must run while the stream side is enqueued (a call of many
  // chunks can fill the device's launch queue behind its first gate; chunked.hpp).
  jobs_->submitEarly();
  try {
    enqueuePipelinedStaged(*device_, jobs_->gate(), staging, args, chunk, host.rank_,
                           job.inputs.data(), job.progress);
  } catch (...) {
    jobs_->abandon(job, args.stream);  // the failure aborts the communicator (the caller's)
    throw;
  }
  jobs_->enqueued(args.stream);
}

void Comm::enqueueGated(const Algorithm& algo, const CollArgs& args) {
  const bool mapped = sharedMemory_ && runsMapped(algo, device_->caps());
  releaseStagingIfIdle();
  StreamJob& job = jobs_->begin(args.stream);
  checkUsable();
  const CollArgs a = withOwnCounts(job, args, nranks_);
  job.kind = StreamJob::Kind::kGated;
  job.algo = &algo;
  job.mapped = mapped;
  try {
    job.inputs.push_back(jobs_->takeEvent());
    if (mapped) {
      enqueueMapped(*device_, jobs_->gate(), a, *job.inputs[0]);
      job.args = a;
    } else {
      job.args =
          enqueueStaged(*device_, jobs_->gate(), *staging_, a, rank_, nranks_, *job.inputs[0]);
    }
  } catch (...) {
    jobs_->abandon(job, args.stream);
    throw;
  }
  jobs_->submit(args.stream);
}

void Comm::runJob(StreamJob& job) {
  if (job.host != nullptr) return job.host->runLeaderJob(job, *device_, jobs_->gate());
  startClock();  // each call's host part has the communicator's timeout from its start
  beginCall(job.args);
  if (job.kind == StreamJob::Kind::kChunked) {
    auto select = [&](size_t chunkBytes) -> const Algorithm& {
      return selector_->select(job.args.func, chunkBytes);
    };
    runPipelinedHost(select, hostCtx_, *device_, jobs_->gate(), job.staging, job.args,
                     job.chunkBytes, job.inputs.data(), job.progress);
  } else {
    runGated(*job.algo, job.mapped ? ctx_ : hostCtx_, *device_, jobs_->gate(), job.args,
             *job.inputs[0]);
  }
}

void Comm::enqueueLeaderGated(const CollArgs& args, Comm& host) {
  // A job of this communicator whose host part is one host algorithm of the leaders' host
  // communicator (the composed allgather's alltoallv), staged through this rank's memory.
  const Algorithm& algo = host.selector_->select(args.func, args.count * dtypeSize(args.dtype));
  releaseStagingIfIdle();
  StreamJob& job = jobs_->begin(args.stream);
  checkUsable();
  const CollArgs a = withOwnCounts(job, args, host.nranks_);
  job.kind = StreamJob::Kind::kGated;
  job.host = &host;
  job.algo = &algo;
  job.mapped = false;
  try {
    job.inputs.push_back(jobs_->takeEvent());
    job.args = enqueueStaged(*device_, jobs_->gate(), *staging_, a, host.rank_, host.nranks_,
                             *job.inputs[0]);
  } catch (...) {
    jobs_->abandon(job, args.stream);
    throw;
  }
  jobs_->submit(args.stream);
}

void Comm::runLeaderJob(StreamJob& job, Device& device, StreamGate& gate) {
  // The leaders' host communicator, on the parent's progress thread (its only user).
  beginOperation();
  failOnError([&] {
    beginCall(job.args);
    if (job.kind == StreamJob::Kind::kGated) {
      runGated(*job.algo, hostCtx_, device, gate, job.args, *job.inputs[0]);
      return;
    }
    auto select = [&](size_t chunkBytes) -> const Algorithm& {
      return selector_->select(job.args.func, chunkBytes);
    };
    runPipelinedHost(select, hostCtx_, device, gate, job.staging, job.args, job.chunkBytes,
                     job.inputs.data(), job.progress);
  });
}

}  // namespace loom
