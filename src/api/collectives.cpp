// C entry points of the collectives and point-to-point calls: argument checks (a bad argument is
// loomInvalidArgument and leaves the communicator usable), then immediate execution or, between
// loomGroupStart and loomGroupEnd, recording for the group.
#include <cstring>
#include <limits>
#include <type_traits>

#include "api/group.hpp"
#include "api/handle.hpp"
#include "api/thread_state.hpp"
#include "base/dtype.hpp"

namespace loom {

namespace {

// C callers may pass any int where the API declares an enum (a C enum is an int), but reading a
// value outside the enumerators' range as the C++ enum is undefined (UBSan reports it): enum
// arguments are checked through their bytes.
template <typename Enum>
int rawEnum(const Enum& value) {
  std::underlying_type_t<Enum> raw;
  std::memcpy(&raw, &value, sizeof(raw));
  return static_cast<int>(raw);
}

size_t checkedBytes(size_t count, size_t esize, size_t times, const char* what) {
  const size_t limit = static_cast<size_t>(std::numeric_limits<ptrdiff_t>::max());
  LOOM_CHECK_ARG(esize == 0 || count <= limit / esize / times, what, ": ", count,
                 " elements overflow the address space");
  return count * esize * times;
}

// Rank and size come from the handle, so calls on a non-blocking communicator that is still
// initializing are checked and queued behind its initialization.
struct Ranks {
  int rank;
  int n;
  int nranks() const { return n; }
};

struct CallChecks {
  const Ranks& comm;
  const CollArgs& a;
  void dtype() const {
    LOOM_CHECK_ARG(dtypeValid(rawEnum(a.dtype)), "unknown data type ", rawEnum(a.dtype));
  }
  void op() const {
    LOOM_CHECK_ARG(opValid(rawEnum(a.op)), "unknown reduction op ", rawEnum(a.op));
  }
  void root() const {
    LOOM_CHECK_ARG(a.root >= 0 && a.root < comm.nranks(), "root ", a.root, " is out of range [0, ",
                   comm.nranks(), ")");
  }
  bool isRoot() const { return comm.rank == a.root; }
  // A buffer must be non-NULL when it moves any bytes.
  void buffer(const void* ptr, size_t count, size_t times, const char* name) const {
    size_t bytes = checkedBytes(count, dtypeSize(a.dtype), times, name);
    LOOM_CHECK_ARG(bytes == 0 || ptr != nullptr, name, " is NULL with count ", count);
  }
  // A block of count elements at displacement displ: a sum that wraps around would pass buffer()
  // and then address memory before the buffer.
  void block(const void* ptr, size_t displ, size_t count, const char* name) const {
    LOOM_CHECK_ARG(count <= std::numeric_limits<size_t>::max() - displ, name, ": displacement ",
                   displ, " plus count ", count, " overflows");
    buffer(ptr, displ + count, 1, name);
  }
};

// A CPU communicator runs on the calling thread and takes no stream; one on a GPU orders its work
// on the given stream (NULL: the legacy default stream).
void checkStream(const HandleUse& use, loomStream_t stream) {
  bool onDevice = use->ready.load() && use->comm != nullptr && use->comm->onDevice();
  LOOM_CHECK_ARG(stream == nullptr || onDevice, "a CPU communicator takes a NULL stream");
}

void validate(const Ranks& comm, const CollArgs& a) {
  CallChecks c{comm, a};
  c.dtype();
  const size_t n = static_cast<size_t>(comm.nranks());
  switch (a.func) {
    case loomFuncAllReduce:
      c.op();
      c.buffer(a.send, a.count, 1, "sendbuff");
      c.buffer(a.recv, a.count, 1, "recvbuff");
      break;
    case loomFuncBroadcast:
      c.root();
      if (c.isRoot()) c.buffer(a.send, a.count, 1, "sendbuff");
      c.buffer(a.recv, a.count, 1, "recvbuff");
      break;
    case loomFuncReduce:
      c.op();
      c.root();
      c.buffer(a.send, a.count, 1, "sendbuff");
      if (c.isRoot()) c.buffer(a.recv, a.count, 1, "recvbuff");
      break;
    case loomFuncAllGather:
      c.buffer(a.send, a.count, 1, "sendbuff");
      c.buffer(a.recv, a.count, n, "recvbuff");
      break;
    case loomFuncReduceScatter:
      c.op();
      c.buffer(a.send, a.count, n, "sendbuff");
      c.buffer(a.recv, a.count, 1, "recvbuff");
      break;
    case loomFuncAllToAll:
      c.buffer(a.send, a.count, n, "sendbuff");
      c.buffer(a.recv, a.count, n, "recvbuff");
      LOOM_CHECK_ARG(a.count == 0 || a.send != a.recv, "alltoall cannot run in place");
      break;
    case loomFuncAllToAllv:
      LOOM_CHECK_ARG(a.sendCounts && a.sendDispls && a.recvCounts && a.recvDispls,
                     "alltoallv count and displacement arrays must not be NULL");
      for (size_t i = 0; i < n; ++i) {
        c.block(a.send, a.sendDispls[i], a.sendCounts[i], "sendbuff");
        c.block(a.recv, a.recvDispls[i], a.recvCounts[i], "recvbuff");
      }
      break;
    case loomFuncGather:
      c.root();
      c.buffer(a.send, a.count, 1, "sendbuff");
      if (c.isRoot()) c.buffer(a.recv, a.count, n, "recvbuff");
      break;
    case loomFuncScatter:
      c.root();
      if (c.isRoot()) c.buffer(a.send, a.count, n, "sendbuff");
      c.buffer(a.recv, a.count, 1, "recvbuff");
      break;
    default:
      break;
  }
}

loomResult_t submit(const char* function, loomComm_t handle, const CollArgs& args,
                    loomStream_t stream) {
  return guarded(function, [&] {
    HandleUse use(handle);
    checkStream(use, stream);
    validate(Ranks{use->rank, use->nranks}, args);
    // Nothing to move: returns at once, as NCCL's collectives of zero elements do (nothing is
    // enqueued, nothing is matched with the peers' calls). Barrier and alltoallv (its counts are
    // per peer) always run.
    if (args.count == 0 && args.func != loomFuncBarrier && args.func != loomFuncAllToAllv)
      return loomSuccess;
    CollArgs withStream = args;
    withStream.stream = stream;
    if (groupDepth() > 0) {
      recordGroupOp(GroupOp::collective(use.get(), withStream));
      return loomSuccess;
    }
    loomComm* h = use.get();
    if (h->blocking) {
      use.comm().collective(withStream);  // (use.comm() also reports a failed initialization)
      return loomSuccess;
    }
    // Runs later on the progress thread: it must own whatever it reads of the caller's memory
    // besides the data buffers themselves (alltoallv's count arrays).
    GroupOp op = GroupOp::collective(h, args);
    return runOrQueue(h, [h, op] { h->comm->collective(op.args); });
  });
}

loomResult_t submitP2P(const char* function, bool isSend, void* buffer, size_t count,
                       loomDataType_t datatype, int peer, int tag, loomComm_t handle,
                       loomStream_t stream) {
  return guarded(function, [&] {
    HandleUse use(handle);
    checkStream(use, stream);
    LOOM_CHECK_ARG(dtypeValid(rawEnum(datatype)), "unknown data type ", rawEnum(datatype));
    LOOM_CHECK_ARG(peer >= 0 && peer < use->nranks, "peer ", peer, " is out of range [0, ",
                   use->nranks, ")");
    size_t bytes = checkedBytes(count, dtypeSize(datatype), 1, isSend ? "sendbuff" : "recvbuff");
    LOOM_CHECK_ARG(bytes == 0 || buffer != nullptr, isSend ? "sendbuff" : "recvbuff",
                   " is NULL with count ", count);
    GroupOp op = GroupOp::pointToPoint(use.get(), isSend, peer, buffer, bytes);
    op.stream = stream;
    op.tag = tag;
    if (groupDepth() > 0) {
      recordGroupOp(op);
      return loomSuccess;
    }
    std::vector<GroupOp>& single = apiThreadState().single;  // reused: a send allocates nothing
    single.assign(1, op);
    return runGroupOps(single);
  });
}

CollArgs make(loomFunc_t func, const void* send, void* recv, size_t count, loomDataType_t dtype,
              loomRedOp_t op = loomSum, int root = 0) {
  CollArgs a;
  a.func = func;
  a.send = send;
  a.recv = recv;
  a.count = count;
  a.dtype = dtype;
  a.op = op;
  a.root = root;
  return a;
}

}  // namespace
}  // namespace loom

