// Runs the schedules of every rank of a collective in one thread, without channels or ranks: the
// checker of schedules built by algorithms (unit tests, loom-info) and, later, of plans loaded
// from files. Channels are unbounded byte queues, so a schedule that passes may still deadlock on
// bounded channels only through a send that waits for its own rank's receive in a cycle — the
// ring's streaming sends are what keeps real runs moving; the simulator takes each lane's first
// operation in turn, as the executor does, and honours every dependency.
//
// It checks that every receive meets a send of the same size in channel order, that every
// operation finishes (no cycle of waits; otherwise it names each stuck rank, lane and operation),
// that nothing is left unread in a channel, and which output bytes were written (for coverage).
// With memory bound it also moves and reduces the data, so tests can compare every rank's output
// with a reference.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "exec/schedule.hpp"

namespace loom {

struct SimulatedRank {
  const Schedule* schedule = nullptr;
  // The buffers of the schedule (input, output, scratch...) or empty: bytes are only counted.
  std::vector<char*> buffers;
};

struct SimulationResult {
  bool ok = true;
  std::string problem;  // what went wrong, by rank, lane and operation
  // Per rank: how many times each byte of the output was written (empty where not counted).
  std::vector<std::vector<uint8_t>> outputWrites;
  // The output bytes never written on some rank, summarized ("rank 2: bytes 16-31").
  std::string unwritten() const;
};

// Simulates the ranks' schedules (rank r is ranks[r]); peers in the schedules are indices into
// `ranks`. Reductions use the host's arithmetic (base/reduce).
SimulationResult simulateSchedules(std::span<SimulatedRank> ranks);

}  // namespace loom
