#include "api/thread_state.hpp"

namespace loom {

ApiThreadState& apiThreadState() {
  thread_local ApiThreadState state;
  return state;
}

}  // namespace loom
