// loom._loom: the C API (include/loom/loom.h) for Python, on any array that speaks the buffer
// protocol or DLPack (numpy, torch CPU tensors, ...). Calls release the GIL while they run.
#include "loom_module.hpp"

#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>

#include <cstring>
#include <stdexcept>
#include <string>

#include "loom/loom.h"

namespace nb = nanobind;
using loom_python::check;
using loom_python::Comm;
using loom_python::LoomError;

namespace {

// Inputs may be read-only (a numpy view of constants); outputs must be writable. The Python layer
// (loom/__init__.py) says which rule an array broke before nanobind would only say "incompatible
// function arguments".
using Array = nb::ndarray<nb::device::cpu>;
using InArray = nb::ndarray<nb::ro, nb::device::cpu>;

template <typename A>
loomDataType_t loomType(const A& a) {
  const nb::dlpack::dtype t = a.dtype();
  if (t.lanes == 1) {
    switch (static_cast<nb::dlpack::dtype_code>(t.code)) {
      case nb::dlpack::dtype_code::Int:
        if (t.bits == 8) return loomInt8;
        if (t.bits == 32) return loomInt32;
        if (t.bits == 64) return loomInt64;
        break;
      case nb::dlpack::dtype_code::UInt:
        if (t.bits == 8) return loomUint8;
        if (t.bits == 32) return loomUint32;
        if (t.bits == 64) return loomUint64;
        break;
      case nb::dlpack::dtype_code::Float:
        if (t.bits == 16) return loomFloat16;
        if (t.bits == 32) return loomFloat32;
        if (t.bits == 64) return loomFloat64;
        break;
      case nb::dlpack::dtype_code::Bfloat:
        if (t.bits == 16) return loomBfloat16;
        break;
      default:
        break;
    }
  }
  throw nb::value_error(("Loom has no data type for this array's dtype (code " +
                         std::to_string(t.code) + ", " + std::to_string(t.bits) + " bits)")
                            .c_str());
}

// Checks that an array is one contiguous block and returns its element count.
template <typename A>
size_t elements(const A& a, const char* name) {
  size_t count = 1;
  int64_t expected = 1;
  for (size_t d = a.ndim(); d-- > 0;) {
    if (a.shape(d) != 1 && a.stride(d) != expected)
      throw nb::value_error((std::string(name) + " must be C-contiguous").c_str());
    expected *= static_cast<int64_t>(a.shape(d));
    count *= a.shape(d);
  }
  return count;
}

template <typename A, typename B>
void sameType(const A& a, const B& b) {
  if (loomType(a) != loomType(b))
    throw nb::value_error("send and receive arrays must have the same dtype");
}

template <typename A>
void expectCount(const A& a, size_t count, const char* name, const char* rule) {
  size_t n = elements(a, name);
  if (n != count)
    throw nb::value_error((std::string(name) + " has " + std::to_string(n) + " elements; " + rule +
                           " needs " + std::to_string(count))
                              .c_str());
}

}  // namespace

void bindExpertParallel(nb::module_& m);  // ep_module.cpp

