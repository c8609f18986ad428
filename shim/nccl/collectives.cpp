// Collectives and point-to-point: argument checks, then Loom, or the real NCCL for what Loom does
// not run (pre-multiplied sums on CUDA buffers or on types the host path cannot scale) and for
// the operations LOOM_NCCL_FORCE_FALLBACK names.
#include <cstddef>
#include <cstring>
#include <memory>

#include "per_call.hpp"
#include "shim.hpp"

using namespace loom::nccl_shim;

namespace {

static_assert(ncclInt8 == static_cast<int>(loomInt8) && ncclUint8 == static_cast<int>(loomUint8) &&
                  ncclInt32 == static_cast<int>(loomInt32) &&
                  ncclUint32 == static_cast<int>(loomUint32) &&
                  ncclInt64 == static_cast<int>(loomInt64) &&
                  ncclUint64 == static_cast<int>(loomUint64) &&
                  ncclFloat16 == static_cast<int>(loomFloat16) &&
                  ncclFloat32 == static_cast<int>(loomFloat32) &&
                  ncclFloat64 == static_cast<int>(loomFloat64) &&
                  ncclBfloat16 == static_cast<int>(loomBfloat16) &&
                  ncclFloat8e4m3 == static_cast<int>(loomFloat8e4m3) &&
                  ncclFloat8e5m2 == static_cast<int>(loomFloat8e5m2),
              "NCCL's data types and Loom's have the same numbers: they pass unchanged");
static_assert(ncclSum == static_cast<int>(loomSum) && ncclProd == static_cast<int>(loomProd) &&
                  ncclMax == static_cast<int>(loomMax) && ncclMin == static_cast<int>(loomMin) &&
                  ncclAvg == static_cast<int>(loomAvg) &&
                  ncclNumOps == static_cast<int>(loomNumOps),
              "NCCL's built-in reductions and Loom's have the same numbers");

// What the Loom side runs a pre-multiplied sum with: the input scaled into scratch, then a sum.
struct Scaled {
  std::shared_ptr<std::vector<unsigned char>> scratch;
  PreMulSum op;
};

template <typename T>
void scaleAs(const void* in, void* out, size_t n, const void* scalar) {
  T s;
  std::memcpy(&s, scalar, sizeof(T));
  const T* x = static_cast<const T*>(in);
  T* y = static_cast<T*>(out);
  for (size_t i = 0; i < n; ++i) y[i] = static_cast<T>(x[i] * s);
}

// The types the host path multiplies as NCCL does (in the type itself); fp16, bf16 and fp8
// need NCCL's rounding and go to the real NCCL.
bool hostScalable(ncclDataType_t type) {
  return type != ncclFloat16 && type != ncclBfloat16 && type != ncclFloat8e4m3 &&
         type != ncclFloat8e5m2;
}

void scale(const PreMulSum& op, const void* in, void* out, size_t n) {
  const void* scalar = op.residence == ncclScalarHostImmediate ? op.value.data() : op.scalar;
  switch (op.type) {
    case ncclInt8:
      return scaleAs<int8_t>(in, out, n, scalar);
    case ncclUint8:
      return scaleAs<uint8_t>(in, out, n, scalar);
    case ncclInt32:
      return scaleAs<int32_t>(in, out, n, scalar);
    case ncclUint32:
      return scaleAs<uint32_t>(in, out, n, scalar);
    case ncclInt64:
      return scaleAs<int64_t>(in, out, n, scalar);
    case ncclUint64:
      return scaleAs<uint64_t>(in, out, n, scalar);
    case ncclFloat32:
      return scaleAs<float>(in, out, n, scalar);
    default:
      return scaleAs<double>(in, out, n, scalar);
  }
}

// The real NCCL's nccl*Config variant, where the call has a config and the library has it.
#if NCCL_VERSION_CODE >= NCCL_VERSION(2, 32, 0)
#define LOOM_NCCL_REAL_CONFIG(fn, ...) \
  if (config != nullptr && lib.fn##Config != nullptr) return lib.fn##Config(__VA_ARGS__, config)
#else
#define LOOM_NCCL_REAL_CONFIG(fn, ...) (void)config
#endif

// One call: checks, the route, then submit. loomFn(loomComm, stream, const void* send, op) and
// realFn(lib, realComm, op) run when the call is issued (now, or at ncclGroupEnd).
struct Call {
  Entry entry;
  OpKind kind;
  ncclComm_t handle;
  ncclDataType_t type;
  bool reduces = false;
  ncclRedOp_t op = ncclSum;
  cudaStream_t stream = nullptr;
  const void* sendbuff = nullptr;
  size_t scaledElements = 0;           // elements of sendbuff a pre-multiplied sum scales
  const CollConfig* config = nullptr;  // nccl*Config's
  size_t stageBytes = 0;  // alltoall in place: its input, copied to scratch for Loom first
};

// The real NCCL's route: its communicator made (collectively) when the call is issued, a
// pre-multiplied sum on an op of the real NCCL made for this call.
template <typename RealFn>
ncclResult_t submitReal(const Call& call, ncclComm* c, const std::string& because, bool isPreMul,
                        const PreMulSum& preMul, RealFn realFn) {
  const Entry entry = call.entry;
  // A pre-multiplied sum runs on an op of the real NCCL made for this call from the definition
  // as it is now (the caller may destroy its op before a group around the call ends, as NCCL
  // allows), and destroyed once the real group around the call ended.
  auto realOp = std::make_shared<ncclRedOp_t>(call.op);
  auto made = std::make_shared<bool>(false);  // prepare made *realOp
  auto prepare = [=]() -> ncclResult_t {
    const RealNccl* lib = realNccl(nullptr);
    if (c->loom != nullptr) {
      if (ncclResult_t r = ensureReal(entry, c, because.c_str(), &lib); r != ncclSuccess) return r;
    }
    if (!isPreMul) return ncclSuccess;
    const void* scalar =
        preMul.residence == ncclScalarHostImmediate ? preMul.value.data() : preMul.scalar;
    ncclResult_t r = fromReal(
        entry, *lib, c->real,
        lib->RedOpCreatePreMulSum(realOp.get(), const_cast<void*>(scalar), preMul.type,
                                  preMul.residence, reinterpret_cast<ncclComm_t>(c->real)));
    *made = r == ncclSuccess;
    return r;
  };
  auto issue = [=] {
    const RealNccl* lib = realNccl(nullptr);
    return fromReal(entry, *lib, c->real,
                    realFn(*lib, reinterpret_cast<ncclComm_t>(c->real), *realOp));
  };
  std::function<void()> after;
  if (isPreMul)
    after = [=] {
      if (*made)
        (void)realNccl(nullptr)->RedOpDestroy(*realOp, reinterpret_cast<ncclComm_t>(c->real));
    };
  return submit(entry, c, true, prepare, issue, after);
}

// Loom's route: a pre-multiplied sum scaled on the host first, an in-place alltoall through
// scratch, the per-call launch event recorded first.
template <typename LoomFn>
ncclResult_t submitLoom(const Call& call, ncclComm* c, const PerCall& perCall, bool isPreMul,
                        const PreMulSum& preMul, LoomFn loomFn) {
  loomComm_t comm = c->loom;
  void* stream = c->onHost ? nullptr : static_cast<void*>(call.stream);
  const Entry entry = call.entry;
  const cudaEvent_t event = c->onHost ? nullptr : perCall.event;
  const void* send = call.sendbuff;
  if (isPreMul) {
    auto scratch =
        std::make_shared<std::vector<unsigned char>>(call.scaledElements * typeBytes(call.type));
    const size_t n = call.scaledElements;
    return submit(entry, c, false, nullptr, [=] {
      scale(preMul, send, scratch->data(), n);
      return fromLoom(entry, loomFn(comm, stream, scratch->data(), loomSum));
    });
  }
  const loomRedOp_t op = static_cast<loomRedOp_t>(call.op);
  if (call.stageBytes > 0) {
    auto scratch = std::make_shared<void*>(nullptr);
    const bool host = c->onHost;
    const int device = c->cudaDevice;
    const size_t bytes = call.stageBytes;
    return submit(
        entry, c, false, nullptr,
        [=] {
          if (ncclResult_t r = recordLaunchEvent(entry, event, stream); r != ncclSuccess) return r;
          if (ncclResult_t r = stageInput(entry, host, device, stream, send, bytes, scratch.get());
              r != ncclSuccess)
            return r;
          return fromLoom(entry, loomFn(comm, stream, *scratch, op));
        },
        [=] { releaseStage(host, device, stream, *scratch); });
  }
  return submit(entry, c, false, nullptr, [=] {
    if (ncclResult_t r = recordLaunchEvent(entry, event, stream); r != ncclSuccess) return r;
    return fromLoom(entry, loomFn(comm, stream, send, op));
  });
}

template <typename LoomFn, typename RealFn>
ncclResult_t run(const Call& call, LoomFn loomFn, RealFn realFn) {
  ncclResult_t error = ncclSuccess;
  ncclComm* c = checkReady(call.entry, call.handle, &error);
  auto refuse = [&](ncclResult_t code, const std::string& message) {
    ncclResult_t r = fail(call.entry, code, message);
    refuseInGroup(r);
    return r;
  };
  if (c == nullptr) {
    refuseInGroup(error);
    return error;
  }
  if (static_cast<int>(call.type) < 0 || call.type >= ncclNumTypes)
    return refuse(ncclInvalidArgument, "datatype " + std::to_string(call.type) + " is not valid");
  const PerCall perCall = readConfig(call.config);
  if (perCall.refused != ncclSuccess) return refuse(perCall.refused, perCall.why);
  const char* why = nullptr;
  std::string reason;
  PreMulSum preMul;
  bool isPreMul = false;
  if (call.reduces && (static_cast<int>(call.op) < 0 || call.op >= ncclNumOps)) {
    std::lock_guard<std::mutex> lock(c->mutex);
    size_t index = static_cast<size_t>(call.op) - ncclNumOps;
    if (static_cast<int>(call.op) < 0 || index >= c->preMulSums.size() ||
        !c->preMulSums[index].live)
      return refuse(ncclInvalidArgument, "op " + std::to_string(call.op) +
                                             " is neither built in nor made on this communicator");
    preMul = c->preMulSums[index];
    isPreMul = true;
    if (preMul.type != call.type)
      return refuse(ncclInvalidArgument, "the pre-multiplied sum was made for another datatype");
    if (!c->onHost) {
      why = "a pre-multiplied sum on CUDA buffers (Loom has no such reduction)";
    } else if (!hostScalable(call.type)) {
      why = "a pre-multiplied sum of fp16, bf16 or fp8 (Loom does not round as NCCL does)";
    }
  }
  if (c->loom != nullptr && why == nullptr && forcedToNccl(call.kind)) {
    reason = std::string("LOOM_NCCL_FORCE_FALLBACK names ") + opKindName(call.kind);
    why = reason.c_str();
  }
  if (c->loom != nullptr && why == nullptr && perCall.toReal) why = perCall.why.c_str();
  if (c->loom != nullptr && why == nullptr)
    return submitLoom(call, c, perCall, isPreMul, preMul, loomFn);
  // Without a real NCCL the call fails now, with the reason; its communicator on the real side
  // is made when the call is issued (at ncclGroupEnd inside a group), outside any real group.
  std::string missing;
  if (realNccl(&missing) == nullptr)
    return refuse(ncclInvalidUsage,
                  std::string(why) + ", and there is no real NCCL to run it: " + missing);
  return submitReal(call, c, why != nullptr ? why : "", isPreMul, preMul, realFn);
}

loomDataType_t lt(ncclDataType_t type) { return static_cast<loomDataType_t>(type); }

int nranksOf(ncclComm_t comm) {
  return comm != nullptr && comm->magic == ncclComm::kMagic ? comm->nranks : 0;
}

// The collectives with a per-call config variant (NCCL 2.32): each plain entry point is its
// config variant without a config.
ncclResult_t allReduce(Entry entry, const void* sendbuff, void* recvbuff, size_t count,
                       ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm,
                       cudaStream_t stream, const CollConfig* config) {
  Call call{entry, OpKind::kAllReduce, comm, datatype, true, op, stream, sendbuff, count, config};
  return run(
      call,
      [=](loomComm_t c, void* s, const void* send, loomRedOp_t o) {
        return loomAllReduce(send, recvbuff, count, lt(datatype), o, c, s);
      },
      [=](const RealNccl& lib, ncclComm_t c, ncclRedOp_t o) {
        LOOM_NCCL_REAL_CONFIG(AllReduce, sendbuff, recvbuff, count, datatype, o, c, stream);
        return lib.AllReduce(sendbuff, recvbuff, count, datatype, o, c, stream);
      });
}

ncclResult_t broadcast(Entry entry, const void* sendbuff, void* recvbuff, size_t count,
                       ncclDataType_t datatype, int root, ncclComm_t comm, cudaStream_t stream,
                       const CollConfig* config) {
  Call call{entry, OpKind::kBroadcast, comm, datatype, false, ncclSum, stream, sendbuff, 0, config};
  return run(
      call,
      [=](loomComm_t c, void* s, const void* send, loomRedOp_t) {
        return loomBroadcast(send, recvbuff, count, lt(datatype), root, c, s);
      },
      [=](const RealNccl& lib, ncclComm_t c, ncclRedOp_t) {
        LOOM_NCCL_REAL_CONFIG(Broadcast, sendbuff, recvbuff, count, datatype, root, c, stream);
        return lib.Broadcast(sendbuff, recvbuff, count, datatype, root, c, stream);
      });
}

ncclResult_t reduce(Entry entry, const void* sendbuff, void* recvbuff, size_t count,
                    ncclDataType_t datatype, ncclRedOp_t op, int root, ncclComm_t comm,
                    cudaStream_t stream, const CollConfig* config) {
  Call call{entry, OpKind::kReduce, comm, datatype, true, op, stream, sendbuff, count, config};
  return run(
      call,
      [=](loomComm_t c, void* s, const void* send, loomRedOp_t o) {
        return loomReduce(send, recvbuff, count, lt(datatype), o, root, c, s);
      },
      [=](const RealNccl& lib, ncclComm_t c, ncclRedOp_t o) {
        LOOM_NCCL_REAL_CONFIG(Reduce, sendbuff, recvbuff, count, datatype, o, root, c, stream);
        return lib.Reduce(sendbuff, recvbuff, count, datatype, o, root, c, stream);
      });
}

ncclResult_t allGather(Entry entry, const void* sendbuff, void* recvbuff, size_t sendcount,
                       ncclDataType_t datatype, ncclComm_t comm, cudaStream_t stream,
                       const CollConfig* config) {
  Call call{entry, OpKind::kAllGather, comm, datatype, false, ncclSum, stream, sendbuff, 0, config};
  return run(
      call,
      [=](loomComm_t c, void* s, const void* send, loomRedOp_t) {
        return loomAllGather(send, recvbuff, sendcount, lt(datatype), c, s);
      },
      [=](const RealNccl& lib, ncclComm_t c, ncclRedOp_t) {
        LOOM_NCCL_REAL_CONFIG(AllGather, sendbuff, recvbuff, sendcount, datatype, c, stream);
        return lib.AllGather(sendbuff, recvbuff, sendcount, datatype, c, stream);
      });
}

ncclResult_t reduceScatter(Entry entry, const void* sendbuff, void* recvbuff, size_t recvcount,
                           ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm,
                           cudaStream_t stream, const CollConfig* config) {
  Call call{entry,
            OpKind::kReduceScatter,
            comm,
            datatype,
            true,
            op,
            stream,
            sendbuff,
            recvcount * static_cast<size_t>(nranksOf(comm)),
            config};
  return run(
      call,
      [=](loomComm_t c, void* s, const void* send, loomRedOp_t o) {
        return loomReduceScatter(send, recvbuff, recvcount, lt(datatype), o, c, s);
      },
      [=](const RealNccl& lib, ncclComm_t c, ncclRedOp_t o) {
        LOOM_NCCL_REAL_CONFIG(ReduceScatter, sendbuff, recvbuff, recvcount, datatype, o, c, stream);
        return lib.ReduceScatter(sendbuff, recvbuff, recvcount, datatype, o, c, stream);
      });
}

ncclResult_t allToAll(Entry entry, const void* sendbuff, void* recvbuff, size_t count,
                      ncclDataType_t datatype, ncclComm_t comm, cudaStream_t stream,
                      const CollConfig* config) {
  Call call{entry, OpKind::kAllToAll, comm, datatype, false, ncclSum, stream, sendbuff, 0, config};
  if (sendbuff == recvbuff)
    call.stageBytes = count * typeBytes(datatype) * static_cast<size_t>(nranksOf(comm));
  return run(
      call,
      [=](loomComm_t c, void* s, const void* send, loomRedOp_t) {
        return loomAllToAll(send, recvbuff, count, lt(datatype), c, s);
      },
      [=](const RealNccl& lib, ncclComm_t c, ncclRedOp_t) {
        if (lib.AlltoAll == nullptr) return ncclInvalidUsage;
        LOOM_NCCL_REAL_CONFIG(AlltoAll, sendbuff, recvbuff, count, datatype, c, stream);
        return lib.AlltoAll(sendbuff, recvbuff, count, datatype, c, stream);
      });
}

ncclResult_t gather(Entry entry, const void* sendbuff, void* recvbuff, size_t count,
                    ncclDataType_t datatype, int root, ncclComm_t comm, cudaStream_t stream,
                    const CollConfig* config) {
  Call call{entry, OpKind::kGather, comm, datatype, false, ncclSum, stream, sendbuff, 0, config};
  return run(
      call,
      [=](loomComm_t c, void* s, const void* send, loomRedOp_t) {
        return loomGather(send, recvbuff, count, lt(datatype), root, c, s);
      },
      [=](const RealNccl& lib, ncclComm_t c, ncclRedOp_t) {
        if (lib.Gather == nullptr) return ncclInvalidUsage;
        LOOM_NCCL_REAL_CONFIG(Gather, sendbuff, recvbuff, count, datatype, root, c, stream);
        return lib.Gather(sendbuff, recvbuff, count, datatype, root, c, stream);
      });
}

ncclResult_t scatter(Entry entry, const void* sendbuff, void* recvbuff, size_t count,
                     ncclDataType_t datatype, int root, ncclComm_t comm, cudaStream_t stream,
                     const CollConfig* config) {
  Call call{entry, OpKind::kScatter, comm, datatype, false, ncclSum, stream, sendbuff, 0, config};
  return run(
      call,
      [=](loomComm_t c, void* s, const void* send, loomRedOp_t) {
        return loomScatter(send, recvbuff, count, lt(datatype), root, c, s);
      },
      [=](const RealNccl& lib, ncclComm_t c, ncclRedOp_t) {
        if (lib.Scatter == nullptr) return ncclInvalidUsage;
        LOOM_NCCL_REAL_CONFIG(Scatter, sendbuff, recvbuff, count, datatype, root, c, stream);
        return lib.Scatter(sendbuff, recvbuff, count, datatype, root, c, stream);
      });
}

}  // namespace

extern "C" {

ncclResult_t ncclAllReduce(const void* sendbuff, void* recvbuff, size_t count,
                           ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm,
                           cudaStream_t stream) {
  return allReduce(Entry::kAllReduce, sendbuff, recvbuff, count, datatype, op, comm, stream,
                   nullptr);
}

ncclResult_t ncclBroadcast(const void* sendbuff, void* recvbuff, size_t count,
                           ncclDataType_t datatype, int root, ncclComm_t comm,
                           cudaStream_t stream) {
  return broadcast(Entry::kBroadcast, sendbuff, recvbuff, count, datatype, root, comm, stream,
                   nullptr);
}

ncclResult_t ncclBcast(void* buff, size_t count, ncclDataType_t datatype, int root, ncclComm_t comm,
                       cudaStream_t stream) {
  return broadcast(Entry::kBcast, buff, buff, count, datatype, root, comm, stream, nullptr);
}

ncclResult_t ncclReduce(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype,
                        ncclRedOp_t op, int root, ncclComm_t comm, cudaStream_t stream) {
  return reduce(Entry::kReduce, sendbuff, recvbuff, count, datatype, op, root, comm, stream,
                nullptr);
}

ncclResult_t ncclAllGather(const void* sendbuff, void* recvbuff, size_t sendcount,
                           ncclDataType_t datatype, ncclComm_t comm, cudaStream_t stream) {
  return allGather(Entry::kAllGather, sendbuff, recvbuff, sendcount, datatype, comm, stream,
                   nullptr);
}

ncclResult_t ncclReduceScatter(const void* sendbuff, void* recvbuff, size_t recvcount,
                               ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm,
                               cudaStream_t stream) {
  return reduceScatter(Entry::kReduceScatter, sendbuff, recvbuff, recvcount, datatype, op, comm,
                       stream, nullptr);
}

ncclResult_t ncclAlltoAll(const void* sendbuff, void* recvbuff, size_t count,
                          ncclDataType_t datatype, ncclComm_t comm, cudaStream_t stream) {
  return allToAll(Entry::kAlltoAll, sendbuff, recvbuff, count, datatype, comm, stream, nullptr);
}

ncclResult_t ncclGather(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype,
                        int root, ncclComm_t comm, cudaStream_t stream) {
  return gather(Entry::kGather, sendbuff, recvbuff, count, datatype, root, comm, stream, nullptr);
}

ncclResult_t ncclScatter(const void* sendbuff, void* recvbuff, size_t count,
                         ncclDataType_t datatype, int root, ncclComm_t comm, cudaStream_t stream) {
  return scatter(Entry::kScatter, sendbuff, recvbuff, count, datatype, root, comm, stream, nullptr);
}

#if NCCL_VERSION_CODE >= NCCL_VERSION(2, 32, 0)
ncclResult_t ncclAllReduceConfig(const void* sendbuff, void* recvbuff, size_t count,
                                 ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm,
                                 cudaStream_t stream, const ncclCollConfig_t* config) {
  return allReduce(Entry::kAllReduceConfig, sendbuff, recvbuff, count, datatype, op, comm, stream,
                   config);
}

ncclResult_t ncclBroadcastConfig(const void* sendbuff, void* recvbuff, size_t count,
                                 ncclDataType_t datatype, int root, ncclComm_t comm,
                                 cudaStream_t stream, const ncclCollConfig_t* config) {
  return broadcast(Entry::kBroadcastConfig, sendbuff, recvbuff, count, datatype, root, comm, stream,
                   config);
}

ncclResult_t ncclReduceConfig(const void* sendbuff, void* recvbuff, size_t count,
                              ncclDataType_t datatype, ncclRedOp_t op, int root, ncclComm_t comm,
                              cudaStream_t stream, const ncclCollConfig_t* config) {
  return reduce(Entry::kReduceConfig, sendbuff, recvbuff, count, datatype, op, root, comm, stream,
                config);
}

ncclResult_t ncclAllGatherConfig(const void* sendbuff, void* recvbuff, size_t sendcount,
                                 ncclDataType_t datatype, ncclComm_t comm, cudaStream_t stream,
                                 const ncclCollConfig_t* config) {
  return allGather(Entry::kAllGatherConfig, sendbuff, recvbuff, sendcount, datatype, comm, stream,
                   config);
}

ncclResult_t ncclReduceScatterConfig(const void* sendbuff, void* recvbuff, size_t recvcount,
                                     ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm,
                                     cudaStream_t stream, const ncclCollConfig_t* config) {
  return reduceScatter(Entry::kReduceScatterConfig, sendbuff, recvbuff, recvcount, datatype, op,
                       comm, stream, config);
}

ncclResult_t ncclAlltoAllConfig(const void* sendbuff, void* recvbuff, size_t count,
                                ncclDataType_t datatype, ncclComm_t comm, cudaStream_t stream,
                                const ncclCollConfig_t* config) {
  return allToAll(Entry::kAlltoAllConfig, sendbuff, recvbuff, count, datatype, comm, stream,
                  config);
}

ncclResult_t ncclGatherConfig(const void* sendbuff, void* recvbuff, size_t count,
                              ncclDataType_t datatype, int root, ncclComm_t comm,
                              cudaStream_t stream, const ncclCollConfig_t* config) {
  return gather(Entry::kGatherConfig, sendbuff, recvbuff, count, datatype, root, comm, stream,
                config);
}

ncclResult_t ncclScatterConfig(const void* sendbuff, void* recvbuff, size_t count,
                               ncclDataType_t datatype, int root, ncclComm_t comm,
                               cudaStream_t stream, const ncclCollConfig_t* config) {
  return scatter(Entry::kScatterConfig, sendbuff, recvbuff, count, datatype, root, comm, stream,
                 config);
}
#endif

ncclResult_t ncclSend(const void* sendbuff, size_t count, ncclDataType_t datatype, int peer,
                      ncclComm_t comm, cudaStream_t stream) {
  Call call{Entry::kSend, OpKind::kSendRecv, comm, datatype, false, ncclSum, stream, sendbuff};
  return run(
      call,
      [=](loomComm_t c, void* s, const void* send, loomRedOp_t) {
        return loomSend(send, count, lt(datatype), peer, c, s);
      },
      [=](const RealNccl& lib, ncclComm_t c, ncclRedOp_t) {
        return lib.Send(sendbuff, count, datatype, peer, c, stream);
      });
}

ncclResult_t ncclRecv(void* recvbuff, size_t count, ncclDataType_t datatype, int peer,
                      ncclComm_t comm, cudaStream_t stream) {
  Call call{Entry::kRecv, OpKind::kSendRecv, comm, datatype, false, ncclSum, stream, nullptr};
  return run(
      call,
      [=](loomComm_t c, void* s, const void*, loomRedOp_t) {
        return loomRecv(recvbuff, count, lt(datatype), peer, c, s);
      },
      [=](const RealNccl& lib, ncclComm_t c, ncclRedOp_t) {
        return lib.Recv(recvbuff, count, datatype, peer, c, stream);
      });
}

}  // extern "C"

LOOM_NCCL_PALIAS(ncclAllReduce)
LOOM_NCCL_PALIAS(ncclBroadcast)
LOOM_NCCL_PALIAS(ncclBcast)
LOOM_NCCL_PALIAS(ncclReduce)
LOOM_NCCL_PALIAS(ncclAllGather)
LOOM_NCCL_PALIAS(ncclReduceScatter)
LOOM_NCCL_PALIAS(ncclAlltoAll)
LOOM_NCCL_PALIAS(ncclGather)
LOOM_NCCL_PALIAS(ncclScatter)
LOOM_NCCL_PALIAS(ncclSend)
LOOM_NCCL_PALIAS(ncclRecv)
#if NCCL_VERSION_CODE >= NCCL_VERSION(2, 32, 0)
LOOM_NCCL_PALIAS(ncclAllReduceConfig)
LOOM_NCCL_PALIAS(ncclBroadcastConfig)
LOOM_NCCL_PALIAS(ncclReduceConfig)
LOOM_NCCL_PALIAS(ncclAllGatherConfig)
LOOM_NCCL_PALIAS(ncclReduceScatterConfig)
LOOM_NCCL_PALIAS(ncclAlltoAllConfig)
LOOM_NCCL_PALIAS(ncclGatherConfig)
LOOM_NCCL_PALIAS(ncclScatterConfig)
#endif
