#include "device/cuda/cuda_engine.hpp"

#include <algorithm>
#include <chrono>
#include <new>
#include <sstream>

#include "base/dtype.hpp"
#include "base/env.hpp"
#include "base/log.hpp"
#include "base/shm_segment.hpp"
#include "device/cuda/collectives/plan_kernel.hpp"
#include "device/cuda/collectives/plans.hpp"
#include "device/cuda/cuda_check.hpp"
#include "device/cuda/cuda_env.hpp"

namespace loom {

namespace {

using cuda::ExchangeArgs;

// The largest call (bytes as the C API counts them: per rank for allgather, reduce-scatter,
// alltoall, gather and scatter) that runs on LL packets. LL sends twice the bytes but saves the
// flag round trip of every chunk. Crossovers measured on 4 H200s over NVLink, fp32
// (docs/benchmarks.md): allreduce LL 25 us vs simple 30 us at 512 KiB, 45 vs 31 at 1 MiB;
// allgather LL 21 vs simple 24 us at 256 KiB per rank; reduce-scatter LL 14 vs 18 us at 128 KiB.
size_t defaultLLMax(loomFunc_t func) {
  switch (func) {
    case loomFuncAllReduce:
      return 512 * 1024;
    case loomFuncAllGather:
      return 256 * 1024;
    case loomFuncReduceScatter:
    case loomFuncBroadcast:
    case loomFuncReduce:
      return 128 * 1024;
    default:
      return 64 * 1024;  // alltoall, gather, scatter: not measured yet
  }
}

constexpr loomFunc_t kExchangeFuncs[] = {loomFuncAllReduce, loomFuncBroadcast,     loomFuncReduce,
                                         loomFuncAllGather, loomFuncReduceScatter, loomFuncAllToAll,
                                         loomFuncAllToAllv, loomFuncGather,        loomFuncScatter};

constexpr auto kWatchInterval = std::chrono::milliseconds(1);

size_t slotBytesFromEnv() {
  int64_t bytes = env::cudaSlotBytes();
  LOOM_CHECK_ARG(bytes >= 4096, "LOOM_CUDA_SLOT_BYTES must be at least 4096, got ", bytes);
  return static_cast<size_t>(bytes) / 16 * 16;
}

}  // namespace

CudaEngine::CudaEngine(CudaDevice& device, const NativeSetup& setup)
    : device_(device), setup_(setup) {
  listAlgorithms();
  LOOM_CHECK_ARG(setup_.nranks <= cuda::kMaxRanks, "a CUDA communicator holds at most ",
                 cuda::kMaxRanks, " ranks on one host, got ", setup_.nranks);
  int64_t blocks = env::cudaMaxBlocks();
  LOOM_CHECK_ARG(blocks >= 1 && blocks <= cuda::kMaxBlocks, "LOOM_CUDA_MAX_BLOCKS must be in [1, ",
                 cuda::kMaxBlocks, "], got ", blocks);
  maxBlocks_ = static_cast<int>(blocks);
  // This rank's device for everything below; the caller's own is back when init returns.
  DeviceScope scope(device_.ordinal());
  fitSharedGpus();
  layout_.slotBytes = slotBytesFromEnv();
  layout_.nranks = setup_.nranks;
  setUpPeerWindows();
  const size_t counterWords = static_cast<size_t>(cuda::kChannels) * setup_.nranks;
  allocateDeviceState(counterWords);
  readWindowOptions();
  setUpBufferSharing();
  probeCopyEngines();
  fillDevComm(counterWords);
  watchdog_ = std::thread([this] { watch(); });
  const DeviceIdentity& id = device_.identity();
  LOOM_INFO(kSubsysInit, setup_.rank, "CUDA device ", id.index, " (", id.model, ", ", id.busId,
            "): ", describe());
#ifdef LOOM_CUDA_CHECK_ONLY
  LOOM_WARN(kSubsysInit, setup_.rank,
            "this library's CUDA kernels were compiled unoptimized, only to check that they build "
            "(LOOM_CUDA_CHECK_ONLY=ON, as make test does without a GPU): rebuild without it "
            "for speed");
#endif
}

void CudaEngine::listAlgorithms() {
  for (loomFunc_t func : kExchangeFuncs) {
    algorithms_.push_back({func, "ll"});
    protocols_.push_back(Protocol::kLL);
    algorithms_.push_back({func, "simple"});
    protocols_.push_back(Protocol::kSimple);
  }
  for (loomFunc_t func : {loomFuncAllGather, loomFuncAllToAll}) {
    algorithms_.push_back({func, "ce"});
    protocols_.push_back(Protocol::kCopyEngine);
  }
  algorithms_.push_back({loomFuncBarrier, "ll"});
  protocols_.push_back(Protocol::kLL);
}

void CudaEngine::setUpPeerWindows() {
  PeerWindowsSetup windows;
  windows.rank = setup_.rank;
  windows.nranks = setup_.nranks;
  windows.device = device_.ordinal();
  windows.process = setup_.process;
  windows.windowBytes = layout_.totalBytes();
  windows.transport = cudaTransportFromEnv();
  windows.allGather = setup_.allGather;
  windows_.setUp(windows);
}

void CudaEngine::allocateDeviceState(size_t counterWords) {
  const size_t counterBytes = (2 * counterWords + cuda::kMaxBlocks) * sizeof(uint64_t);
  LOOM_CUDA_CHECK(cudaMalloc(&counters_, counterBytes));
  LOOM_CUDA_CHECK(cudaMemset(counters_, 0, counterBytes));
  LOOM_CUDA_CHECK(cudaMalloc(&barrierScratch_, 64));
  LOOM_CUDA_CHECK(cudaMemset(barrierScratch_, 0, 64));
  // Loom's own memory, registered: the watchdog may read it after cudaDeviceReset took the
  // context (cudaHostAlloc's memory would go with it).
  statusMemory_ = MappedHostMemory(sizeof(cuda::DevStatus));
  status_ = new (statusMemory_.host()) cuda::DevStatus{};
  LOOM_CUDA_CHECK(cudaEventCreateWithFlags(&lastEnd_, cudaEventDisableTiming));
  LOOM_CUDA_CHECK(cudaEventCreateWithFlags(&ceDone_, cudaEventDisableTiming));
  LOOM_CUDA_CHECK(cudaStreamCreateWithFlags(&rescueStream_, cudaStreamNonBlocking));
  LOOM_CUDA_CHECK(cudaDeviceSynchronize());
}

void CudaEngine::readWindowOptions() {
  windowsEnabled_ = env::cudaWindows();
  const int64_t windowMin = env::cudaWindowMinBytes();
  LOOM_CHECK_ARG(windowMin >= 0, "LOOM_CUDA_WINDOW_MIN_BYTES must not be negative, got ",
                 windowMin);
  windowMinBytes_ = static_cast<size_t>(windowMin);
  const int64_t oneShotMax = env::cudaOneShotMaxBytes();
  oneShotMaxBytes_ = oneShotMax < 0 ? SIZE_MAX : static_cast<size_t>(oneShotMax);
  planLLMaxBytes_ = static_cast<uint64_t>(env::cudaPlanLLMaxBytes());
  planSliceBytes_ = static_cast<uint64_t>(env::cudaPlanSliceBytes());
  planPartGroups_ = static_cast<int>(env::cudaPlanPartGroups());
}

void CudaEngine::setUpBufferSharing() {
  // Where each rank serves the descriptors of its cuMem buffers: one name prefix for all.
  const std::string servers =
      setup_.allGather(setup_.rank == 0 ? ShmSegment::uniqueName("loom-mem-") : "")[0];
  bool peersInProcess = !setup_.process.empty();
  for (int q : setup_.process) peersInProcess &= q == setup_.process[setup_.rank];
  exports_ = std::make_unique<MemoryExports>(driver_, device_.ordinal(), setup_.rank, servers,
                                             peersInProcess);
  imports_ = std::make_unique<IpcImports>(driver_, device_.ordinal(), servers);
  userWindows_ = std::make_unique<UserWindows>(*exports_, *imports_, setup_.rank, setup_.nranks,
                                               setup_.process, setup_.allGather);
  registrations_ =
      std::make_unique<LocalRegistrations>(*exports_, *imports_, device_.ordinal(), setup_.rank,
                                           setup_.nranks, setup_.process, setup_.allGather);
}

void CudaEngine::probeCopyEngines() {
  // The same answer on every rank: one rank without stream memory operations turns the copy
  // engines off for all (their calls then run the zero-copy kernels).
  bool memOps = !windows_.viaHost() && driver_.streamMemOps(device_.ordinal());
  if (memOps) {
    // The copy engines' handshake writes into peers' windows from the stream: try it once (the
    // words are zero and stay zero; no copy-engine call starts before the exchange below).
    try {
      for (int q = 0; q < setup_.nranks; ++q)
        if (q != setup_.rank) driver_.writeValue(rescueStream_, ceFlag(q, 0, setup_.rank), 0);
      memOps = cudaStreamSynchronize(rescueStream_) == cudaSuccess;
    } catch (const Error& e) {
      LOOM_INFO(kSubsysInit, setup_.rank, "no copy-engine collectives: ", e.what());
      memOps = false;
    }
    cudaGetLastError();
  }
  ceUsable_ = true;
  for (const std::string& v : setup_.allGather(memOps ? "1" : "0")) ceUsable_ &= v == "1";
}

void CudaEngine::fillDevComm(size_t counterWords) {
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
    dev_.sync[q] = reinterpret_cast<cuda::SyncFlag*>(base + layout_.syncOffset());
  }
  dev_.sentSeq = counters_;
  dev_.recvSeq = counters_ + counterWords;
  dev_.syncSeq = counters_ + 2 * counterWords;
  dev_.status = static_cast<cuda::DevStatus*>(statusMemory_.device());
  dev_.imports = registrations_->deviceTable();
}

