// LOOM_* values that are malformed or out of range fail with a message naming the variable, the
// value and what it takes (docs/configuration.md), one test per kind of variable; none is
// silently clamped. Communicator init runs env::checkAll() (tests/tools/tools_cli_test.sh shows
// it failing there).
#include "base/env.hpp"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "base/error.hpp"

namespace loom {
namespace {

// Sets a variable for one scope and puts back what was there.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    if (const char* old = getenv(name)) old_ = old;
    setenv(name, value, 1);
  }
  ~ScopedEnv() {
    if (old_)
      setenv(name_, old_->c_str(), 1);
    else
      unsetenv(name_);
  }

 private:
  const char* name_;
  std::optional<std::string> old_;
};

// The message of what `read` throws with `name=value` set; "" when it accepts the value.
std::string refusal(const char* name, const char* value, const std::function<void()>& read) {
  ScopedEnv set(name, value);
  try {
    read();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), loomInvalidArgument) << e.what();
    return e.what();
  }
  return "";
}

void expectRefused(const char* name, const char* value, const std::function<void()>& read,
                   const std::string& says) {
  const std::string message = refusal(name, value, read);
  EXPECT_NE(message.find(name), std::string::npos) << name << "=" << value << ": " << message;
  EXPECT_NE(message.find(value), std::string::npos) << name << "=" << value << ": " << message;
  EXPECT_NE(message.find(says), std::string::npos) << name << "=" << value << ": " << message;
}

TEST(Env, ByteSizesOutOfRangeOrNotPagesAreRefused) {
  const auto chunk = [] { env::shmChunkBytes(); };
  const std::string range = "a multiple of 4096 from 4096 to 1 GiB";
  expectRefused("LOOM_SHM_CHUNK_BYTES", "12", chunk, range);  // once silently 4096
  expectRefused("LOOM_SHM_CHUNK_BYTES", "5000", chunk, range);
  expectRefused("LOOM_SHM_CHUNK_BYTES", "2147483648", chunk, range);
  expectRefused("LOOM_SHM_CHUNK_BYTES", "-4096", chunk, range);
  expectRefused("LOOM_SHM_CHUNK_BYTES", "1M", chunk, "is not an integer");
  expectRefused("LOOM_SHM_CHUNK_BYTES", "99999999999999999999", chunk, "too large");
  expectRefused(
      "LOOM_P2P_BUFFER_BYTES", "100", [] { env::p2pBufferBytes(); }, range);
  expectRefused(
      "LOOM_RUDP_WINDOW_BYTES", "65537", [] { env::rudpWindowBytes(); },
      "a multiple of 8 from 64 KiB to 4 GiB");
  ScopedEnv ok("LOOM_SHM_CHUNK_BYTES", "8192");
  EXPECT_EQ(env::shmChunkBytes(), 8192);
}

TEST(Env, CountsOutOfRangeAreRefused) {
  const auto streams = [] { env::socketStreams(); };
  expectRefused("LOOM_SOCKET_STREAMS", "0", streams, "from 1 to 64");  // once accepted
  expectRefused("LOOM_SOCKET_STREAMS", "65", streams, "from 1 to 64");
  expectRefused(
      "LOOM_RUDP_PATHS", "17", [] { env::rudpPaths(); }, "from 1 to 16");
  expectRefused(
      "LOOM_RUDP_RETRIES", "0", [] { env::rudpRetries(); }, "from 1 to 1000");
  expectRefused(
      "LOOM_RUDP_RTO_MAX_MS", "5", [] { env::rudpRtoMaxMs(); }, "from 10 to 60000");
  expectRefused(
      "LOOM_CHECK", "3", [] { env::checkMode(); }, "from 0 to 2");
  ScopedEnv ok("LOOM_SOCKET_STREAMS", "8");
  EXPECT_EQ(env::socketStreams(), 8);
}

TEST(Env, SentinelsAreTheOnlyNegativeValues) {
  expectRefused(
      "LOOM_DIRECT_MAX_BYTES", "-2", [] { env::directMaxBytes(); }, "-1 or more");
  expectRefused(
      "LOOM_STREAMING_MIN_BYTES", "-1", [] { env::streamingMinBytes(); }, "0 or more");
  expectRefused(
      "LOOM_HETERO_CHUNK_BYTES", "-1", [] { env::heteroChunkBytes(); }, "from 0");
  expectRefused(
      "LOOM_EP_BUFFER_BYTES", "-1", [] { env::epBufferBytes(); }, "from 0 to 16 GiB");
  ScopedEnv table("LOOM_DIRECT_MAX_BYTES", "-1");
  EXPECT_EQ(env::directMaxBytes(), -1);
}

TEST(Env, FlagsAreZeroOrOne) {
  const auto blocking = [] { env::deviceBlocking(); };
  expectRefused("LOOM_DEVICE_BLOCKING", "2", blocking, "is not 0 or 1");
  expectRefused("LOOM_DEVICE_BLOCKING", "yes", blocking, "is not 0 or 1");
  expectRefused(
      "LOOM_RUDP_GSO", "on", [] { env::rudpGso(); }, "is not 0 or 1");
  expectRefused(
      "LOOM_RUDP_CALLER_RECEIVES", "true", [] { env::rudpCallerReceives(); }, "is not 0 or 1");
  ScopedEnv on("LOOM_DEVICE_BLOCKING", "1");
  EXPECT_TRUE(env::deviceBlocking());
}

