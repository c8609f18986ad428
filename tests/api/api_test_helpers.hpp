// Helpers of the single-process API tests (api_unit_test): ranks as threads of this process.
#pragma once

#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "expect_loom.hpp"
#include "loom/loom.h"

namespace loom::test {

using Clock = std::chrono::steady_clock;

inline double secondsSince(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

inline std::string lastError() { return loomGetLastError(nullptr); }

// Sets an environment variable for one scope (Loom reads its variables at init).
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    setenv(name, value, 1);
  }
  ~ScopedEnv() {
    if (old_) {
      setenv(name_, old_->c_str(), 1);
    } else {
      unsetenv(name_);
    }
  }

 private:
  const char* name_;
  std::optional<std::string> old_;
};

inline loomConfig_t configWithTimeout(int timeoutMs, int blocking = 1) {
  loomConfig_t config = LOOM_CONFIG_INITIALIZER;
  config.timeoutMs = timeoutMs;
  config.blocking = blocking;
  return config;
}

// n ranks, one thread each, initialized together from one unique id.
inline std::vector<loomComm_t> initRanks(int n, loomConfig_t* config = nullptr) {
  loomUniqueId id;
  EXPECT_LOOM(loomGetUniqueId(&id));
  std::vector<loomComm_t> comms(n, nullptr);
  std::vector<loomResult_t> results(n, loomInternalError);
  std::vector<std::string> messages(n);
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r)
    threads.emplace_back([&, r] {
      results[r] = loomCommInitRankConfig(&comms[r], n, id, r, config);
      messages[r] = lastError();
    });
  for (auto& t : threads) t.join();
  for (int r = 0; r < n; ++r) {
    // A non-blocking init may answer either.
    bool nonBlocking = config != nullptr && !config->blocking;
    EXPECT_TRUE(results[r] == loomSuccess || (nonBlocking && results[r] == loomInProgress))
        << "rank " << r << ": " << loomGetErrorString(results[r]) << ": " << messages[r];
  }
  return comms;
}

inline loomComm_t initSolo(loomConfig_t* config = nullptr) { return initRanks(1, config)[0]; }

// Runs body(rank) on one thread per communicator, all at once.
template <typename Body>
void onEachRank(const std::vector<loomComm_t>& comms, Body body) {
  std::vector<std::thread> threads;
  for (size_t r = 0; r < comms.size(); ++r)
    threads.emplace_back([&, r] { body(static_cast<int>(r)); });
  for (auto& t : threads) t.join();
}

// An allreduce over all the communicators of one group that must succeed with the right sum: the
// proof that a communicator is still usable.
inline void expectUsable(const std::vector<loomComm_t>& comms) {
  onEachRank(comms, [&](int r) {
    int32_t in[3] = {r, 1, 2}, out[3] = {};
    EXPECT_LOOM(loomAllReduce(in, out, 3, loomInt32, loomSum, comms[r], nullptr));
    int n = static_cast<int>(comms.size());
    EXPECT_EQ(out[0], n * (n - 1) / 2);
    EXPECT_EQ(out[2], 2 * n);
  });
}

// Polls a non-blocking communicator until it is no longer in progress (bounded).
inline loomResult_t pollAsync(loomComm_t comm, double seconds = 30) {
  loomResult_t state = loomInProgress;
  Clock::time_point start = Clock::now();
  while (state == loomInProgress && secondsSince(start) < seconds) {
    EXPECT_LOOM(loomCommGetAsyncError(comm, &state));
    if (state == loomInProgress) std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
  return state;
}

}  // namespace loom::test
