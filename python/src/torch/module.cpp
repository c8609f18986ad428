// loom._loom_torch: the ProcessGroupLoom class for torch.distributed (see loom/__init__.py, which
// registers the backend "loom").
#include <pybind11/chrono.h>
#include <torch/csrc/utils/pybind.h>

#include "loom/loom_device_plugin.h"
#include "process_group_loom.hpp"
#include "tensor_args.hpp"

namespace py = pybind11;

PYBIND11_MODULE(_loom_torch, m) {
  py::module_::import("torch.distributed");  // the c10d base classes' bindings
#ifdef LOOM_TORCH_CUDA
  m.attr("has_cuda") = true;
#else
  m.attr("has_cuda") = false;
#endif
  // The Loom device plug-ins of this process that serve a torch device type (LOOM_DEVICE_PLUGIN's
  // loaded first): [(kind, torch device type)].
  m.def("device_plugins", [] {
    std::vector<std::pair<std::string, std::string>> out;
    for (const auto& p : loom::torchbackend::torchPlugins()) out.emplace_back(p.kind, p.torchType);
    return out;
  });
  // Loads a plug-in into this module's Loom (the one that runs the "loom" process groups).
  m.def("load_device_plugin", [](const std::string& path) {
    loom::torchbackend::call(loomDevicePluginLoad(path.c_str()), "loading a device plug-in",
                             nullptr, "");
  });
  // Every communicator of this module's Loom (the "loom" process groups') writes its flight
  // record into `dir` (None: LOOM_FLIGHT_DIR); loom.dump_flight() calls it.
  m.def(
      "dump_flight",
      [](const std::optional<std::string>& dir) {
        loom::torchbackend::call(loomCommDumpFlight(nullptr, dir ? dir->c_str() : nullptr),
                                 "dump_flight", nullptr, "");
      },
      py::arg("dir") = py::none());
  using loom::torchbackend::LoomOptions;
  py::class_<LoomOptions, c10d::Backend::Options, c10::intrusive_ptr<LoomOptions>>(m, "Options")
      .def("__copy__",
           [](const LoomOptions& self) { return c10::make_intrusive<LoomOptions>(self); })
      .def("__deepcopy__", [](const LoomOptions& self, const py::dict&) {
        return c10::make_intrusive<LoomOptions>(self);
      });
  py::class_<loom::torchbackend::ProcessGroupLoom, c10d::Backend,
             c10::intrusive_ptr<loom::torchbackend::ProcessGroupLoom>>(m, "ProcessGroupLoom")
      // profiling_name: the backend's name in profiler events (the name torch knows it by).
      .def(py::init([](const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
                       std::chrono::milliseconds timeout, const std::string& profilingName) {
             return c10::make_intrusive<loom::torchbackend::ProcessGroupLoom>(
                 store, rank, size, timeout, profilingName);
           }),
           py::arg("store"), py::arg("rank"), py::arg("size"), py::arg("timeout"),
           py::arg("profiling_name") = "loom", py::call_guard<py::gil_scoped_release>())
      .def_property_readonly("options", &loom::torchbackend::ProcessGroupLoom::getBackendOptions);
}
