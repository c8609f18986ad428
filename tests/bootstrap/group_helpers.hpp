// What the bootstrap tests share: a group of bootstraps on threads of this process, and what
// each rank's call threw.
#pragma once

#include <gtest/gtest.h>

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "base/error.hpp"
#include "bootstrap/bootstrap.hpp"
#include "bootstrap/socket.hpp"

namespace loom {

using Clock = std::chrono::steady_clock;

inline double secondsSince(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

struct Outcome {
  loomResult_t code = loomSuccess;
  std::string message;
  double seconds = 0;  // when the call returned, from the start of the helper that ran it
};

inline Outcome capture(const std::function<void()>& body) {
  Outcome out;
  try {
    body();
  } catch (const Error& e) {
    out.code = e.code();
    out.message = e.what();
  }
  return out;
}

// Runs body(rank) on n threads at once and returns what each one threw.
inline std::vector<Outcome> parallel(int n, const std::function<void(int)>& body) {
  std::vector<Outcome> outcomes(n);
  std::vector<std::thread> threads;
  Clock::time_point start = Clock::now();
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      outcomes[r] = capture([&] { body(r); });
      outcomes[r].seconds = secondsSince(start);
    });
  }
  for (auto& t : threads) t.join();
  return outcomes;
}

// Probes b's health every `pollMs` until a probe fails or `seconds` pass: the first failure, or
// success when none came in time (bounded: a relay may be late on a busy machine).
inline Outcome firstHealthFailure(Bootstrap& b, double seconds, int pollMs = 2) {
  const Clock::time_point start = Clock::now();
  Outcome o;
  while (o.code == loomSuccess && secondsSince(start) < seconds) {
    o = capture([&] { b.checkHealth(); });
    std::this_thread::sleep_for(std::chrono::milliseconds(pollMs));
  }
  return o;
}

inline Bootstrap::Options quickOptions(int64_t timeoutMs = 10000) {
  Bootstrap::Options options;
  options.timeoutMs = timeoutMs;
  return options;
}

inline UniqueId localRoot(const JobSecret& secret, int64_t timeoutMs = 10000) {
  return startRendezvousRoot("127.0.0.1", 0, secret, timeoutMs);
}

inline std::string infoFor(int rank) {
  return std::string(100 * rank + 1, static_cast<char>('a' + rank));
}

// Builds a group of n bootstraps (one thread each) and checks that all succeeded.
inline std::vector<std::unique_ptr<Bootstrap>> makeGroup(
    const UniqueId& id, int n, Bootstrap::Options options = quickOptions()) {
  std::vector<std::unique_ptr<Bootstrap>> group(n);
  auto outcomes = parallel(
      n, [&](int r) { group[r] = std::make_unique<Bootstrap>(id, r, n, infoFor(r), options); });
  for (int r = 0; r < n; ++r) EXPECT_EQ(outcomes[r].code, loomSuccess) << outcomes[r].message;
  return group;
}

// A raw TCP connection that speaks no protocol: what a port scanner or a confused program does.
inline Fd rawConnect(const UniqueId& id) {
  Socket sock = connectWithRetry(id.host, id.port, Clock::now() + std::chrono::seconds(5), nullptr);
  return Fd(dup(sock.fd()));
}

inline void expectGroupWorks(std::vector<std::unique_ptr<Bootstrap>>& group) {
  int n = static_cast<int>(group.size());
  auto outcomes = parallel(n, [&](int r) {
    auto all = group[r]->allGather(std::string(1, 'r') += std::to_string(r));
    ASSERT_EQ(static_cast<int>(all.size()), n);
    for (int k = 0; k < n; ++k) EXPECT_EQ(all[k], std::string(1, 'r') += std::to_string(k));
  });
  for (auto& o : outcomes) EXPECT_EQ(o.code, loomSuccess) << o.message;
}

}  // namespace loom