NB_MODULE(_loom, m) {
  m.doc() = "Loom collective communication library (C API bindings)";
  nb::exception<LoomError>(m, "LoomError", PyExc_RuntimeError);

  nb::enum_<loomRedOp_t>(m, "ReduceOp")
      .value("SUM", loomSum)
      .value("PROD", loomProd)
      .value("MAX", loomMax)
      .value("MIN", loomMin)
      .value("AVG", loomAvg);

  m.def("version", [] {
    int v = 0;
    check(loomGetVersion(&v), "loomGetVersion");
    return v;
  });
  m.def("get_unique_id", [] {
    loomUniqueId id;
    check(loomGetUniqueId(&id), "loomGetUniqueId");
    return nb::bytes(id.internal, sizeof(id.internal));
  });

  m.def(
      "dump_flight",
      [](const std::optional<std::string>& dir) {
        check(loomCommDumpFlight(nullptr, dir ? dir->c_str() : nullptr), "loomCommDumpFlight");
      },
      nb::arg("dir") = nb::none(),
      "Every communicator of this module writes its flight record into dir (None: "
      "LOOM_FLIGHT_DIR).");

  nb::class_<Comm>(m, "Comm")
      .def_static("from_env", &Comm::fromEnv, nb::arg("timeout_ms") = 0,
                  "Communicator from the launcher's environment (loomrun, torchrun, mpirun).")
      .def_static("init_rank", &Comm::initRank, nb::arg("nranks"), nb::arg("unique_id"),
                  nb::arg("rank"), nb::arg("timeout_ms") = 0, nb::arg("device") = "")
      .def_prop_ro("rank", &Comm::rank)
      .def_prop_ro("size", &Comm::size)
      .def("destroy", &Comm::destroy)
      .def("abort", &Comm::abort)
      .def("async_error", &Comm::asyncError)
      .def("register_plan", &Comm::registerPlan, nb::arg("plan"))
      .def("set_plan_selector", &Comm::setPlanSelector, nb::arg("selector").none())
      .def(
          "dump_flight",
          [](Comm& c, const std::optional<std::string>& dir) {
            check(loomCommDumpFlight(c.get(), dir ? dir->c_str() : nullptr), "loomCommDumpFlight");
          },
          nb::arg("dir") = nb::none(),
          "Writes this communicator's flight record (its last calls and their states) into dir "
          "(None: LOOM_FLIGHT_DIR) as loom-flight-<job>-r<rank>.json.")
      .def(
          "allreduce",
          [](Comm& c, InArray send, Array recv, loomRedOp_t op) {
            sameType(send, recv);
            size_t count = elements(send, "send");
            expectCount(recv, count, "recv", "allreduce");
            c.run("loomAllReduce", [&](loomComm_t comm) {
              return loomAllReduce(send.data(), recv.data(), count, loomType(send), op, comm,
                                   nullptr);
            });
          },
          nb::arg("send"), nb::arg("recv"), nb::arg("op"))
      .def(
          "broadcast",
          [](Comm& c, InArray send, Array recv, int root) {
            sameType(send, recv);
            size_t count = elements(recv, "recv");
            if (c.rank() == root) expectCount(send, count, "send", "broadcast");
            c.run("loomBroadcast", [&](loomComm_t comm) {
              return loomBroadcast(send.data(), recv.data(), count, loomType(recv), root, comm,
                                   nullptr);
            });
          },
          nb::arg("send"), nb::arg("recv"), nb::arg("root"))
      .def(
          "reduce",
          [](Comm& c, InArray send, Array recv, loomRedOp_t op, int root) {
            sameType(send, recv);
            size_t count = elements(send, "send");
            if (c.rank() == root) expectCount(recv, count, "recv", "reduce");
            c.run("loomReduce", [&](loomComm_t comm) {
              return loomReduce(send.data(), recv.data(), count, loomType(send), op, root, comm,
                                nullptr);
            });
          },
          nb::arg("send"), nb::arg("recv"), nb::arg("op"), nb::arg("root"))
      .def(
          "allgather",
          [](Comm& c, InArray send, Array recv) {
            sameType(send, recv);
            size_t count = elements(send, "send");
            expectCount(recv, count * c.size(), "recv", "allgather (size x send)");
            c.run("loomAllGather", [&](loomComm_t comm) {
              return loomAllGather(send.data(), recv.data(), count, loomType(send), comm, nullptr);
            });
          },
          nb::arg("send"), nb::arg("recv"))
      .def(
          "reduce_scatter",
          [](Comm& c, InArray send, Array recv, loomRedOp_t op) {
            sameType(send, recv);
            size_t count = elements(recv, "recv");
            expectCount(send, count * c.size(), "send", "reduce_scatter (size x recv)");
            c.run("loomReduceScatter", [&](loomComm_t comm) {
              return loomReduceScatter(send.data(), recv.data(), count, loomType(send), op, comm,
                                       nullptr);
            });
          },
          nb::arg("send"), nb::arg("recv"), nb::arg("op"))
      .def(
          "alltoall",
          [](Comm& c, InArray send, Array recv) {
            sameType(send, recv);
            size_t total = elements(send, "send");
            size_t n = static_cast<size_t>(c.size());
            if (total % n != 0)
              throw nb::value_error("alltoall: send is not size x count elements");
            expectCount(recv, total, "recv", "alltoall");
            c.run("loomAllToAll", [&](loomComm_t comm) {
              return loomAllToAll(send.data(), recv.data(), total / n, loomType(send), comm,
                                  nullptr);
            });
          },
          nb::arg("send"), nb::arg("recv"))
      .def(
          "gather",
          [](Comm& c, InArray send, Array recv, int root) {
            sameType(send, recv);
            size_t count = elements(send, "send");
            if (c.rank() == root) expectCount(recv, count * c.size(), "recv", "gather");
            c.run("loomGather", [&](loomComm_t comm) {
              return loomGather(send.data(), recv.data(), count, loomType(send), root, comm,
                                nullptr);
            });
          },
          nb::arg("send"), nb::arg("recv"), nb::arg("root"))
      .def(
          "scatter",
          [](Comm& c, InArray send, Array recv, int root) {
            sameType(send, recv);
            size_t count = elements(recv, "recv");
            if (c.rank() == root) expectCount(send, count * c.size(), "send", "scatter");
            c.run("loomScatter", [&](loomComm_t comm) {
              return loomScatter(send.data(), recv.data(), count, loomType(recv), root, comm,
                                 nullptr);
            });
          },
          nb::arg("send"), nb::arg("recv"), nb::arg("root"))
      .def(
          "send",
          [](Comm& c, InArray buf, int peer, int tag) {
            size_t count = elements(buf, "buffer");
            c.run("loomSendTag", [&](loomComm_t comm) {
              return loomSendTag(buf.data(), count, loomType(buf), peer, tag, comm, nullptr);
            });
          },
          nb::arg("buffer"), nb::arg("peer"), nb::arg("tag") = 0)
      .def(
          "recv",
          [](Comm& c, Array buf, int peer, int tag) {
            size_t count = elements(buf, "buffer");
            c.run("loomRecvTag", [&](loomComm_t comm) {
              return loomRecvTag(buf.data(), count, loomType(buf), peer, tag, comm, nullptr);
            });
          },
          nb::arg("buffer"), nb::arg("peer"), nb::arg("tag") = 0)
      .def("barrier", [](Comm& c) {
        c.run("loomBarrier", [](loomComm_t comm) { return loomBarrier(comm, nullptr); });
      });
  bindExpertParallel(m);
}
