// C entry points of non-blocking point-to-point: loomIsend/loomIrecv post a ticket to the
// communicator's point-to-point engine (comm/p2p_engine.hpp) and hand back a request that owns a
// reference to it, so requests stay valid whatever happens to the communicator.
#include <chrono>
#include <memory>
#include <thread>

#include "api/handle.hpp"
#include "base/dtype.hpp"

struct loomRequest {
  static constexpr uint64_t kMagic = 0x4c4f4f4d52455153ull;  // "LOOMREQS"
  uint64_t magic = kMagic;
  std::shared_ptr<loom::P2PTicket> ticket;
};

namespace loom {

namespace {

loomResult_t post(const char* function, bool isSend, void* buffer, size_t count,
                  loomDataType_t datatype, int peer, int tag, loomComm_t handle,
                  loomRequest_t* request) {
  return guarded(function, [&] {
    LOOM_CHECK_ARG(request != nullptr, "request is NULL");
    *request = nullptr;
    HandleUse use(handle);
    Comm& comm = use.comm();
    LOOM_CHECK_ARG(
        !comm.onDevice() || comm.heteroHostBuffer(buffer),
        "non-blocking point-to-point is for host communicators and host buffers of a "
        "heterogeneous communicator; on a device communicator put loomSend/loomRecv in a group "
        "on the stream");
    int type = static_cast<int>(datatype);
    LOOM_CHECK_ARG(dtypeValid(type), "unknown data type ", type);
    const bool anySource = !isSend && peer == LOOM_ANY_SOURCE;
    LOOM_CHECK_ARG(anySource || (peer >= 0 && peer < use->nranks), "peer ", peer,
                   " is out of range [0, ", use->nranks, ")",
                   isSend ? "" : " (or LOOM_ANY_SOURCE)");
    const size_t esize = dtypeSize(datatype);
    LOOM_CHECK_ARG(esize == 0 || count <= static_cast<size_t>(PTRDIFF_MAX) / esize, "count ", count,
                   " overflows the address space");
    const size_t bytes = count * esize;
    LOOM_CHECK_ARG(bytes == 0 || buffer != nullptr, isSend ? "sendbuff" : "recvbuff",
                   " is NULL with count ", count);
    auto owned = std::make_unique<loomRequest>();
    owned->ticket = comm.p2pEngine().post(
        comm.pointToPoint(isSend, anySource ? kAnySource : peer, buffer, bytes, tag));
    *request = owned.release();
    return loomSuccess;
  });
}

loomRequest* checked(loomRequest_t request) {
  LOOM_CHECK_ARG(request != nullptr && request->magic == loomRequest::kMagic, "not a live request");
  return request;
}

// The finished request's result, its message kept for loomGetLastError.
loomResult_t outcome(const P2PTicket& ticket) {
  if (ticket.result != loomSuccess) throw Error(ticket.result, ticket.message);
  return loomSuccess;
}

}  // namespace

}  // namespace loom

using namespace loom;

extern "C" {

loomResult_t loomIsend(const void* sendbuff, size_t count, loomDataType_t datatype, int peer,
                       int tag, loomComm_t comm, loomRequest_t* request) {
  return post("loomIsend", true, const_cast<void*>(sendbuff), count, datatype, peer, tag, comm,
              request);
}

loomResult_t loomIrecv(void* recvbuff, size_t count, loomDataType_t datatype, int peer, int tag,
                       loomComm_t comm, loomRequest_t* request) {
  return post("loomIrecv", false, recvbuff, count, datatype, peer, tag, comm, request);
}

loomResult_t loomTest(loomRequest_t request, int* done) {
  return guarded("loomTest", [&] {
    LOOM_CHECK_ARG(done != nullptr, "done is NULL");
    const P2PTicket& ticket = *checked(request)->ticket;
    *done = ticket.finished.load(std::memory_order_acquire) ? 1 : 0;
    return *done ? outcome(ticket) : loomInProgress;
  });
}

loomResult_t loomWait(loomRequest_t request) {
  return guarded("loomWait", [&] {
    const P2PTicket& ticket = *checked(request)->ticket;
    // The engine's thread finishes every ticket by its deadline; the caller only watches.
    auto pause = std::chrono::microseconds(1);
    while (!ticket.finished.load(std::memory_order_acquire)) {
      std::this_thread::sleep_for(pause);
      pause = std::min(pause * 2, std::chrono::microseconds(500));
    }
    return outcome(ticket);
  });
}

loomResult_t loomRequestGetSource(loomRequest_t request, int* source) {
  return guarded("loomRequestGetSource", [&] {
    LOOM_CHECK_ARG(source != nullptr, "source is NULL");
    const P2PTicket& ticket = *checked(request)->ticket;
    LOOM_CHECK_ARG(ticket.finished.load(std::memory_order_acquire) && !ticket.op.isSend,
                   "the request is not a finished receive");
    *source = ticket.op.peer;
    return loomSuccess;
  });
}

loomResult_t loomRequestSetCallback(loomRequest_t request, loomRequestCallback_t callback,
                                    void* arg) {
  return guarded("loomRequestSetCallback", [&] {
    LOOM_CHECK_ARG(callback != nullptr, "callback is NULL");
    setTicketCallback(*checked(request)->ticket,
                      [callback, arg](loomResult_t result) { callback(result, arg); });
    return loomSuccess;
  });
}

loomResult_t loomRequestFree(loomRequest_t request) {
  return guarded("loomRequestFree", [&] {
    if (request == nullptr) return loomSuccess;
    checked(request)->magic = 0;
    delete request;
    return loomSuccess;
  });
}

}  // extern "C"
