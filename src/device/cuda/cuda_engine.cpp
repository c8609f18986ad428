#include "device/cuda/cuda_engine.hpp"

#include <algorithm>
#include <chrono>

#include "base/dtype.hpp"
#include "base/env.hpp"
#include "base/log.hpp"
#include "device/cuda/cuda_check.hpp"

namespace loom {

namespace {

using cuda::ExchangeArgs;

constexpr auto kWatchInterval = std::chrono::milliseconds(1);

size_t slotBytesFromEnv() {
  int64_t bytes = env::cudaSlotBytes();
  LOOM_CHECK_ARG(bytes >= 4096, "LOOM_CUDA_SLOT_BYTES must be at least 4096, got ", bytes);
  return static_cast<size_t>(bytes) / 16 * 16;
}

ExchangeArgs emptyExchange() {
  ExchangeArgs a{};
  a.divisor = 1;
  return a;
}

}  // namespace

CudaEngine::CudaEngine(CudaDevice& device, const CudaEngineSetup& setup)
    : device_(device), setup_(setup) {
  LOOM_CHECK_ARG(setup_.nranks <= cuda::kMaxRanks, "a CUDA communicator holds at most ",
                 cuda::kMaxRanks, " ranks on one host, got ", setup_.nranks);
  int64_t blocks = env::cudaMaxBlocks();
  LOOM_CHECK_ARG(blocks >= 1 && blocks <= cuda::kMaxBlocks, "LOOM_CUDA_MAX_BLOCKS must be in [1, ",
                 cuda::kMaxBlocks, "], got ", blocks);
  maxBlocks_ = static_cast<int>(blocks);
  device_.makeCurrent();
  layout_.slotBytes = slotBytesFromEnv();
  layout_.nranks = setup_.nranks;

  PeerWindowsSetup windows;
  windows.rank = setup_.rank;
  windows.nranks = setup_.nranks;
  windows.windowBytes = layout_.totalBytes();
  windows.transport = cudaTransportFromEnv();
  windows.allGather = setup_.allGather;
  windows_.setUp(windows);

  const size_t counterWords = static_cast<size_t>(cuda::kChannels) * setup_.nranks;
  LOOM_CUDA_CHECK(cudaMalloc(&counters_, 2 * counterWords * sizeof(uint64_t)));
  LOOM_CUDA_CHECK(cudaMemset(counters_, 0, 2 * counterWords * sizeof(uint64_t)));
  LOOM_CUDA_CHECK(cudaMalloc(&barrierScratch_, 64));
  LOOM_CUDA_CHECK(cudaMemset(barrierScratch_, 0, 64));
  LOOM_CUDA_CHECK(cudaHostAlloc(&status_, sizeof(cuda::DevStatus), cudaHostAllocMapped));
  *status_ = cuda::DevStatus{};
  void* statusOnDevice = nullptr;
  LOOM_CUDA_CHECK(cudaHostGetDevicePointer(&statusOnDevice, status_, 0));
  LOOM_CUDA_CHECK(cudaEventCreateWithFlags(&streamSwitch_, cudaEventDisableTiming));
  LOOM_CUDA_CHECK(cudaDeviceSynchronize());

  dev_.rank = setup_.rank;
  dev_.nranks = setup_.nranks;
  dev_.slotBytes = layout_.slotBytes;
  dev_.llSlotBytes = layout_.llSlotBytes();
  dev_.timeoutNs = static_cast<uint64_t>(std::max<int64_t>(setup_.timeoutMs, 1)) * 1000000ull;
  for (int q = 0; q < setup_.nranks; ++q) {
    char* base = windows_.window(q);
    dev_.slots[q] = base + layout_.slotsOffset();
    dev_.llSlots[q] = base + layout_.llSlotsOffset();
    dev_.ready[q] = reinterpret_cast<uint64_t*>(base + layout_.readyOffset());
    dev_.acks[q] = reinterpret_cast<uint64_t*>(base + layout_.acksOffset());
  }
  dev_.sentSeq = counters_;
  dev_.recvSeq = counters_ + counterWords;
  dev_.status = static_cast<cuda::DevStatus*>(statusOnDevice);
  watchdog_ = std::thread([this] { watch(); });
  LOOM_INFO(kSubsysInit, setup_.rank, "CUDA device ", device_.index(), " (", device_.name(), ", ",
            device_.busId(), "): ", windows_.transportName(), " windows of ",
            layout_.totalBytes() >> 20, " MiB, slot ", layout_.slotBytes, " B");
}

CudaEngine::~CudaEngine() {
  {
    std::lock_guard<std::mutex> lock(watchMutex_);
    stopWatch_ = true;
  }
  watchWake_.notify_all();
  if (watchdog_.joinable()) watchdog_.join();
  // Kernels still in flight read the windows and counters: let them finish (or, on an aborted
  // communicator, give up) before anything is unmapped.
  cudaSetDevice(device_.index());
  cudaDeviceSynchronize();
  cudaGetLastError();
  if (streamSwitch_ != nullptr) cudaEventDestroy(streamSwitch_);
  if (counters_ != nullptr) cudaFree(counters_);
  if (barrierScratch_ != nullptr) cudaFree(barrierScratch_);
  if (status_ != nullptr) cudaFreeHost(status_);
}

void CudaEngine::stopKernels() {
  volatile cuda::DevStatus* status = status_;
  status->abort = 1;
}

void CudaEngine::watch() {
  bool reported = false;
  bool waitSeen = false;
  std::unique_lock<std::mutex> lock(watchMutex_);
  while (!stopWatch_) {
    watchWake_.wait_for(lock, kWatchInterval);
    if (stopWatch_) break;
    volatile cuda::DevStatus* status = status_;
    if (setup_.aborted != nullptr && setup_.aborted->load()) status->abort = 1;
    if (!reported && status->error != cuda::kDevOk) {
      reported = true;
      int peer = status->errorPeer;
      setup_.fail(Error(loomTimeout, "a GPU kernel waited more than " +
                                         std::to_string(setup_.timeoutMs / 1000.0) +
                                         " s for rank " + std::to_string(peer) +
                                         " (LOOM_TIMEOUT / config timeoutMs)"));
      continue;
    }
    if (reported || status->abort != 0) continue;
    // Only a peer that a kernel is waiting for matters (one that finished its part and exited is
    // no fault): kernels raise `waiting` again and again while a wait lasts, so the flag seen
    // set, cleared and set again means a wait is still going on.
    if (status->waiting == 0) {
      waitSeen = false;
      continue;
    }
    status->waiting = 0;
    if (!waitSeen) {
      waitSeen = true;
      continue;
    }
    std::optional<Error> failure = setup_.peerFailure();
    if (failure) {
      status->abort = 1;
      reported = true;
      setup_.fail(*failure);
    }
  }
}

int CudaEngine::blocksFor(size_t bytes, Protocol protocol) const {
  // LL: a block's 512 threads each carry 8 bytes per round. Simple: blocks are independent
  // pipelines, so spreading even a medium transfer over many of them keeps NVLink busy (one
  // block alone moves a few GB/s).
  const size_t perBlock = protocol == Protocol::kLL ? 8 * cuda::kThreads : 16 * 1024;
  size_t blocks = (bytes + perBlock - 1) / perBlock;
  return static_cast<int>(std::clamp<size_t>(blocks, 1, static_cast<size_t>(maxBlocks_)));
}

void CudaEngine::validateBuffer(const void* ptr, size_t bytes, const char* name) const {
  if (bytes == 0) return;
  // Buffers are reused call after call: remember the last pointers that passed. (Under unified
  // addressing a device address never becomes host memory, so a remembered one stays a device
  // pointer even if it was freed and allocated again.)
  const size_t slot = (reinterpret_cast<uintptr_t>(ptr) >> 8) % kValidatedCache;
  if (validated_[slot] == ptr) return;
  LOOM_CHECK_ARG(usableOnDevice(ptr, device_.index()), name, " is not memory of CUDA device ",
                 device_.index(),
                 " (a CUDA communicator takes device pointers, e.g. from cudaMalloc)");
  validated_[slot] = ptr;
}

void CudaEngine::validateBuffers(const CollArgs& a) const {
  const size_t n = static_cast<size_t>(setup_.nranks);
  const size_t bytes = a.count * dtypeSize(a.dtype);
  const bool isRoot = setup_.rank == a.root;
  switch (a.func) {
    case loomFuncAllReduce:
      validateBuffer(a.send, bytes, "sendbuff");
      validateBuffer(a.recv, bytes, "recvbuff");
      break;
    case loomFuncBroadcast:
      if (isRoot) validateBuffer(a.send, bytes, "sendbuff");
      validateBuffer(a.recv, bytes, "recvbuff");
      break;
    case loomFuncReduce:
      validateBuffer(a.send, bytes, "sendbuff");
      if (isRoot) validateBuffer(a.recv, bytes, "recvbuff");
      break;
    case loomFuncAllGather:
    case loomFuncGather:
      validateBuffer(a.send, bytes, "sendbuff");
      if (a.func == loomFuncAllGather || isRoot) validateBuffer(a.recv, bytes * n, "recvbuff");
      break;
    case loomFuncReduceScatter:
    case loomFuncScatter:
      if (a.func == loomFuncReduceScatter || isRoot) validateBuffer(a.send, bytes * n, "sendbuff");
      validateBuffer(a.recv, bytes, "recvbuff");
      break;
    case loomFuncAllToAll:
      validateBuffer(a.send, bytes * n, "sendbuff");
      validateBuffer(a.recv, bytes * n, "recvbuff");
      break;
    case loomFuncAllToAllv: {
      size_t sendTotal = 0, recvTotal = 0;
      for (size_t i = 0; i < n; ++i) {
        sendTotal += a.sendCounts[i];
        recvTotal += a.recvCounts[i];
      }
      validateBuffer(a.send, sendTotal, "sendbuff");
      validateBuffer(a.recv, recvTotal, "recvbuff");
      break;
    }
    default:
      break;
  }
}

cudaStream_t CudaEngine::orderStream(void* streamHandle) {
  cudaStream_t stream = static_cast<cudaStream_t>(streamHandle);
  // Collectives of one communicator run in issue order even across streams: a call on a new
  // stream waits for everything already issued on the previous one (as NCCL does).
  if (haveLastStream_ && stream != lastStream_) {
    cudaStreamCaptureStatus oldCapture = cudaStreamCaptureStatusNone, newCapture = oldCapture;
    LOOM_CUDA_CHECK(cudaStreamIsCapturing(lastStream_, &oldCapture));
    LOOM_CUDA_CHECK(cudaStreamIsCapturing(stream, &newCapture));
    if (oldCapture == cudaStreamCaptureStatusNone && newCapture == cudaStreamCaptureStatusNone) {
      LOOM_CUDA_CHECK(cudaEventRecord(streamSwitch_, lastStream_));
      LOOM_CUDA_CHECK(cudaStreamWaitEvent(stream, streamSwitch_, 0));
    }
  }
  lastStream_ = stream;
  haveLastStream_ = true;
  return stream;
}

void CudaEngine::launchExchange(const ExchangeArgs& args, bool reduce, const CollArgs& call,
                                Protocol protocol, cudaStream_t stream) {
  if (!reduce) {
    if (protocol == Protocol::kLL)
      cuda::launchLLCopy(dev_, args, stream);
    else
      cuda::launchSimpleCopy(dev_, args, stream);
    return;
  }
  cuda::ReduceKey key{call.dtype, kernelOp(call.op), resolveGpuAccum(call.dtype, call.accum)};
  if (protocol == Protocol::kLL)
    cuda::launchLLReduce(dev_, args, key, stream);
  else
    cuda::launchSimpleReduce(dev_, args, key, stream);
}

void CudaEngine::run(const CollArgs& call, Protocol protocol) {
  device_.makeCurrent();
  cudaStream_t stream = orderStream(call.stream);
  const int n = setup_.nranks, me = setup_.rank;
  const size_t es = dtypeSize(call.dtype);
  const size_t bytes = call.count * es;
  const char* send = static_cast<const char*>(call.send);
  char* recv = static_cast<char*>(call.recv);
  ExchangeArgs a = emptyExchange();
  a.divisor = averageDivisor(call.op, n);
  bool reduce = false;
  size_t largest = bytes;  // the transfer that sizes the grid
  auto toAll = [&](auto sendAt, auto recvAt, size_t each) {
    for (int p = 0; p < n; ++p) {
      if (p == me) continue;
      a.send[p] = sendAt(p);
      a.sendBytes[p] = each;
      a.recv[p] = recvAt(p);
      a.recvBytes[p] = each;
    }
  };
  switch (call.func) {
    case loomFuncAllReduce:
    case loomFuncBarrier: {
      if (call.func == loomFuncBarrier) {
        // A token allreduce: every rank hears from every other before anyone leaves.
        send = recv = barrierScratch_;
      }
      const size_t b = call.func == loomFuncBarrier ? sizeof(int32_t) : bytes;
      if (b == 0) return;
      if (n == 1) {
        if (send != recv)
          LOOM_CUDA_CHECK(cudaMemcpyAsync(recv, send, b, cudaMemcpyDeviceToDevice, stream));
        return;
      }
      if (protocol == Protocol::kSimple && call.func == loomFuncAllReduce) {
        cuda::TwoShotArgs t{send, recv, b, a.divisor, blocksFor(b / n, protocol)};
        cuda::ReduceKey key{call.dtype, kernelOp(call.op), resolveGpuAccum(call.dtype, call.accum)};
        cuda::launchTwoShot(dev_, t, key, stream);
        return;
      }
      toAll([&](int) { return send; }, [&](int) { return recv; }, b);
      a.selfSend = send;
      a.reduceOut = recv;
      a.reduceBytes = b;
      reduce = true;
      largest = b;
      if (call.func == loomFuncBarrier) {
        CollArgs token = call;
        token.dtype = loomInt32;
        token.op = loomSum;
        token.accum = -1;
        a.blocks = 1;
        launchExchange(a, true, token, Protocol::kLL, stream);
        return;
      }
      break;
    }
    case loomFuncBroadcast:
      if (me == call.root) {
        for (int p = 0; p < n; ++p)
          if (p != me) a.send[p] = send, a.sendBytes[p] = bytes;
        a.selfSend = send, a.selfRecv = recv, a.selfBytes = bytes;
      } else {
        a.recv[call.root] = recv, a.recvBytes[call.root] = bytes;
      }
      break;
    case loomFuncReduce:
      reduce = true;
      if (me == call.root) {
        for (int q = 0; q < n; ++q)
          if (q != me) a.recvBytes[q] = bytes;
        a.selfSend = send, a.reduceOut = recv, a.reduceBytes = bytes;
      } else {
        a.send[call.root] = send, a.sendBytes[call.root] = bytes;
      }
      break;
    case loomFuncAllGather:
      toAll([&](int) { return send; }, [&](int q) { return recv + q * bytes; }, bytes);
      a.selfSend = send, a.selfRecv = recv + me * bytes, a.selfBytes = bytes;
      break;
    case loomFuncReduceScatter:
      toAll([&](int p) { return send + p * bytes; }, [&](int) { return nullptr; }, bytes);
      a.selfSend = send + me * bytes, a.reduceOut = recv, a.reduceBytes = bytes;
      reduce = true;
      break;
    case loomFuncAllToAll:
      toAll([&](int p) { return send + p * bytes; }, [&](int q) { return recv + q * bytes; },
            bytes);
      a.selfSend = send + me * bytes, a.selfRecv = recv + me * bytes, a.selfBytes = bytes;
      break;
    case loomFuncAllToAllv:
      for (int p = 0; p < n; ++p) {
        if (p == me) continue;
        a.send[p] = send + call.sendDispls[p] * es, a.sendBytes[p] = call.sendCounts[p] * es;
        a.recv[p] = recv + call.recvDispls[p] * es, a.recvBytes[p] = call.recvCounts[p] * es;
      }
      a.selfSend = send + call.sendDispls[me] * es;
      a.selfRecv = recv + call.recvDispls[me] * es;
      a.selfBytes = std::min(call.sendCounts[me], call.recvCounts[me]) * es;
      // Peers do not know each other's counts: the grid cannot depend on them.
      largest = static_cast<size_t>(1) << 40;
      break;
    case loomFuncGather:
      if (me == call.root) {
        for (int q = 0; q < n; ++q)
          if (q != me) a.recv[q] = recv + q * bytes, a.recvBytes[q] = bytes;
        a.selfSend = send, a.selfRecv = recv + me * bytes, a.selfBytes = bytes;
      } else {
        a.send[call.root] = send, a.sendBytes[call.root] = bytes;
      }
      break;
    case loomFuncScatter:
      if (me == call.root) {
        for (int p = 0; p < n; ++p)
          if (p != me) a.send[p] = send + p * bytes, a.sendBytes[p] = bytes;
        a.selfSend = send + me * bytes, a.selfRecv = recv, a.selfBytes = bytes;
      } else {
        a.recv[call.root] = recv, a.recvBytes[call.root] = bytes;
      }
      break;
    default:
      LOOM_THROW(loomInternalError, "no GPU path for collective ", static_cast<int>(call.func));
  }
  if (call.func != loomFuncAllToAllv && bytes == 0) return;
  if (n == 1) {
    const char* from = a.selfSend;
    char* to = reduce ? a.reduceOut : a.selfRecv;
    size_t len = reduce ? a.reduceBytes : a.selfBytes;
    if (len > 0 && from != to)
      LOOM_CUDA_CHECK(cudaMemcpyAsync(to, from, len, cudaMemcpyDeviceToDevice, stream));
    return;
  }
  a.blocks = blocksFor(largest, protocol);
  launchExchange(a, reduce, call, protocol, stream);
}

void CudaEngine::pointToPoint(const std::vector<DeviceP2POp>& ops, void* streamHandle) {
  device_.makeCurrent();
  cudaStream_t stream = orderStream(streamHandle);
  const int n = setup_.nranks, me = setup_.rank;
  // Rounds of at most one send and one receive per peer, in issue order: the order in which two
  // ranks' operations on a pair match.
  // Reused from call to call: a send allocates nothing once warmed up.
  std::vector<char>& taken = p2pTaken_;
  taken.assign(ops.size(), 0);
  size_t done = 0;
  while (done < ops.size()) {
    ExchangeArgs a = emptyExchange();
    uint32_t sendUsed = 0, recvUsed = 0;  // peers with an op in this round (n <= kMaxRanks)
    const DeviceP2POp* selfSend = nullptr;
    const DeviceP2POp* selfRecv = nullptr;
    for (size_t i = 0; i < ops.size(); ++i) {
      if (taken[i]) continue;
      const DeviceP2POp& op = ops[i];
      uint32_t& used = op.isSend ? sendUsed : recvUsed;
      if ((used >> op.peer) & 1u) continue;
      used |= 1u << op.peer;
      taken[i] = 1;
      ++done;
      if (op.peer == me) {
        (op.isSend ? selfSend : selfRecv) = &op;
      } else if (op.isSend) {
        a.send[op.peer] = static_cast<const char*>(op.buffer), a.sendBytes[op.peer] = op.bytes;
      } else {
        a.recv[op.peer] = static_cast<char*>(op.buffer), a.recvBytes[op.peer] = op.bytes;
      }
    }
    LOOM_CHECK_ARG((selfSend == nullptr) == (selfRecv == nullptr),
                   "a send to this rank itself needs a matching receive in the same group");
    if (selfSend != nullptr && selfSend->buffer != selfRecv->buffer)
      LOOM_CUDA_CHECK(cudaMemcpyAsync(selfRecv->buffer, selfSend->buffer,
                                      std::min(selfSend->bytes, selfRecv->bytes),
                                      cudaMemcpyDeviceToDevice, stream));
    bool any = false;
    for (int p = 0; p < n; ++p) any |= p != me && (a.sendBytes[p] > 0 || a.recvBytes[p] > 0);
    if (!any) continue;
    a.blocks = cuda::kP2PChannels;
    a.channelBase = cuda::kMaxBlocks;
    cuda::launchSimpleCopy(dev_, a, stream);
  }
}

}  // namespace loom