TEST(Env, WordsAreOneOfTheirChoices) {
  expectRefused(
      "LOOM_HETERO_ALGO", "Flat", [] { env::heteroAlgo(); }, "is not one of auto, flat, composed");
  expectRefused(
      "LOOM_TRANSPORT", "udp", [] { env::transport(); }, "is not one of tcp, rudp");
  expectRefused(
      "LOOM_RUDP_FOLLOW_CALLER", "yes", [] { env::rudpFollowCaller(); },
      "is not one of auto, 1, 0");
  expectRefused(
      "LOOM_ACCUM_TYPE", "float128", [] { env::accumType(); }, "is not a data type name");
  ScopedEnv ok("LOOM_HETERO_ALGO", "composed");
  EXPECT_EQ(env::heteroAlgo(), "composed");
}

TEST(Env, TimeoutIsAPositiveFiniteNumberOfSeconds) {
  const auto timeout = [] { env::timeoutMs(); };
  const std::string says = "is not a number of seconds from 0.001 to 1e9";
  for (const char* bad : {"0", "-1", "0.0001", "nan", "inf", "1e10", "5s", "ten"})
    expectRefused("LOOM_TIMEOUT", bad, timeout, says);
  ScopedEnv ok("LOOM_TIMEOUT", "0.5");
  EXPECT_EQ(env::timeoutMs(), 500);
}

TEST(Env, FaultListsNeedKnownKeysAndProbabilities) {
  const auto faults = [] { env::rudpFaults(); };
  const std::string says = "is not drop=P, dup=P or delay=P with P from 0 to 1";
  for (const char* bad : {"drop=abc", "drop=2", "drop", "lose=0.1", "drop=0.1,,dup=0.1"})
    expectRefused("LOOM_RUDP_FAULTS", bad, faults, says);
  ScopedEnv ok("LOOM_RUDP_FAULTS", "delay=0.2,dup=0.1,drop=0.01");
  EXPECT_EQ(env::rudpFaults(), "delay=0.2,dup=0.1,drop=0.01");
}

// Whatever variable is wrong, the check that communicator init runs finds it.
TEST(Env, CheckAllFindsEachBadVariable) {
  const std::vector<std::pair<const char*, const char*>> bad = {{"LOOM_TIMEOUT", "0"},
                                                                {"LOOM_CHECK", "9"},
                                                                {"LOOM_SHM_CHUNK_BYTES", "12"},
                                                                {"LOOM_DIRECT_MAX_BYTES", "x"},
                                                                {"LOOM_P2P_BUFFER_BYTES", "1"},
                                                                {"LOOM_STREAMING_MIN_BYTES", "-5"},
                                                                {"LOOM_EP_BUFFER_BYTES", "-1"},
                                                                {"LOOM_ACCUM_TYPE", "quad"},
                                                                {"LOOM_SOCKET_STREAMS", "0"},
                                                                {"LOOM_HETERO_CHUNK_BYTES", "-1"},
                                                                {"LOOM_HETERO_ALGO", "x"},
                                                                {"LOOM_DEVICE_BLOCKING", "2"},
                                                                {"LOOM_TRANSPORT", "x"},
                                                                {"LOOM_RUDP_PATHS", "0"},
                                                                {"LOOM_RUDP_WINDOW_BYTES", "8"},
                                                                {"LOOM_RUDP_RETRIES", "0"},
                                                                {"LOOM_RUDP_RTO_MAX_MS", "0"},
                                                                {"LOOM_RUDP_GSO", "2"},
                                                                {"LOOM_RUDP_FOLLOW_CALLER", "x"},
                                                                {"LOOM_RUDP_CALLER_RECEIVES", "2"},
                                                                {"LOOM_RUDP_FAULTS", "x"}};
  for (const auto& [name, value] : bad)
    EXPECT_NE(refusal(name, value, [] { env::checkAll(); }).find(name), std::string::npos)
        << name << "=" << value << " passed env::checkAll()";
  EXPECT_NO_THROW(env::checkAll());
}

// The settings ranks compare at init (the communicator's and the CUDA kernels') are reported by
// the first item that differs, with both ranks' values.
TEST(Env, SettingsDifferenceNamesTheFirstDifferingItem) {
  EXPECT_EQ(
      env::settingsDifference("LOOM_CHECK=1 LOOM_ALGO=", 0, "LOOM_CHECK=0 LOOM_ALGO=", 3, ' '),
      "LOOM_CHECK=1 on rank 0, LOOM_CHECK=0 on rank 3");
  EXPECT_EQ(env::settingsDifference("A=1,B=2,C=3", 1, "A=1,B=5,C=3", 0, ','),
            "B=2 on rank 1, B=5 on rank 0");
  EXPECT_EQ(env::settingsDifference("A=1 LOOM_PLAN_DIR: p=h", 0, "A=1 LOOM_PLAN_DIR:", 1, ' '),
            "p=h on rank 0, nothing on rank 1");
}

}  // namespace
}  // namespace loom
