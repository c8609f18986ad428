#include "comm/trace.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <ctime>

#include "base/dtype.hpp"
#include "base/fd_writer.hpp"
#include "base/log.hpp"
#include "base/wait.hpp"

namespace loom {

namespace {

constexpr size_t kBatch = 4096;  // events formatted into the file at once
constexpr int kTrackCalls = 1, kTrackPointToPoint = 2, kTrackWaits = 3, kTrackDevice = 4;
constexpr int kTrackSendTo = 100000, kTrackRecvFrom = 200000, kTrackLocal = 300000,
              kTrackDeviceLane = 400000;

const char* funcText(uint8_t func) {
  static const char* const names[] = {"allreduce",     "broadcast", "reduce",    "allgather",
                                      "reducescatter", "alltoall",  "alltoallv", "gather",
                                      "scatter",       "sendrecv",  "barrier"};
  return func < sizeof(names) / sizeof(names[0]) ? names[func] : "unknown";
}

void writeTrackName(FdWriter& out, int pid, int track) {
  out.raw("{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":").integer(pid);
  out.raw(",\"tid\":").integer(track).raw(",\"args\":{\"name\":");
  char text[48];
  if (track == kTrackCalls) {
    out.string("collectives");
  } else if (track == kTrackPointToPoint) {
    out.string("point-to-point");
  } else if (track == kTrackWaits) {
    out.string("waits");
  } else if (track == kTrackDevice) {
    out.string("device");
  } else if (track >= kTrackDeviceLane) {
    out.string("device lane");
  } else {
    const char* what = track >= kTrackLocal      ? "local "
                       : track >= kTrackRecvFrom ? "recv from "
                                                 : "send to ";
    const int n = track % 100000;
    std::snprintf(text, sizeof(text), "%s%d", what, n);
    out.string(text);
  }
  out.raw("}},\n{\"name\":\"thread_sort_index\",\"ph\":\"M\",\"pid\":").integer(pid);
  out.raw(",\"tid\":").integer(track).raw(",\"args\":{\"sort_index\":").integer(track);
  out.raw("}},\n");
}

}  // namespace

std::unique_ptr<Trace> Trace::open(const std::string& dir, const FlightIdentity& identity,
                                   int64_t waitThresholdNs) {
  ::mkdir(dir.c_str(), 0755);  // one level; an existing directory is fine
  const std::string path = dir + "/loom-trace-" + identity.job + "-r" +
                           std::to_string(identity.rank) + "-p" + std::to_string(identity.pid) +
                           ".json";
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) {
    LOOM_WARN(kSubsysInit, identity.rank, "LOOM_TRACE: cannot write ", path, ": ",
              std::strerror(errno), "; this communicator is not traced");
    return nullptr;
  }
  return std::unique_ptr<Trace>(new Trace(fd, path, identity, waitThresholdNs));
}

Trace::Trace(int fd, std::string path, const FlightIdentity& identity, int64_t waitThresholdNs)
    : fd_(fd), path_(std::move(path)), identity_(identity), waitThresholdNs_(waitThresholdNs) {
  events_.reserve(kBatch);
  writeHeader();
}

Trace::~Trace() {
  std::lock_guard<std::mutex> lock(mutex_);
  writeLocked();
  FdWriter out(fd_);
  // The last element needs no comma after it; the array is closed for strict JSON readers.
  out.raw("{\"name\":\"loom_trace_end\",\"ph\":\"i\",\"s\":\"p\",\"pid\":").integer(identity_.pid);
  out.raw(",\"tid\":1,\"ts\":").micros(static_cast<int64_t>(steadyNowNs())).raw("}\n]\n");
  out.flush();
  ::close(fd_);
}

void Trace::writeHeader() {
  timespec real{};
  clock_gettime(CLOCK_REALTIME, &real);
  const int64_t offset = (static_cast<int64_t>(real.tv_sec) * 1000000000 + real.tv_nsec) -
                         static_cast<int64_t>(steadyNowNs());
  FdWriter out(fd_);
  const int pid = identity_.pid;
  out.raw("[\n{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":").integer(pid);
  std::string name = "rank " + std::to_string(identity_.rank) + " of " +
                     std::to_string(identity_.nranks) + " (" + identity_.host + ":" +
                     std::to_string(pid) + ")";
  if (!identity_.name.empty()) name += " " + identity_.name;
  out.raw(",\"args\":{\"name\":").string(name.c_str());
  // Read by scripts/loom_trace_merge.py; viewers ignore extra arguments.
  out.raw(",\"loom_job\":").string(identity_.job.c_str());
  out.raw(",\"loom_comm\":").string(identity_.name.c_str());
  out.raw(",\"loom_rank\":").integer(identity_.rank);
  out.raw(",\"loom_nranks\":").integer(identity_.nranks);
  out.raw(",\"loom_host\":").string(identity_.host.c_str());
  out.raw(",\"loom_realtime_offset_ns\":").integer(offset);
  out.raw("}},\n{\"name\":\"process_sort_index\",\"ph\":\"M\",\"pid\":").integer(pid);
  out.raw(",\"args\":{\"sort_index\":").integer(identity_.rank).raw("}},\n");
  out.flush();
}

void Trace::add(const Event& event) {
  std::lock_guard<std::mutex> lock(mutex_);
  events_.push_back(event);
  if (events_.size() >= kBatch) writeLocked();
}

void Trace::flush() {
  std::lock_guard<std::mutex> lock(mutex_);
  writeLocked();
}

void Trace::call(const FlightCall& c) {
  Event e;
  e.kind = Kind::kCall;
  e.startNs = c.startedNs != 0 ? c.startedNs : c.queuedNs;
  e.endNs = c.endedNs;
  e.seq = c.seq;
  e.count = c.count;
  e.bytes = c.bytes;
  e.tag = c.tag;
  e.algorithm = c.algorithm;
  e.peer = c.peer;
  e.result = c.result;
  e.func = static_cast<uint8_t>(c.func);
  e.dtype = static_cast<uint8_t>(c.dtype);
  e.op = static_cast<uint8_t>(c.op);
  e.flightKind = static_cast<uint8_t>(c.kind);
  e.track = c.kind == FlightKind::kCollective ? kTrackCalls : kTrackPointToPoint;
  add(e);
}

int Trace::trackOf(const ScheduleLane& lane) {
  switch (lane.kind) {
    case LaneKind::kSendTo:
      return kTrackSendTo + lane.peer;
    case LaneKind::kRecvFrom:
      return kTrackRecvFrom + lane.peer;
    case LaneKind::kLocal:
      return kTrackLocal + std::max(lane.peer, 0);
    case LaneKind::kDevice:
      return kTrackDeviceLane;
  }
  return kTrackLocal;
}

void Trace::operation(const ScheduleOp& op, const ScheduleLane& lane, int64_t startNs,
                      int64_t endNs) {
  Event e;
  e.kind = Kind::kOperation;
  e.startNs = startNs;
  e.endNs = endNs;
  e.name = opKindName(op.kind);
  e.bytes = op.bytes;
  e.peer = op.peer;
  e.track = trackOf(lane);
  add(e);
}

void Trace::waited(int64_t startNs, int64_t endNs, int peer) {
  Event e;
  e.kind = Kind::kWait;
  e.startNs = startNs;
  e.endNs = endNs;
  e.name = "wait";
  e.peer = peer;
  e.track = kTrackWaits;
  add(e);
}

void Trace::deviceSpan(const char* name, uint64_t call, int64_t startNs, int64_t endNs) {
  Event e;
  e.kind = Kind::kDevice;
  e.startNs = startNs;
  e.endNs = endNs;
  e.name = name;
  e.seq = call;
  e.track = kTrackDevice;
  add(e);
}

void Trace::writeLocked() {
  if (events_.empty()) return;
  FdWriter out(fd_);
  const int pid = identity_.pid;
  for (const Event& e : events_) {
    if (std::find(namedTracks_.begin(), namedTracks_.end(), e.track) == namedTracks_.end()) {
      namedTracks_.push_back(e.track);
      writeTrackName(out, pid, e.track);
    }
    const bool call = e.kind == Kind::kCall;
    const bool collective = call && e.flightKind == static_cast<uint8_t>(FlightKind::kCollective);
    const char* name = e.name;
    if (call)
      name = collective ? funcText(e.func) : flightKindName(static_cast<FlightKind>(e.flightKind));
    out.raw("{\"name\":").string(name);
    out.raw(",\"cat\":")
        .string(call                         ? "call"
                : e.kind == Kind::kOperation ? "lane"
                : e.kind == Kind::kWait      ? "wait"
                                             : "device");
    out.raw(",\"ph\":\"X\",\"pid\":").integer(pid).raw(",\"tid\":").integer(e.track);
    out.raw(",\"ts\":")
        .micros(e.startNs)
        .raw(",\"dur\":")
        .micros(std::max<int64_t>(e.endNs - e.startNs, 0));
    out.raw(",\"args\":{");
    bool first = true;
    if (call) {
      out.key("seq", first).uint(e.seq);
      out.key("bytes", first).uint(e.bytes);
      out.key("count", first).uint(e.count);
      out.key("dtype", first).string(dtypeName(static_cast<loomDataType_t>(e.dtype)));
      if (collective && (e.func == loomFuncAllReduce || e.func == loomFuncReduce ||
                         e.func == loomFuncReduceScatter))
        out.key("redop", first).string(opName(static_cast<loomRedOp_t>(e.op)));
      if (e.algorithm != nullptr) out.key("algorithm", first).string(e.algorithm);
      if (!collective) out.key("peer", first).integer(e.peer).key("tag", first).integer(e.tag);
      out.key("comm", first).string(identity_.name.c_str());
      out.key("job", first).string(identity_.job.c_str());
      out.key("result", first).string(loomGetErrorString(static_cast<loomResult_t>(e.result)));
    } else if (e.kind == Kind::kOperation) {
      out.key("bytes", first).uint(e.bytes);
      if (e.peer >= 0) out.key("peer", first).integer(e.peer);
    } else if (e.kind == Kind::kWait) {
      out.key("peer", first).integer(e.peer);
    } else {
      out.key("call", first).uint(e.seq);
    }
    out.raw("}},\n");
  }
  out.flush();
  events_.clear();
}

}  // namespace loom