CudaEngine::~CudaEngine() {
  {
    std::lock_guard<std::mutex> lock(watchMutex_);
    stopWatch_ = true;
  }
  watchWake_.notify_all();
  if (watchdog_.joinable()) watchdog_.join();
  if (contextLost_.load() || !device_.contextAlive(true)) {
    // cudaDeviceReset took the windows, counters, events and mappings with the context: nothing
    // is freed through CUDA (a stale pointer may name memory of a new context), only Loom's own
    // host memory and threads go.
    LOOM_INFO(kSubsysInit, setup_.rank, "CUDA context of device ", device_.ordinal(),
              " is gone (cudaDeviceReset?): its resources are not freed through CUDA");
    timer_.abandon();
    for (auto& plan : plans_) plan->abandon();
    exports_->abandon();
    imports_->abandon();
    registrations_->abandonContext();
    windows_.abandon();
    statusMemory_.forgetRegistration();
    userWindows_.reset();
    registrations_.reset();
    imports_.reset();
    exports_.reset();
    return;
  }
  // Kernels still in flight read the windows and counters: let them finish (or, on an aborted
  // communicator, give up) before anything is unmapped.
  DeviceScope scope(device_.ordinal());
  cudaDeviceSynchronize();
  cudaGetLastError();
  plans_.clear();
  userWindows_.reset();
  registrations_.reset();
  imports_.reset();
  exports_.reset();
  if (lastEnd_ != nullptr) cudaEventDestroy(lastEnd_);
  if (ceDone_ != nullptr) cudaEventDestroy(ceDone_);
  if (rescueStream_ != nullptr) cudaStreamDestroy(rescueStream_);
  if (counters_ != nullptr) cudaFree(counters_);
  if (barrierScratch_ != nullptr) cudaFree(barrierScratch_);
}

