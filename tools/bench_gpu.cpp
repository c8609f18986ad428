#include "bench_gpu.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace loom::bench {

#if !LOOM_HAVE_CUDA

bool cudaDeviceVisible(bool) { return false; }

#else

namespace {

// Layout of the small device buffer behind syncRanks, reduceScalar and broadcastBytes. The
// barrier word is never written by anything else, so its sum stays zero.
constexpr size_t kBarrierOffset = 0;
constexpr size_t kScalarOffset = 64;
constexpr size_t kBroadcastOffset = 128;
constexpr size_t kBroadcastBytes = 384;
constexpr size_t kScratchBytes = kBroadcastOffset + kBroadcastBytes;

void checkCuda(cudaError_t err, const char* call) {
  if (err == cudaSuccess) return;
  std::fprintf(stderr, "loom-bench: %s failed: %s (%s)\n", call, cudaGetErrorString(err),
               cudaGetErrorName(err));
  std::exit(1);
}

// The first of the variables that is set to a non-negative integer, or -1.
int firstIntFromEnv(std::initializer_list<const char*> names) {
  for (const char* name : names) {
    const char* text = std::getenv(name);
    if (text == nullptr || *text == '\0') continue;
    char* end = nullptr;
    const long value = std::strtol(text, &end, 10);
    if (*end == '\0' && value >= 0 && value < (1L << 30)) return static_cast<int>(value);
  }
  return -1;
}

}  // namespace

bool cudaDeviceVisible(bool asked) {
  int count = 0;
  // No driver, no device, or a driver too old for this runtime all mean: run on the host.
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    cudaGetLastError();  // the failure must not surface in a later, unrelated check
    return false;
  }
  if (count == 0) return false;
  // Asked for (--device cuda, --graph, --vs) or LOOM_TEST_SHARE_GPU=1: ranks may share a GPU
  // (fastest under CUDA MPS). Otherwise GPUs only with one per rank of this host: without MPS,
  // ranks sharing one time-slice it and each call costs milliseconds.
  const char* share = std::getenv("LOOM_TEST_SHARE_GPU");
  if (asked || (share != nullptr && std::string(share) == "1")) return true;
  int localRanks = firstIntFromEnv({"LOCAL_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_SIZE"});
  return count >= std::max(localRanks, 1);
}

std::string selectCudaDevice() {
  int count = 0;
  checkCuda(cudaGetDeviceCount(&count), "cudaGetDeviceCount");
  if (count == 0) {
    std::fprintf(stderr, "loom-bench: no CUDA device visible\n");
    std::exit(1);
  }
  // The launcher's local rank; without one, the global rank (one host, one rank per device).
  int localRank = firstIntFromEnv({"LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_RANK", "SLURM_LOCALID",
                                   "LOOM_RANK", "RANK", "OMPI_COMM_WORLD_RANK"});
  if (localRank < 0) localRank = 0;
  const int device = localRank % count;
  checkCuda(cudaSetDevice(device), "cudaSetDevice");
  cudaDeviceProp prop{};
  checkCuda(cudaGetDeviceProperties(&prop, device), "cudaGetDeviceProperties");
  char text[512];
  const int localRanks = firstIntFromEnv({"LOCAL_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_SIZE"});
  std::snprintf(text, sizeof(text), "device %d of %d (%s)%s", device, count, prop.name,
                localRanks > count ? ", GPUs shared by several ranks" : "");
  return text;
}

size_t cudaFreeMemory(int localRanks, int* sharing) {
  int count = 1;
  size_t freeBytes = 0, total = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess || count < 1 ||
      cudaMemGetInfo(&freeBytes, &total) != cudaSuccess) {
    *sharing = 1;
    return 0;
  }
  *sharing = (localRanks + count - 1) / count;
  return freeBytes;
}

