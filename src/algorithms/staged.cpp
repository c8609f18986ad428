#include "algorithms/staged.hpp"

namespace loom {

HostStaging::~HostStaging() {
  releaseRetired();
  if (send_.data != nullptr) device_.releaseHost(send_.data);
  if (recv_.data != nullptr) device_.releaseHost(recv_.data);
}

char* HostStaging::grow(Buffer& buffer, size_t bytes) {
  if (buffer.bytes < bytes) {
    char* bigger = static_cast<char*>(device_.allocateHost(bytes));
    if (buffer.data != nullptr) retired_.push_back(buffer.data);
    buffer = {bigger, bytes};
  }
  return buffer.data;
}

DeviceScratch::~DeviceScratch() {
  releaseRetired();
  if (data_ != nullptr) device_.release(data_);
}

char* DeviceScratch::get(size_t bytes) {
  if (bytes_ < bytes) {
    char* bigger = static_cast<char*>(device_.allocate(bytes));
    if (data_ != nullptr) retired_.push_back(data_);
    data_ = bigger;
    bytes_ = bytes;
  }
  return data_;
}

void DeviceScratch::releaseRetired() {
  for (char* old : retired_) device_.release(old);
  retired_.clear();
}

void HostStaging::releaseRetired() {
  for (char* old : retired_) device_.releaseHost(old);
  retired_.clear();
}

bool runsMapped(const Algorithm& algo, const DeviceCaps& caps) {
  return algo.dataThroughDevice && caps.mapsHostMemory && caps.reduces;
}

namespace {

constexpr uint16_t kStageOut = 2, kStageIn = 3;  // buildStaged's staging buffers

// An in-place call stays in place on the host: the input is staged where the output will be.
bool stagedInPlace(const CollArgs& args, const CallExtents& extents) {
  const char* send = static_cast<const char*>(args.send);
  char* recv = static_cast<char*>(args.recv);
  return send != nullptr && recv != nullptr && send >= recv &&
         send + extents.sendBytes <= recv + extents.recvBytes && extents.sendBytes > 0;
}

}  // namespace

void buildStaged(Schedule& s, const CollArgs& args, int rank, int nranks) {
  const CallExtents e = callExtents(args, rank, nranks);
  const bool inPlace = stagedInPlace(args, e);
  s.setExtents(e.sendBytes, e.recvBytes);
  const uint16_t out = s.addStaging("stage-out", e.recvBytes);
  const BufferRef in =
      inPlace ? s.scratch(out, static_cast<const char*>(args.send) - static_cast<char*>(args.recv))
              : s.scratch(e.sendBytes > 0 ? s.addStaging("stage-in", e.sendBytes) : out);
  // The host part waits until the input is on the host (or, without input, until the stream
  // reached the call); the stream's later work waits until the output is back (or, without
  // output, until the host part is done with the staging memory that the next call reuses).
  const uint32_t input = e.sendBytes > 0
                             ? s.deviceCopy(in, s.input(), e.sendBytes, CopyKind::kDeviceToHost)
                             : s.deviceMarker();
  const uint32_t host = s.call(0);
  s.after(host, input);
  const uint32_t output = e.recvBytes > 0 ? s.deviceCopy(s.output(), s.scratch(out), e.recvBytes,
                                                         CopyKind::kHostToDevice)
                                          : s.deviceMarker();
  s.after(output, host);
}

CollArgs stagedHostArgs(const Schedule& s, std::span<char* const> bound, const CollArgs& args) {
  CollArgs host = args;
  host.stream = nullptr;
  const CallExtents e{s.buffers()[Schedule::kInput].bytes, s.buffers()[Schedule::kOutput].bytes};
  if (args.recv != nullptr) host.recv = bound[kStageOut];
  if (stagedInPlace(args, e))
    host.send =
        bound[kStageOut] + (static_cast<const char*>(args.send) - static_cast<char*>(args.recv));
  else if (args.send != nullptr)
    host.send = s.buffers().size() > kStageIn ? bound[kStageIn] : bound[kStageOut];
  return host;
}

void buildMapped(Schedule& s) {
  // The algorithm writes the output with the device's own copies (its work stream), done when
  // the host call returns: the caller's later work waits for the call.
  const uint32_t input = s.deviceMarker();
  const uint32_t host = s.call(0);
  s.after(host, input);
  s.after(s.deviceMarker(), host);
}

}  // namespace loom
