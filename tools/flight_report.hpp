// `loom-info --flight DIR`: reads the flight records every rank wrote into DIR
// (loom-flight-<job>-r<rank>.json: on a timeout, an abort, a fatal signal, SIGUSR2,
// loomCommDumpFlight or loom.dump_flight()) and says in one paragraph per communicator what
// happened: the last call every rank finished, the ranks that never entered the next one or entered
// a different op or size, whom each stuck rank waited for, the sends and receives left open, and
// the first failure.
#pragma once

#include <string>

namespace loom::tool {

// The report on every communicator with records in `dir`; `verbose` adds each rank's last calls.
// Throws std::runtime_error when `dir` holds no record or cannot be read.
std::string flightReport(const std::string& dir, bool verbose);

}  // namespace loom::tool
