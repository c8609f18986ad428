// The client of the processes' status sockets (src/comm/status_socket.hpp): `loom-info --status`
// and loomrun (SIGUSR1) ask every process of this user, or the given ones, for their
// communicators' calls in flight while a job runs, and print them by communicator: who is in which
// call since when and for whom it waits, who is behind, and who does not answer (and why: stopped,
// gone).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace loom::tool {

struct StatusAnswer {
  int pid = 0;
  std::string socket;
  bool answered = false;
  std::string why;                 // no answer: why (its /proc state, a refused connection)
  std::vector<std::string> lines;  // one JSON object per communicator
};

// Asks the sockets in `dir` (every process of this user; `pids` non-empty: only those) with
// `request` ("status", "dump <dir>"), waiting at most timeoutMs for each. Sockets of processes
// that are gone are removed.
std::vector<StatusAnswer> queryStatus(const std::string& dir, const std::vector<int>& pids,
                                      const std::string& request, int timeoutMs);

// A duration as the reports print it: "1.5 s".
std::string secondsText(int64_t ns);

// The answers to "status" as text, by communicator.
std::string statusReport(const std::vector<StatusAnswer>& answers);

}  // namespace loom::tool