void CudaEngine::fitSharedGpus() {
  // Ranks that share a GPU (same PCI bus id) run kernels that wait on each other: under MPS they
  // must all be resident at once, so each rank's grid gets at most its share of the GPU's SMs
  // (a block always fits on an SM, so as many blocks as SMs are resident together). The cap is
  // the same on every rank: a kernel's grid must match its peers'. Without MPS the GPU
  // time-slices between processes, which is slow (milliseconds a call) but cannot deadlock.
  // The plan kernel's blocks wait for each other even on a GPU of its own: its grid is capped by
  // what the GPU (or a rank's share of it) holds at once, also on small GPUs and MIG slices.
  const DeviceIdentity& me = device_.identity();
  // The settings that shape every call's kernels travel along: a rank launching other grids,
  // slots or protocols than its peers would hang or corrupt, so a difference fails every rank of
  // this group (a heterogeneous communicator's other ranks then see its CUDA ranks fail).
  const std::string settings = env::cudaSharedSettings();
  std::vector<std::string> all =
      setup_.allGather(me.busId + " " + std::to_string(device_.multiprocessors()) + " " +
                       std::to_string(cuda::planBlocksPerMultiprocessor()) + " " + settings);
  std::vector<std::string> bus(all.size()), theirs(all.size());
  std::vector<int> sms(all.size()), planPerSm(all.size());
  for (size_t r = 0; r < all.size(); ++r) {
    std::istringstream in(all[r]);
    in >> bus[r] >> sms[r] >> planPerSm[r] >> theirs[r];
    if (theirs[r] != settings)
      LOOM_THROW(
          loomInvalidArgument, "CUDA settings differ between ranks: ",
          env::settingsDifference(settings, setup_.rank, theirs[r], static_cast<int>(r), ','),
          " (ranks of this group; they shape every call's kernels: set them the same on "
          "every rank)");
  }
  int cap = cuda::kMaxBlocks, planCap = cuda::kMaxBlocks, mostSharing = 1;
  for (size_t r = 0; r < all.size(); ++r) {
    const int sharing = static_cast<int>(std::count(bus.begin(), bus.end(), bus[r]));
    mostSharing = std::max(mostSharing, sharing);
    if (sharing > 1) cap = std::min(cap, sms[r] / sharing);
    planCap = std::min(planCap, sms[r] * planPerSm[r] / sharing);
  }
  if (cap < 1)
    LOOM_THROW(loomInvalidUsage, mostSharing, " ranks share one GPU, more than its ",
               *std::min_element(sms.begin(), sms.end()),
               " multiprocessors: Loom's kernels of all of them could not be resident at once");
  maxBlocks_ = std::min(maxBlocks_, cap);
  p2pBlocks_ = std::min(cuda::kP2PChannels, cap);
  planMaxBlocks_ = std::min(maxBlocks_, planCap);
  const int sharers = static_cast<int>(std::count(bus.begin(), bus.end(), me.busId));
  if (sharers > 1)
    LOOM_INFO(kSubsysInit, setup_.rank, sharers, " ranks of this communicator share GPU ", me.busId,
              " (", device_.multiprocessors(), " SMs): kernels of at most ", maxBlocks_,
              " blocks per rank so that all of them fit at once (fastest under CUDA MPS)");
}