CudaBackend::CudaBackend(const BenchOptions& options, loomComm_t comm)
    : opts_(options), comm_(comm) {
  capacity_ = (options.maxBytes + 63) / 64 * 64 + 64;
  checkCuda(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "cudaStreamCreate");
  checkCuda(cudaEventCreate(&start_), "cudaEventCreate");
  checkCuda(cudaEventCreate(&stop_), "cudaEventCreate");
  void* p = nullptr;
  checkCuda(cudaMalloc(&p, capacity_), "cudaMalloc");
  send_ = static_cast<unsigned char*>(p);
  checkCuda(cudaMalloc(&p, capacity_), "cudaMalloc");
  recv_ = static_cast<unsigned char*>(p);
  checkCuda(cudaMalloc(&p, kScratchBytes), "cudaMalloc");
  scratch_ = static_cast<unsigned char*>(p);
  // Zeros, as on the host: a valid value of every type, and no denormals to slow reductions.
  checkCuda(cudaMemsetAsync(send_, 0, capacity_, stream_), "cudaMemsetAsync");
  checkCuda(cudaMemsetAsync(recv_, 0, capacity_, stream_), "cudaMemsetAsync");
  checkCuda(cudaMemsetAsync(scratch_, 0, kScratchBytes, stream_), "cudaMemsetAsync");
  checkCuda(cudaStreamSynchronize(stream_), "cudaStreamSynchronize");
  checkCall(loomCommUserRank(comm_, &rank_), "loomCommUserRank", comm_);
  if (opts_.overlapGemm > 0) gemm_ = std::make_unique<GemmLoad>(opts_.overlapGemm);
  if (opts_.window) {
    unsigned char* buffers[2] = {send_, recv_};
    for (int i = 0; i < 2; ++i)
      checkCall(loomCommWindowRegister(comm_, buffers[i], capacity_, &windows_[i],
                                       LOOM_WIN_COLL_SYMMETRIC),
                "loomCommWindowRegister", comm_);
    int direct = 0;
    checkCall(loomCommWindowIsDirect(comm_, windows_[1], &direct), "loomCommWindowIsDirect", comm_);
    if (direct == 0)
      std::fprintf(stderr,
                   "loom-bench: --window 1, but this communicator does not use windows "
                   "directly (LOOM_DEBUG=INFO says why): the calls run as without\n");
  }
  if (opts_.registerBuffers) {
    unsigned char* buffers[2] = {send_, recv_};
    for (int i = 0; i < 2; ++i)
      checkCall(loomCommRegister(comm_, buffers[i], capacity_, &registrations_[i]),
                "loomCommRegister", comm_);
    int direct = 0;
    checkCall(loomCommRegistrationIsDirect(comm_, registrations_[1], &direct),
              "loomCommRegistrationIsDirect", comm_);
    if (direct == 0)
      std::fprintf(stderr,
                   "loom-bench: --register 1, but this communicator does not use registered "
                   "buffers directly (LOOM_DEBUG=INFO says why): the calls run as without\n");
  }
}

CudaBackend::~CudaBackend() {
  // Errors are ignored here: the run has reported everything it measured.
  cudaStreamSynchronize(stream_);
  for (loomWindow_t w : windows_)
    if (w != nullptr) loomCommWindowDeregister(comm_, w);
  for (loomRegistration_t r : registrations_)
    if (r != nullptr) loomCommDeregister(comm_, r);
  cudaFree(scratch_);
  cudaFree(recv_);
  cudaFree(send_);
  cudaEventDestroy(stop_);
  cudaEventDestroy(start_);
  cudaStreamDestroy(stream_);
}

unsigned char* CudaBackend::hostView(unsigned char* buf) {
  const auto address = reinterpret_cast<uintptr_t>(buf);
  auto inside = [&](const unsigned char* base) {
    const auto start = reinterpret_cast<uintptr_t>(base);
    return address >= start && address < start + capacity_;
  };
  auto view = [&](std::unique_ptr<unsigned char[]>& host, unsigned char* base) {
    if (!host) host = std::make_unique_for_overwrite<unsigned char[]>(capacity_);
    return host.get() + (buf - base);
  };
  if (inside(send_)) return view(hostSend_, send_);
  if (inside(recv_)) return view(hostRecv_, recv_);
  std::fprintf(stderr, "loom-bench: internal error: %p is in neither buffer\n",
               static_cast<void*>(buf));
  std::exit(1);
}

void CudaBackend::upload(unsigned char* buf, size_t bytes) {
  checkCuda(cudaMemcpyAsync(buf, hostView(buf), bytes, cudaMemcpyHostToDevice, stream_),
            "cudaMemcpyAsync");
}

