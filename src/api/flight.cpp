// C entry point of the flight recorder's dumps (comm/flight_recorder.hpp).
#include <sys/stat.h>

#include <cerrno>
#include <cstring>

#include "api/handle.hpp"
#include "base/env.hpp"
#include "comm/flight_registry.hpp"

using namespace loom;

extern "C" {

loomResult_t loomCommDumpFlight(loomComm_t comm, const char* dir) {
  return guarded("loomCommDumpFlight", [&] {
    FlightRegistry& registry = FlightRegistry::process();
    std::string where = dir != nullptr ? dir : "";
    if (where.empty()) where = env::flightDir();
    LOOM_CHECK_ARG(!where.empty(), "no directory: pass one or set LOOM_FLIGHT_DIR");
    struct stat st {};
    LOOM_CHECK_ARG(::stat(where.c_str(), &st) == 0 && S_ISDIR(st.st_mode), "'", where,
                   "' is not a directory");
    if (comm == nullptr) {
      registry.dumpAll(where.c_str(), "loomCommDumpFlight");
      return loomSuccess;
    }
    HandleUse use(comm);
    if (!use.comm().flight().dump(where.c_str(), "loomCommDumpFlight"))
      LOOM_THROW(loomSystemError, "cannot write the flight record into ", where, ": ",
                 std::strerror(errno));
    return loomSuccess;
  });
}

}  // extern "C"
