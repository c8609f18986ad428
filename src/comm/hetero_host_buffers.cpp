// Host buffers on a device rank of a heterogeneous communicator.
//
// A rank whose device is a GPU may still hold some data in host memory (a torch rank's CPU
// tensors beside its CUDA tensors, in a group whose other ranks have no GPU). Its peers cannot
// know which kind of memory it passed, and every rank must run the same algorithm (the composed
// allreduce runs its cluster's native collectives), so the call runs unchanged on device scratch:
//   1. the host output region, then the input, copied to the scratch on the caller's stream
//      (the output first, so that what the call does not write comes back as it was);
//   2. the collective on the scratch, as any call with device buffers;
//   3. the output copied back; the call returns when it is in host memory.
// Sends and receives on host buffers go to the point-to-point engine as they are
// (Comm::beginStagedPointToPoint), non-blocking ones too (loomIsend/loomIrecv). A CUDA
// communicator's own host-memory calls (a plan registration's vote) take the same way.
#include <algorithm>

#include "base/coll_args.hpp"
#include "comm/comm.hpp"

namespace loom {

bool Comm::passesHostBuffers(const CollArgs& args) const {
  if (!composition_.hetero || !onDevice()) return false;
  const CallExtents extents = callExtents(args, rank_, nranks_);
  const bool sendHost = extents.sendBytes > 0 && heteroHostBuffer(args.send);
  const bool recvHost = extents.recvBytes > 0 && heteroHostBuffer(args.recv);
  // One buffer of each kind is the caller's mistake: checkBuffers names it.
  if (extents.sendBytes > 0 && extents.recvBytes > 0) return sendHost && recvHost;
  return sendHost || recvHost;
}

bool Comm::heteroHostBuffer(const void* buffer) const {
  return composition_.hetero && onDevice() && buffer != nullptr && !device_->isDeviceMemory(buffer);
}

bool Comm::hostBufferOfHetero(const DeviceP2POp& op) const {
  return op.bytes > 0 && heteroHostBuffer(op.buffer);
}

void Comm::collectiveThroughDevice(const CollArgs& args, const Algorithm* algo) {
  const CallExtents extents = callExtents(args, rank_, nranks_);
  const char* send = static_cast<const char*>(args.send);
  char* recv = static_cast<char*>(args.recv);
  // In place: the input inside the output (allreduce's send == recv, allgather's own slot).
  const bool inPlace = extents.sendBytes > 0 && extents.recvBytes > 0 && send >= recv &&
                       send + extents.sendBytes <= recv + extents.recvBytes;
  if (!deviceCalls_.hostCallScratch)
    deviceCalls_.hostCallScratch = std::make_unique<DeviceScratch>(*device_);
  const size_t sendScratch = inPlace ? 0 : extents.sendBytes;
  char* deviceRecv =
      deviceCalls_.hostCallScratch->get(std::max<size_t>(1, extents.recvBytes + sendScratch));
  char* deviceSend = inPlace ? deviceRecv + (send - recv) : deviceRecv + extents.recvBytes;

  CollArgs onDevice = args;
  onDevice.send = extents.sendBytes > 0 ? deviceSend : (send == recv ? deviceRecv : nullptr);
  onDevice.recv = extents.recvBytes > 0 ? deviceRecv : (send == recv ? deviceSend : nullptr);
  if (extents.recvBytes > 0)
    device_->copyAsync(deviceRecv, recv, extents.recvBytes, CopyKind::kHostToDevice, args.stream);
  if (sendScratch > 0)
    device_->copyAsync(deviceSend, send, sendScratch, CopyKind::kHostToDevice, args.stream);
  if (algo != nullptr)
    runCall(&onDevice, [&] { runAlgorithm(*algo, main_->ctx(), onDevice); });
  else
    collective(onDevice);
  if (extents.recvBytes > 0)
    device_->copyAsync(recv, deviceRecv, extents.recvBytes, CopyKind::kDeviceToHost, args.stream);
  device_->synchronize(args.stream);
  deviceCalls_.hostCallScratch->releaseRetired();  // the stream is done with what growing replaced
}

}  // namespace loom
