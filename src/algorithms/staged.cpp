#include "algorithms/staged.hpp"

namespace loom {

HostStaging::~HostStaging() {
  if (send_.data != nullptr) device_.releaseHost(send_.data);
  if (recv_.data != nullptr) device_.releaseHost(recv_.data);
}

char* HostStaging::grow(Buffer& buffer, size_t bytes) {
  if (buffer.bytes < bytes) {
    char* bigger = static_cast<char*>(device_.allocateHost(bytes));
    if (buffer.data != nullptr) device_.releaseHost(buffer.data);
    buffer = {bigger, bytes};
  }
  return buffer.data;
}

DeviceScratch::~DeviceScratch() {
  if (data_ != nullptr) device_.release(data_);
}

char* DeviceScratch::get(size_t bytes) {
  if (bytes_ < bytes) {
    char* bigger = static_cast<char*>(device_.allocate(bytes));
    if (data_ != nullptr) device_.release(data_);
    data_ = bigger;
    bytes_ = bytes;
  }
  return data_;
}

bool runsMapped(const Algorithm& algo, const DeviceCaps& caps) {
  return algo.dataThroughDevice && caps.mapsHostMemory && caps.reduces;
}

void runStaged(const Algorithm& algo, const AlgoContext& hostCtx, Device& device,
               HostStaging& staging, const CollArgs& args) {
  CallExtents extents = callExtents(args, hostCtx.rank, hostCtx.nranks);
  CollArgs host = args;
  host.stream = nullptr;
  // An in-place call stays in place on the host: the input is staged where the output will be.
  const char* send = static_cast<const char*>(args.send);
  char* recv = static_cast<char*>(args.recv);
  const bool inPlace = send != nullptr && recv != nullptr && send >= recv &&
                       send + extents.sendBytes <= recv + extents.recvBytes &&
                       extents.sendBytes > 0;
  char* recvStage = staging.recv(extents.recvBytes);
  if (args.recv != nullptr) host.recv = recvStage;
  if (inPlace) {
    host.send = recvStage + (send - recv);
  } else if (args.send != nullptr) {
    host.send = staging.send(extents.sendBytes);
  }
  if (extents.sendBytes > 0)
    device.copyAsync(const_cast<void*>(host.send), args.send, extents.sendBytes,
                     CopyKind::kDeviceToHost, args.stream);
  device.synchronize(args.stream);
  algo.run(hostCtx, host);  // nothing in flight while it runs: a failure here leaves no copy
  if (extents.recvBytes > 0)
    device.copyAsync(args.recv, host.recv, extents.recvBytes, CopyKind::kHostToDevice, args.stream);
  // The staging buffers are reused by the next call: the copy must be done with them.
  device.synchronize(args.stream);
}

void runMapped(const Algorithm& algo, const AlgoContext& ctx, const CollArgs& args) {
  ctx.device->synchronize(args.stream);  // the input is complete
  algo.run(ctx, args);                   // every copy and reduction done when it returns
}

}  // namespace loom