using namespace loom;

extern "C" {

loomResult_t loomAllReduce(const void* sendbuff, void* recvbuff, size_t count,
                           loomDataType_t datatype, loomRedOp_t op, loomComm_t comm,
                           loomStream_t stream) {
  return submit("loomAllReduce", comm,
                make(loomFuncAllReduce, sendbuff, recvbuff, count, datatype, op), stream);
}

loomResult_t loomBroadcast(const void* sendbuff, void* recvbuff, size_t count,
                           loomDataType_t datatype, int root, loomComm_t comm,
                           loomStream_t stream) {
  return submit("loomBroadcast", comm,
                make(loomFuncBroadcast, sendbuff, recvbuff, count, datatype, loomSum, root),
                stream);
}

loomResult_t loomReduce(const void* sendbuff, void* recvbuff, size_t count, loomDataType_t datatype,
                        loomRedOp_t op, int root, loomComm_t comm, loomStream_t stream) {
  return submit("loomReduce", comm,
                make(loomFuncReduce, sendbuff, recvbuff, count, datatype, op, root), stream);
}

loomResult_t loomAllGather(const void* sendbuff, void* recvbuff, size_t sendcount,
                           loomDataType_t datatype, loomComm_t comm, loomStream_t stream) {
  return submit("loomAllGather", comm,
                make(loomFuncAllGather, sendbuff, recvbuff, sendcount, datatype), stream);
}

loomResult_t loomReduceScatter(const void* sendbuff, void* recvbuff, size_t recvcount,
                               loomDataType_t datatype, loomRedOp_t op, loomComm_t comm,
                               loomStream_t stream) {
  return submit("loomReduceScatter", comm,
                make(loomFuncReduceScatter, sendbuff, recvbuff, recvcount, datatype, op), stream);
}

loomResult_t loomAllToAll(const void* sendbuff, void* recvbuff, size_t count,
                          loomDataType_t datatype, loomComm_t comm, loomStream_t stream) {
  return submit("loomAllToAll", comm, make(loomFuncAllToAll, sendbuff, recvbuff, count, datatype),
                stream);
}

loomResult_t loomAllToAllv(const void* sendbuff, const size_t sendcounts[], const size_t sdispls[],
                           void* recvbuff, const size_t recvcounts[], const size_t rdispls[],
                           loomDataType_t datatype, loomComm_t comm, loomStream_t stream) {
  CollArgs a = make(loomFuncAllToAllv, sendbuff, recvbuff, 0, datatype);
  a.sendCounts = sendcounts;
  a.sendDispls = sdispls;
  a.recvCounts = recvcounts;
  a.recvDispls = rdispls;
  return submit("loomAllToAllv", comm, a, stream);
}

loomResult_t loomGather(const void* sendbuff, void* recvbuff, size_t sendcount,
                        loomDataType_t datatype, int root, loomComm_t comm, loomStream_t stream) {
  return submit("loomGather", comm,
                make(loomFuncGather, sendbuff, recvbuff, sendcount, datatype, loomSum, root),
                stream);
}

loomResult_t loomScatter(const void* sendbuff, void* recvbuff, size_t recvcount,
                         loomDataType_t datatype, int root, loomComm_t comm, loomStream_t stream) {
  return submit("loomScatter", comm,
                make(loomFuncScatter, sendbuff, recvbuff, recvcount, datatype, loomSum, root),
                stream);
}

loomResult_t loomBarrier(loomComm_t comm, loomStream_t stream) {
  return submit("loomBarrier", comm, make(loomFuncBarrier, nullptr, nullptr, 0, loomInt8), stream);
}

loomResult_t loomSend(const void* sendbuff, size_t count, loomDataType_t datatype, int peer,
                      loomComm_t comm, loomStream_t stream) {
  return submitP2P("loomSend", true, const_cast<void*>(sendbuff), count, datatype, peer, 0, comm,
                   stream);
}

loomResult_t loomRecv(void* recvbuff, size_t count, loomDataType_t datatype, int peer,
                      loomComm_t comm, loomStream_t stream) {
  return submitP2P("loomRecv", false, recvbuff, count, datatype, peer, 0, comm, stream);
}

loomResult_t loomSendTag(const void* sendbuff, size_t count, loomDataType_t datatype, int peer,
                         int tag, loomComm_t comm, loomStream_t stream) {
  return submitP2P("loomSendTag", true, const_cast<void*>(sendbuff), count, datatype, peer, tag,
                   comm, stream);
}

loomResult_t loomRecvTag(void* recvbuff, size_t count, loomDataType_t datatype, int peer, int tag,
                         loomComm_t comm, loomStream_t stream) {
  return submitP2P("loomRecvTag", false, recvbuff, count, datatype, peer, tag, comm, stream);
}

loomResult_t loomCommGetAlgorithm(const loomComm_t comm, loomFunc_t func, size_t count,
                                  loomDataType_t datatype, const char** algorithm) {
  return guarded("loomCommGetAlgorithm", [&] {
    LOOM_CHECK_ARG(algorithm != nullptr, "algorithm is NULL");
    LOOM_CHECK_ARG(rawEnum(func) >= 0 && rawEnum(func) < loomNumFuncs, "unknown collective ",
                   rawEnum(func));
    LOOM_CHECK_ARG(dtypeValid(rawEnum(datatype)), "unknown data type ", rawEnum(datatype));
    HandleUse use(comm);
    if (func == loomFuncSendRecv) {
      *algorithm = "p2p";
      return loomSuccess;
    }
    *algorithm = use.comm().selector().select(func, count * dtypeSize(datatype)).name;
    return loomSuccess;
  });
}

}  // extern "C"
