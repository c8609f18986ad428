// NCCL as loom-bench's point of comparison (--vs nccl): the same buffers, counts and in-place
// layouts as Loom's call, issued on the same stream, timed by the same code. With --window 1,
// NCCL gets buffers of its own instead, from ncclMemAlloc and registered as symmetric windows
// (what its symmetric kernels need), and each call uses them at the offsets of Loom's.
#include "bench_gpu.hpp"

#if LOOM_HAVE_CUDA

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "base/dtype.hpp"
#include "nccl_loader.hpp"

namespace loom::bench {
namespace {

// NCCL's own registered buffer standing in for one of Loom's.
struct Shadow {
  const unsigned char* loom = nullptr;
  unsigned char* own = nullptr;
  nccl::Window window = nullptr;
};

class NcclPeer final : public PeerLibrary {
 public:
  NcclPeer(const nccl::Api& api, nccl::Comm comm, nccl::Stream stream, int rank, int nranks)
      : api_(api), comm_(comm), stream_(stream), rank_(rank), nranks_(nranks) {}
  ~NcclPeer() override {
    for (Shadow& s : shadows_) {
      if (s.window != nullptr) api_.commWindowDeregister(comm_, s.window);
      if (s.own != nullptr) api_.memFree(s.own);
    }
    for (void* r : registrations_)
      if (r != nullptr) api_.commDeregister(comm_, r);
    api_.commDestroy(comm_);
  }
  NcclPeer(const NcclPeer&) = delete;
  NcclPeer& operator=(const NcclPeer&) = delete;

  const char* name() const override { return "nccl"; }
  std::string description() const override;
  bool supports(BenchOp op, loomDataType_t dtype, loomRedOp_t redop) const override;
  void issue(BenchOp op, const CallArgs& call, int root) override;
  // Collective: NCCL's own windows in place of Loom's send and receive buffers; false (with a
  // note on stderr) where this NCCL has no windows.
  bool useWindows(const unsigned char* send, const unsigned char* recv, size_t bytes);
  // Registers Loom's send and receive buffers with NCCL (ncclCommRegister); false (with a note)
  // where this NCCL cannot.
  bool registerBuffers(unsigned char* send, unsigned char* recv, size_t bytes);

 private:
  // Where a pointer into Loom's buffers lies in NCCL's own (itself without windows).
  template <typename T>
  T* mapped(T* p) const {
    auto* b = reinterpret_cast<const unsigned char*>(p);
    for (const Shadow& s : shadows_)
      if (b >= s.loom && b < s.loom + shadowBytes_)
        return reinterpret_cast<T*>(s.own + (b - s.loom));
    return p;
  }
  void check(nccl::Result result, const char* call) const;
  // nccl-tests' alltoall, gather, scatter and ring shift: NCCL has only send and receive.
  void issuePointToPoint(BenchOp op, const CallArgs& call, int root);