std::vector<NativeSelectorRow> CudaEngine::selectorRows() const {
  const int64_t llMax = env::cudaLLMaxBytes();
  const int64_t ceMin = env::cudaCopyEngineMinBytes();
  auto llRowMax = [&](loomFunc_t func) {
    return llMax >= 0 ? static_cast<size_t>(llMax) : defaultLLMax(func);
  };
  std::vector<NativeSelectorRow> rows;
  for (size_t i = 0; i < algorithms_.size(); ++i) {
    const loomFunc_t func = algorithms_[i].func;
    const int index = static_cast<int>(i);
    const bool hasCopyEngine = func == loomFuncAllGather || func == loomFuncAllToAll;
    // The copy engines take calls from LOOM_CUDA_CE_MIN_BYTES on (none by default: not yet
    // measured where they win; LOOM_ALGO=allgather:ce forces them).
    const bool ceRows = hasCopyEngine && ceMin >= 0;
    const size_t ceFrom = ceRows ? std::max<size_t>(static_cast<size_t>(ceMin), 1) : SIZE_MAX;
    if (func == loomFuncBarrier) {
      rows.push_back({func, SIZE_MAX, index});
    } else if (protocols_[i] == Protocol::kLL) {
      // alltoallv: counts differ per rank, so no rank knows the size of the whole exchange:
      // LL only when asked for by size.
      if (func == loomFuncAllToAllv && llMax < 0) continue;
      rows.push_back({func, std::min(llRowMax(func), ceFrom - 1), index});
    } else if (protocols_[i] == Protocol::kSimple) {
      if (ceFrom - 1 > llRowMax(func) || !ceRows) rows.push_back({func, ceFrom - 1, index});
    } else if (ceRows) {
      rows.push_back({func, SIZE_MAX, index});
    }
  }
  return rows;
}

std::string CudaEngine::describe() const {
  return windows_.describe() + " windows of " + std::to_string(layout_.totalBytes() >> 20) +
         " MiB, slot " + std::to_string(layout_.slotBytes) + " B";
}

