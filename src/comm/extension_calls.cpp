// Calls of the layers above the communicator (ep/): they bring their own algorithms and use the
// communicator's resources, deadline, mismatch check and failure handling as a collective does.
#include "comm/comm.hpp"

namespace loom {

std::vector<std::string> Comm::allGatherForSetUp(const std::string& mine) {
  beginOperation();
  std::vector<std::string> all;
  failOnError([&] { all = withBootstrap([&](Bootstrap& b) { return b.allGather(mine); }); });
  return all;
}

void Comm::runCall(const CollArgs* signature, const std::function<void()>& body) {
  // The queued stream-ordered calls first: their host parts use the same channels and arena.
  if (deviceCalls_.jobs) failOnError([&] { deviceCalls_.jobs->quiesce(); });
  beginOperation();
  failOnErrorExceptArguments([&] {
    if (signature != nullptr) beginCall(*signature);
    body();
  });
}

}  // namespace loom