void CudaBackend::download(unsigned char* buf, size_t bytes) {
  checkCuda(cudaMemcpyAsync(hostView(buf), buf, bytes, cudaMemcpyDeviceToHost, stream_),
            "cudaMemcpyAsync");
  synchronize();
}

void CudaBackend::synchronize() {
  checkCuda(cudaStreamSynchronize(stream_), "cudaStreamSynchronize");
  checkAsyncError();
}

void CudaBackend::checkAsyncError() {
  loomResult_t asyncError = loomSuccess;
  checkCall(loomCommGetAsyncError(comm_, &asyncError), "loomCommGetAsyncError", comm_);
  if (asyncError != loomSuccess) {
    std::fprintf(stderr, "loom-bench: the communicator failed on the device: %s: %s\n",
                 loomGetErrorString(asyncError), loomGetLastError(comm_));
    std::exit(1);
  }
}

void CudaBackend::syncRanks() {
  // A one-element allreduce cannot complete on any rank before every rank has issued it, and
  // the stream reaches it only after everything issued before.
  unsigned char* word = scratch_ + kBarrierOffset;
  checkCall(loomAllReduce(word, word, 1, loomFloat, loomSum, comm_, stream_), "loomAllReduce",
            comm_);
  synchronize();
}

double CudaBackend::secondsPerCall(const std::function<void()>& launch) {
  for (int i = 0; i < opts_.warmupIters; ++i) launch();
  const double seconds = opts_.graph ? timeGraph(launch) : timeEager(launch);
  checkAsyncError();
  return gemm_ ? timeUnderGemm(launch, seconds) : seconds;
}

double CudaBackend::timeUnderGemm(const std::function<void()>& launch, double alone) {
  // Enough GEMMs to outlast the calls (timed alone) by half again; the same number on every rank,
  // so that ranks sharing a GPU load it alike. The chain runs alone first (every rank's at once),
  // then started just before the calls, so that every call meets it. Calls that slow down more
  // than that beside the GEMMs outlast the chain: the line says so.
  const double aloneMax = maxOverRanks(alone);
  syncRanks();
  gemm_->start(1);
  const double one = std::max(maxOverRanks(gemm_->finish()), 1e-6);
  // At most 1000: more GEMMs than the launch queue holds would block start() until most ran.
  const int count =
      static_cast<int>(std::min(std::ceil(1.5 * aloneMax * opts_.iters / one) + 1, 1000.0));
  syncRanks();
  gemm_->start(count);
  const double chainAlone = maxOverRanks(gemm_->finish());
  syncRanks();
  gemm_->start(count);
  checkCuda(cudaEventRecord(start_, stream_), "cudaEventRecord");
  for (int i = 0; i < opts_.iters; ++i) launch();
  checkCuda(cudaEventRecord(stop_, stream_), "cudaEventRecord");
  const double chainBeside = gemm_->finish();
  checkCuda(cudaEventSynchronize(stop_), "cudaEventSynchronize");
  checkAsyncError();
  float ms = 0;
  checkCuda(cudaEventElapsedTime(&ms, start_, stop_), "cudaEventElapsedTime");
  const double under = ms * 1e-3 / opts_.iters;
  const bool covered = gemm_->endsAfter(stop_) >= 0;
  const double chainBesideMax = maxOverRanks(chainBeside);
  const double lostPerCall = (chainBesideMax - chainAlone) / opts_.iters;
  const double underMax = maxOverRanks(under);
  const bool allCovered = maxOverRanks(covered ? 0.0 : 1.0) == 0.0;
  if (rank_ == 0)
    std::fprintf(
        stderr,
        "# overlap-gemm %d | %zu B | calls alone %.1f us | beside GEMMs %.1f us | %d GEMMs "
        "alone %.3f ms (%.0f TFLOP/s) | beside the calls %.3f ms | GEMM time lost per "
        "call %.1f us%s\n",
        gemm_->n(), nextBytes_, aloneMax * 1e6, underMax * 1e6, count, chainAlone * 1e3,
        count * gemm_->flopsPerGemm() / chainAlone / 1e12, chainBesideMax * 1e3, lostPerCall * 1e6,
        allCovered ? "" : " | (the GEMMs ended before the calls on some rank)");
  return under;
}