void CudaEngine::setTimeline(DeviceTimeline* timeline) {
  DeviceScope scope(device_.ordinal());
  timer_.setTimeline(timeline);
}

void CudaEngine::stop() {
  volatile cuda::DevStatus* status = status_;
  status->abort = 1;
  releaseCopyEngineWaits();
}

bool CudaEngine::watchContext(uint64_t tick) {
  if (contextLost_.load()) return false;
  // Cheap every time; the context's identity (a reset and a new context between two looks) now
  // and then.
  if (device_.contextAlive(tick % 256 == 0)) return true;
  // Nothing logged here: at exit the process's static objects (the log's among them) may be
  // destroyed already.
  contextLost_.store(true);
  return false;
}

void CudaEngine::watch() {
  bool reported = false;
  bool waitSeen = false;
  uint64_t tick = 0;
  std::unique_lock<std::mutex> lock(watchMutex_);
  while (!stopWatch_) {
    watchWake_.wait_for(lock, kWatchInterval);
    if (stopWatch_) break;
    // A program may reset its devices (or exit) with this communicator alive: from then on no
    // kernel of it runs and nothing of CUDA is touched.
    if (!watchContext(tick++)) break;
    volatile cuda::DevStatus* status = status_;
    if (setup_.aborted != nullptr && setup_.aborted->load()) status->abort = 1;
    watchCopyEngine();
    watchRegistrations();
    try {
      timer_.poll();
    } catch (const Error&) {  // a CUDA error here shows on the calls themselves
    }
    if (!reported && status->error != cuda::kDevOk) {
      reported = true;
      int peer = status->errorPeer;
      if (status->error == cuda::kDevUnmapped)
        setup_.fail(Error(loomTimeout, "a registered buffer of rank " + std::to_string(peer) +
                                           " was not mapped here within " +
                                           std::to_string(setup_.timeoutMs / 1000.0) +
                                           " s (LOOM_DEBUG=INFO shows the registrations)"));
      else if (status->error == cuda::kDevWindowMismatch)
        setup_.fail(Error(loomInvalidUsage,
                          "rank " + std::to_string(peer) +
                              " called a collective on registered windows with other buffer "
                              "offsets or sizes than this rank (calls on windows must use the "
                              "same offsets on every rank)"));
      else
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

int CudaEngine::llThreads(size_t bytes, int blocks) {
  // One thread per 8-byte word of a block's largest part (parts split on 16-byte units), in
  // whole warps: a small call's block is one warp, whose barriers and launch cost less than 16
  // warps' (about 1 µs less per 8 B-512 B call on 2 ranks sharing an H100, docs/benchmarks.md).
  // Any size is correct: the kernels' loops stride by the block size.
  const size_t units = (bytes + 15) / 16;
  const size_t words = 2 * ((units + blocks - 1) / blocks);
  return static_cast<int>(std::clamp<size_t>((words + 31) / 32 * 32, 32, cuda::kThreads));
}

CudaEngine::CallStream CudaEngine::beginCall(loomStream_t streamHandle) {
  CallStream call{static_cast<cudaStream_t>(streamHandle), false};
  // A captured call is outside the eager order: it neither waits (a stream being captured cannot
  // wait for eager work) nor is waited for (its kernels run at the graph's launch). Its stream
  // has no id to ask for while it is captured.
  cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
  LOOM_CUDA_CHECK(cudaStreamIsCapturing(call.stream, &capture));
  call.captured = capture != cudaStreamCaptureStatusNone;
  if (call.captured) return call;
  unsigned long long id = 0;
  LOOM_CUDA_CHECK(cudaStreamGetId(call.stream, &id));
  if (lastEndRecorded_ && id != lastStreamId_)
    LOOM_CUDA_CHECK(cudaStreamWaitEvent(call.stream, lastEnd_, 0));
  lastStreamId_ = id;
  return call;
}

void CudaEngine::endCall(const CallStream& call) {
  if (call.captured) return;
  LOOM_CUDA_CHECK(cudaEventRecord(lastEnd_, call.stream));
  lastEndRecorded_ = true;
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

void CudaEngine::barrier(cudaStream_t stream) {
  if (setup_.nranks == 1) return;
  // A token allreduce: every rank hears from every other before anyone leaves.
  CollArgs token;
  token.func = loomFuncAllReduce;
  token.send = token.recv = barrierScratch_;
  token.count = 1;
  token.dtype = loomInt32;
  cuda::PlannedExchange plan;
  cuda::planExchange(token, setup_.rank, setup_.nranks, plan);
  plan.args.blocks = 1;
  plan.args.threads = llThreads(plan.largest, 1);
  launchExchange(plan.args, true, token, Protocol::kLL, stream);
}

void CudaEngine::checkContext() const {
  if (contextLost_.load())
    LOOM_THROW(loomUnhandledCudaError, "the CUDA context of device ", device_.ordinal(),
               " that this communicator was made in is gone (cudaDeviceReset): destroy the "
               "communicator and make a new one");
}

void CudaEngine::run(int algorithm, const CollArgs& call) {
  checkContext();
  DeviceScope scope(device_.ordinal());
  static const char* const names[] = {"allreduce",     "broadcast", "reduce",    "allgather",
                                      "reducescatter", "alltoall",  "alltoallv", "gather",
                                      "scatter",       "sendrecv",  "barrier"};
  const int f = static_cast<int>(call.func);
  const char* name = f >= 0 && f < static_cast<int>(std::size(names)) ? names[f] : "collective";
  inCallOrder(call.stream, name,
              [&](const CallStream& on) { enqueue(algorithm, call, on.stream); });
}

void CudaEngine::enqueue(int algorithm, const CollArgs& call, cudaStream_t stream) {
  Protocol protocol = protocols_.at(algorithm);
  if (call.func == loomFuncBarrier) return barrier(stream);
  if (runOnWindows(protocol, call, stream)) return;
  // The copy engines need windows: other buffers run the simple protocol.
  if (protocol == Protocol::kCopyEngine) protocol = Protocol::kSimple;
  const int n = setup_.nranks;
  const size_t bytes = call.count * dtypeSize(call.dtype);
  if (call.func == loomFuncAllReduce && protocol == Protocol::kSimple && n > 1 && bytes > 0) {
    cuda::TwoShotArgs t{static_cast<const char*>(call.send), static_cast<char*>(call.recv), bytes,
                        averageDivisor(call.op, n), blocksFor(bytes / n, protocol)};
    cuda::ReduceKey key{call.dtype, kernelOp(call.op), resolveGpuAccum(call.dtype, call.accum)};
    cuda::launchTwoShot(dev_, t, key, stream);
    return;
  }
  cuda::PlannedExchange plan;
  if (!cuda::planExchange(call, setup_.rank, n, plan)) return;
  ExchangeArgs& a = plan.args;
  if (n == 1) {
    const char* from = a.selfSend;
    char* to = plan.reduce ? a.reduceOut : a.selfRecv;
    size_t len = plan.reduce ? a.reduceBytes : a.selfBytes;
    if (len > 0 && from != to)
      LOOM_CUDA_CHECK(cudaMemcpyAsync(to, from, len, cudaMemcpyDeviceToDevice, stream));
    return;
  }
  a.blocks = blocksFor(plan.largest, protocol);
  if (protocol == Protocol::kLL) a.threads = llThreads(plan.largest, a.blocks);
  launchExchange(a, plan.reduce, call, protocol, stream);
}

void CudaEngine::pointToPoint(const std::vector<DeviceP2POp>& ops, loomStream_t streamHandle) {
  checkContext();
  DeviceScope scope(device_.ordinal());
  inCallOrder(streamHandle, "sendrecv",
              [&](const CallStream& on) { enqueuePointToPoint(ops, on.stream); });
}

void CudaEngine::enqueuePointToPoint(const std::vector<DeviceP2POp>& ops, cudaStream_t stream) {
  const int n = setup_.nranks, me = setup_.rank;
  // Rounds of at most one send and one receive per peer, in issue order: the order in which two
  // ranks' operations on a pair match.
  // Reused from call to call: a send allocates nothing once warmed up.
  std::vector<char>& taken = p2pTaken_;
  taken.assign(ops.size(), 0);
  size_t done = 0;
  while (done < ops.size()) {
    ExchangeArgs a = cuda::emptyExchange();
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
    a.blocks = p2pBlocks_;
    a.channelBase = cuda::kMaxBlocks;
    cuda::launchSimpleCopy(dev_, a, stream);
  }
}

}  // namespace loom