  const nccl::Api& api_;
  nccl::Comm comm_;
  nccl::Stream stream_;
  int rank_;
  int nranks_;
  Shadow shadows_[2];
  size_t shadowBytes_ = 0;
  void* registrations_[2] = {nullptr, nullptr};
};

std::string versionText(int code) {
  if (code <= 0) return "(version unknown)";
  // NCCL_VERSION_CODE is X*10000 + Y*100 + Z since 2.9, X*1000 + Y*100 + Z before.
  const bool wide = code >= 10000;
  const int major = wide ? code / 10000 : code / 1000;
  const int minor = wide ? code / 100 % 100 : code / 100 % 10;
  return std::to_string(major) + "." + std::to_string(minor) + "." + std::to_string(code % 100);
}

std::string NcclPeer::description() const {
  return "nccl " + versionText(api_.version) + " (" + api_.path + ")" +
         (shadowBytes_ > 0               ? ", on its own symmetric windows"
          : registrations_[0] != nullptr ? ", on registered buffers"
                                         : "");
}

bool NcclPeer::supports(BenchOp op, loomDataType_t dtype, loomRedOp_t redop) const {
  // Loom's extra fp8 format has no NCCL type at all.
  if (dtype == loomFloat8e4m3b15) return false;
  if ((dtype == loomFloat8e4m3 || dtype == loomFloat8e5m2) &&
      api_.version < nccl::kFirstFp8Version) {
    return false;
  }
  if (benchOpReduces(op) && redop == loomAvg && api_.version < nccl::kFirstAvgVersion) {
    return false;
  }
  return true;
}

void NcclPeer::check(nccl::Result result, const char* call) const {
  if (result == nccl::kSuccess) return;
  std::fprintf(stderr, "loom-bench: %s failed on rank %d: %s\n", call, rank_,
               api_.getErrorString(result));
  std::exit(1);
}

bool NcclPeer::useWindows(const unsigned char* send, const unsigned char* recv, size_t bytes) {
  if (api_.memAlloc == nullptr || api_.commWindowRegister == nullptr) {
    if (rank_ == 0)
      std::fprintf(stderr,
                   "loom-bench: --window 1: %s has no windows (NCCL 2.27+): NCCL runs "
                   "on unregistered buffers\n",
                   api_.path.c_str());
    return false;
  }
  const unsigned char* loom[2] = {send, recv};
  for (int i = 0; i < 2; ++i) {
    Shadow& s = shadows_[i];
    s.loom = loom[i];
    void* p = nullptr;
    check(api_.memAlloc(&p, bytes), "ncclMemAlloc");
    s.own = static_cast<unsigned char*>(p);
    // Zeros, as Loom's buffers start: no denormals to slow the reductions.
    if (cudaMemset(s.own, 0, bytes) != cudaSuccess) {
      std::fprintf(stderr, "loom-bench: cudaMemset of NCCL's window failed on rank %d\n", rank_);
      std::exit(1);
    }
    check(api_.commWindowRegister(comm_, s.own, bytes, &s.window, nccl::kWinCollSymmetric),
          "ncclCommWindowRegister");
  }
  shadowBytes_ = bytes;
  return true;
}

bool NcclPeer::registerBuffers(unsigned char* send, unsigned char* recv, size_t bytes) {
  if (api_.commRegister == nullptr || api_.commDeregister == nullptr) {
    if (rank_ == 0)
      std::fprintf(stderr,
                   "loom-bench: --register 1: %s has no ncclCommRegister (NCCL 2.19+): NCCL "
                   "runs on unregistered buffers\n",
                   api_.path.c_str());
    return false;
  }
  unsigned char* buffers[2] = {send, recv};
  for (int i = 0; i < 2; ++i)
    check(api_.commRegister(comm_, buffers[i], bytes, &registrations_[i]), "ncclCommRegister");
  return true;
}

void NcclPeer::issue(BenchOp op, const CallArgs& call, int root) {
  CallArgs c = call;
  c.send = mapped(call.send);
  c.recv = mapped(call.recv);
  const nccl::DataType type = c.dtype;  // same numbering, see nccl_loader.hpp
  const nccl::RedOp redop = c.redop;
  switch (op) {
    case BenchOp::kAllReduce:
      check(api_.allReduce(c.send, c.recv, c.count, type, redop, comm_, stream_), "ncclAllReduce");
      break;
    case BenchOp::kAllGather:
      check(api_.allGather(c.send, c.recv, c.count, type, comm_, stream_), "ncclAllGather");
      break;
    case BenchOp::kReduceScatter:
      check(api_.reduceScatter(c.send, c.recv, c.count, type, redop, comm_, stream_),
            "ncclReduceScatter");
      break;
    case BenchOp::kBroadcast:
      check(api_.broadcast(c.send, c.recv, c.count, type, root, comm_, stream_), "ncclBroadcast");
      break;
    case BenchOp::kReduce:
      check(api_.reduce(c.send, c.recv, c.count, type, redop, root, comm_, stream_), "ncclReduce");
      break;
    case BenchOp::kAllToAll:
    case BenchOp::kGather:
    case BenchOp::kScatter:
    case BenchOp::kSendRecv:
      issuePointToPoint(op, c, root);
      break;
  }
}

void NcclPeer::issuePointToPoint(BenchOp op, const CallArgs& c, int root) {
  const nccl::DataType type = c.dtype;
  const size_t block = c.count * dtypeSize(c.dtype);
  auto* send = static_cast<const unsigned char*>(c.send);
  auto* recv = static_cast<unsigned char*>(c.recv);
  auto sendTo = [&](const unsigned char* buf, int peer) {
    check(api_.send(buf, c.count, type, peer, comm_, stream_), "ncclSend");
  };
  auto recvFrom = [&](unsigned char* buf, int peer) {
    check(api_.recv(buf, c.count, type, peer, comm_, stream_), "ncclRecv");
  };
  check(api_.groupStart(), "ncclGroupStart");
  switch (op) {
    case BenchOp::kAllToAll:
      for (int peer = 0; peer < nranks_; ++peer) {
        sendTo(send + static_cast<size_t>(peer) * block, peer);
        recvFrom(recv + static_cast<size_t>(peer) * block, peer);
      }
      break;
    case BenchOp::kGather:
      sendTo(send, root);
      if (rank_ == root) {
        for (int peer = 0; peer < nranks_; ++peer) {
          recvFrom(recv + static_cast<size_t>(peer) * block, peer);
        }
      }
      break;
    case BenchOp::kScatter:
      if (rank_ == root) {
        for (int peer = 0; peer < nranks_; ++peer) {
          sendTo(send + static_cast<size_t>(peer) * block, peer);
        }
      }
      recvFrom(recv, root);
      break;
    default:  // kSendRecv: the ring shift of Loom's call
      sendTo(send, (rank_ + 1) % nranks_);
      recvFrom(recv, (rank_ - 1 + nranks_) % nranks_);
      break;
  }
  check(api_.groupEnd(), "ncclGroupEnd");
}

}  // namespace

std::unique_ptr<PeerLibrary> makeNcclPeer(CudaBackend& backend, int rank, int nranks, bool window,
                                          bool registerBuffers) {
  // NVLink multicast (NVLS) stays off whatever the environment says: the comparison must use
  // the same NVLink paths Loom can use. NCCL reads the variable at its first call.
  const char* nvls = std::getenv("NCCL_NVLS_ENABLE");
  if (nvls == nullptr || std::strcmp(nvls, "0") != 0) {
    if (nvls != nullptr && rank == 0) {
      std::fprintf(stderr, "loom-bench: NCCL_NVLS_ENABLE=%s ignored: NVLink multicast stays off\n",
                   nvls);
    }
    setenv("NCCL_NVLS_ENABLE", "0", 1);
  }

  std::string error;
  const nccl::Api* api = nccl::load(&error);
  // Every rank learns whether all have NCCL before any waits in a call a failed rank skips.
  const int64_t missing = backend.sumOverRanks(api == nullptr ? 1 : 0);
  if (api == nullptr) {
    std::fprintf(stderr, "loom-bench: --vs nccl on rank %d: %s\n", rank, error.c_str());
    std::exit(1);
  }
  if (missing != 0) {
    std::fprintf(stderr, "loom-bench: --vs nccl: NCCL could not be loaded on %lld rank(s)\n",
                 static_cast<long long>(missing));
    std::exit(1);
  }

  // Rank 0's unique id, and whether getting it worked, travel through Loom.
  struct {
    nccl::UniqueId id;
    nccl::Result result;
  } shared{};
  if (rank == 0) shared.result = api->getUniqueId(&shared.id);
  backend.broadcastBytes(&shared, sizeof(shared), 0);
  if (shared.result != nccl::kSuccess) {
    std::fprintf(stderr, "loom-bench: ncclGetUniqueId failed on rank 0: %s\n",
                 api->getErrorString(shared.result));
    std::exit(1);
  }
  nccl::Comm comm = nullptr;
  const nccl::Result result = api->commInitRank(&comm, nranks, shared.id, rank);
  if (result != nccl::kSuccess) {
    std::fprintf(stderr, "loom-bench: ncclCommInitRank failed on rank %d: %s\n", rank,
                 api->getErrorString(result));
    std::exit(1);
  }
  auto peer = std::make_unique<NcclPeer>(*api, comm, backend.cudaStream(), rank, nranks);
  if (window) peer->useWindows(backend.sendBuffer(), backend.recvBuffer(), backend.capacity());
  if (registerBuffers)
    peer->registerBuffers(backend.sendBuffer(), backend.recvBuffer(), backend.capacity());
  return peer;  // (its description says whether it got windows)
}

}  // namespace loom::bench

#endif  // LOOM_HAVE_CUDA
