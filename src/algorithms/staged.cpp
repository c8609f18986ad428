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

// The call as the host algorithm runs it on the staging memory. An in-place call stays in place
// on the host: the input is staged where the output will be.
bool stagedInPlace(const CollArgs& args, const CallExtents& extents) {
  const char* send = static_cast<const char*>(args.send);
  char* recv = static_cast<char*>(args.recv);
  return send != nullptr && recv != nullptr && send >= recv &&
         send + extents.sendBytes <= recv + extents.recvBytes && extents.sendBytes > 0;
}

CollArgs stagedArgs(HostStaging& staging, const CollArgs& args, const CallExtents& extents) {
  CollArgs host = args;
  host.stream = nullptr;
  const char* send = static_cast<const char*>(args.send);
  char* recv = static_cast<char*>(args.recv);
  const bool inPlace = stagedInPlace(args, extents);
  char* recvStage = staging.recv(extents.recvBytes);
  if (args.recv != nullptr) host.recv = recvStage;
  if (inPlace) {
    host.send = recvStage + (send - recv);
  } else if (args.send != nullptr) {
    host.send = staging.send(extents.sendBytes);
  }
  return host;
}

}  // namespace

void runStaged(const Algorithm& algo, const AlgoContext& hostCtx, Device& device,
               HostStaging& staging, const CollArgs& args) {
  CallExtents extents = callExtents(args, hostCtx.rank, hostCtx.nranks);
  CollArgs host = stagedArgs(staging, args, extents);
  staging.releaseRetired();  // blocking calls: nothing in flight uses old staging memory
  if (extents.sendBytes > 0)
    device.copyAsync(const_cast<void*>(host.send), args.send, extents.sendBytes,
                     CopyKind::kDeviceToHost, args.stream);
  device.synchronize(args.stream);
  runAlgorithm(algo, hostCtx,
               host);  // nothing in flight while it runs: a failure here leaves no copy
  if (extents.recvBytes > 0)
    device.copyAsync(args.recv, host.recv, extents.recvBytes, CopyKind::kHostToDevice, args.stream);
  // The staging buffers are reused by the next call: the copy must be done with them.
  device.synchronize(args.stream);
}

void runMapped(const Algorithm& algo, const AlgoContext& ctx, const CollArgs& args) {
  ctx.device->synchronize(args.stream);  // the input is complete
  runAlgorithm(algo, ctx, args);         // every copy and reduction done when it returns
}

CollArgs enqueueStaged(Device& device, StreamGate& gate, HostStaging& staging, const CollArgs& args,
                       int rank, int nranks, DeviceEvent& input) {
  CallExtents extents = callExtents(args, rank, nranks);
  CollArgs host = stagedArgs(staging, args, extents);
  if (extents.sendBytes > 0)
    device.copyAsync(const_cast<void*>(host.send), args.send, extents.sendBytes,
                     CopyKind::kDeviceToHost, args.stream);
  device.recordEvent(input, args.stream);
  device.enqueueHostTask(gate, args.stream);
  if (extents.recvBytes > 0)
    device.copyAsync(args.recv, host.recv, extents.recvBytes, CopyKind::kHostToDevice, args.stream);
  return host;
}

void enqueueMapped(Device& device, StreamGate& gate, const CollArgs& args, DeviceEvent& input) {
  device.recordEvent(input, args.stream);
  // The algorithm writes the output with the device's own copies (its work stream): the caller's
  // later work waits for them behind the gate.
  device.enqueueHostTask(gate, args.stream);
}

void runGated(const Algorithm& algo, const AlgoContext& ctx, Device& device, StreamGate& gate,
              const CollArgs& args, DeviceEvent& input) {
  ctx.wait([&] { return device.eventDone(input); }, -1);  // the input is complete
  runAlgorithm(algo, ctx, args);  // every copy and reduction done when it returns
  gate.release();
}

}  // namespace loom
