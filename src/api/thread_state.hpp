// The C API's state of each calling thread, in one place: the group being recorded (NCCL's
// groups are per thread), the runner of blocking groups with its reused storage, and the last
// error message (loomGetLastError). The only thread-local state of the library.
#pragma once

#include <string>
#include <vector>

#include "api/group.hpp"
#include "comm/group_run.hpp"

namespace loom {

struct ApiThreadState {
  int groupDepth = 0;
  std::vector<GroupOp> groupOps;  // recorded between loomGroupStart and loomGroupEnd
  std::vector<loomComm*> pinned;  // the group's communicators, pinned while it runs
  std::vector<GroupCall> calls;   // the group as its communicators run it
  GroupRunner runner;
  std::vector<GroupOp> single;  // a send or receive outside a group: a group of one
  std::string lastError;
};

ApiThreadState& apiThreadState();

}  // namespace loom
