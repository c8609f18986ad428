// loom.emu._C: the loomemu torch device's Python half (python/loom/emu/__init__.py renames torch's
// PrivateUse1 device "loomemu" and registers the device module over these).
#include <torch/csrc/utils/pybind.h>

#include "emu_runtime.hpp"

namespace py = pybind11;

PYBIND11_MODULE(_C, m) {
  using loom::emu::Runtime;
  m.def("load_plugin", &Runtime::load, py::arg("path"),
        "Loads the emulated device's plug-in (once per process).");
  m.def("device_count", [] { return Runtime::get().deviceCount(); });
  m.def("current_device", [] { return static_cast<int>(loom::emu::currentDevice()); });
  m.def("set_device", [](int index) { loom::emu::setCurrentDevice(index); });
  m.def(
      "synchronize",
      [](int index) {
        Runtime& rt = Runtime::get();
        const c10::DeviceIndex device = index < 0 ? loom::emu::currentDevice() : index;
        rt.checkDevice(device);
        rt.check(rt.table().streamSynchronize(device, nullptr), "streamSynchronize");
        c10::Stream current = loom::emu::currentStream(device);
        rt.check(rt.table().streamSynchronize(device, rt.stream(current)), "streamSynchronize");
      },
      py::arg("device") = -1, py::call_guard<py::gil_scoped_release>());
}
