// What the bindings' source files share: the error type and check of C API results, and the
// communicator object (loom.Comm) with the call wrapper that releases the GIL.
#pragma once

#include <nanobind/nanobind.h>
#include <nanobind/stl/string.h>

#include <cstring>
#include <stdexcept>
#include <string>

#include "loom/loom.h"

namespace loom_python {

namespace nb = nanobind;

struct LoomError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

inline void check(loomResult_t result, const char* call) {
  if (result == loomSuccess) return;
  const char* detail = loomGetLastError(nullptr);
  throw LoomError(std::string(call) + " failed: " + loomGetErrorString(result) +
                  (detail != nullptr && *detail != '\0' ? std::string(": ") + detail : ""));
}

class Comm {
 public:
  explicit Comm(loomComm_t comm) : comm_(comm) {}
  ~Comm() {
    if (comm_ != nullptr) loomCommDestroy(comm_);
  }
  Comm(const Comm&) = delete;
  Comm& operator=(const Comm&) = delete;

  static Comm* fromEnv(int timeoutMs) {
    loomConfig_t config = LOOM_CONFIG_INITIALIZER;
    config.timeoutMs = timeoutMs;
    loomComm_t comm = nullptr;
    {
      nb::gil_scoped_release unlocked;
      check(loomCommInitFromEnv(&comm, &config), "loomCommInitFromEnv");
    }
    return new Comm(comm);
  }

  // device: a device spec ("cpu", "cuda:1", "loom-emu:0"); empty: LOOM_DEVICE or the CPU.
  static Comm* initRank(int nranks, nb::bytes id, int rank, int timeoutMs,
                        const std::string& device) {
    if (id.size() != sizeof(loomUniqueId))
      throw nb::value_error("a unique id has 128 bytes (loom.get_unique_id())");
    loomUniqueId uid;
    std::memcpy(uid.internal, id.c_str(), sizeof(uid.internal));
    loomConfig_t config = LOOM_CONFIG_INITIALIZER;
    config.timeoutMs = timeoutMs;
    if (!device.empty()) config.device = device.c_str();
    loomComm_t comm = nullptr;
    {
      nb::gil_scoped_release unlocked;
      check(loomCommInitRankConfig(&comm, nranks, uid, rank, &config), "loomCommInitRankConfig");
    }
    return new Comm(comm);
  }

  loomComm_t get() const {
    if (comm_ == nullptr) throw LoomError("the communicator was destroyed");
    return comm_;
  }
  int rank() const {
    int r = 0;
    check(loomCommUserRank(get(), &r), "loomCommUserRank");
    return r;
  }
  int size() const {
    int n = 0;
    check(loomCommCount(get(), &n), "loomCommCount");
    return n;
  }
  void destroy() {
    if (comm_ == nullptr) return;
    loomComm_t comm = comm_;
    comm_ = nullptr;
    nb::gil_scoped_release unlocked;
    check(loomCommDestroy(comm), "loomCommDestroy");
  }
  void abort() {
    if (comm_ == nullptr) return;
    loomComm_t comm = comm_;
    comm_ = nullptr;
    check(loomCommAbort(comm), "loomCommAbort");
  }
  std::string asyncError() const {
    loomResult_t error = loomSuccess;
    check(loomCommGetAsyncError(get(), &error), "loomCommGetAsyncError");
    return loomGetErrorString(error);
  }

  template <typename Call>
  void run(const char* name, Call&& call) {
    loomComm_t comm = get();
    loomResult_t result;
    {
      nb::gil_scoped_release unlocked;
      result = call(comm);
    }
    check(result, name);
  }

 private:
  loomComm_t comm_;
};

}  // namespace loom_python