double CudaBackend::timeEager(const std::function<void()>& launch) {
  syncRanks();
  checkCuda(cudaEventRecord(start_, stream_), "cudaEventRecord");
  for (int i = 0; i < opts_.iters; ++i) launch();
  checkCuda(cudaEventRecord(stop_, stream_), "cudaEventRecord");
  checkCuda(cudaEventSynchronize(stop_), "cudaEventSynchronize");
  float ms = 0;
  checkCuda(cudaEventElapsedTime(&ms, start_, stop_), "cudaEventElapsedTime");
  return ms * 1e-3 / opts_.iters;
}

double CudaBackend::timeGraph(const std::function<void()>& launch) {
  // Thread-local capture: another thread's CUDA calls (a library's progress thread) neither
  // join the graph nor invalidate it.
  checkCuda(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeThreadLocal),
            "cudaStreamBeginCapture");
  for (int i = 0; i < opts_.iters; ++i) launch();
  cudaGraph_t graph = nullptr;
  checkCuda(cudaStreamEndCapture(stream_, &graph),
            "cudaStreamEndCapture (could every call be captured into a CUDA graph?)");
  cudaGraphExec_t exec = nullptr;
  checkCuda(cudaGraphInstantiate(&exec, graph, 0), "cudaGraphInstantiate");
  // The first launch uploads the graph to the device; it is not what a training step pays.
  checkCuda(cudaGraphLaunch(exec, stream_), "cudaGraphLaunch");
  syncRanks();
  checkCuda(cudaEventRecord(start_, stream_), "cudaEventRecord");
  checkCuda(cudaGraphLaunch(exec, stream_), "cudaGraphLaunch");
  checkCuda(cudaEventRecord(stop_, stream_), "cudaEventRecord");
  checkCuda(cudaEventSynchronize(stop_), "cudaEventSynchronize");
  float ms = 0;
  checkCuda(cudaEventElapsedTime(&ms, start_, stop_), "cudaEventElapsedTime");
  checkCuda(cudaGraphExecDestroy(exec), "cudaGraphExecDestroy");
  checkCuda(cudaGraphDestroy(graph), "cudaGraphDestroy");
  return ms * 1e-3 / opts_.iters;
}

template <typename T>
T CudaBackend::reduceScalar(T value, loomDataType_t dtype, loomRedOp_t redop) {
  unsigned char* slot = scratch_ + kScalarOffset;
  checkCuda(cudaMemcpyAsync(slot, &value, sizeof(T), cudaMemcpyHostToDevice, stream_),
            "cudaMemcpyAsync");
  checkCall(loomAllReduce(slot, slot, 1, dtype, redop, comm_, stream_), "loomAllReduce", comm_);
  checkCuda(cudaMemcpyAsync(&value, slot, sizeof(T), cudaMemcpyDeviceToHost, stream_),
            "cudaMemcpyAsync");
  synchronize();
  return value;
}

double CudaBackend::maxOverRanks(double value) { return reduceScalar(value, loomDouble, loomMax); }

int64_t CudaBackend::sumOverRanks(int64_t value) { return reduceScalar(value, loomInt64, loomSum); }

void CudaBackend::broadcastBytes(void* data, size_t bytes, int root) {
  if (bytes > kBroadcastBytes) {
    std::fprintf(stderr, "loom-bench: internal error: broadcast of %zu bytes\n", bytes);
    std::exit(1);
  }
  unsigned char* slot = scratch_ + kBroadcastOffset;
  checkCuda(cudaMemcpyAsync(slot, data, bytes, cudaMemcpyHostToDevice, stream_), "cudaMemcpyAsync");
  checkCall(loomBroadcast(slot, slot, bytes, loomUint8, root, comm_, stream_), "loomBroadcast",
            comm_);
  checkCuda(cudaMemcpyAsync(data, slot, bytes, cudaMemcpyDeviceToHost, stream_), "cudaMemcpyAsync");
  synchronize();
}

#endif  // LOOM_HAVE_CUDA

}  // namespace loom::bench
