// The LOOM_* values a user or a launcher sets: each parser must take any text and answer with a
// value or a loomInvalidArgument naming the variable, never crash or accept garbage silently. The
// input is up to eight lines, one value each for the variables below in turn.
#include <array>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "base/env.hpp"
#include "base/error.hpp"
#include "base/log.hpp"
#include "device/registry.hpp"
#include "fuzz_target.hpp"
#include "plan/selector.hpp"
#include "topology/cluster_map.hpp"
#include "transport/tcp/interfaces.hpp"

using namespace loom;

namespace {

template <typename Parse>
void expectArgumentError(Parse&& parse) {
  try {
    parse();
  } catch (const Error& e) {
    // A bad value is the caller's mistake; anything else from a parser is a bug.
    if (e.code() != loomInvalidArgument) __builtin_trap();
  }
}

// setenv copies every new value and glibc never frees the old copies (a pointer to one may still
// be held): 10 M runs grew the process past libFuzzer's 2 GB limit. putenv keeps the caller's
// string instead, so each variable lives in one buffer rewritten in place (values cut to fit).
void putValue(size_t index, const char* name, const std::string& value) {
  static std::array<std::array<char, 8192>, 8> buffers;
  std::array<char, 8192>& buffer = buffers[index];
  std::snprintf(buffer.data(), buffer.size(), "%s=%s", name, value.c_str());
  putenv(buffer.data());
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::vector<std::string> values(8);
  size_t line = 0;
  for (size_t i = 0; i < size && line < values.size(); ++i) {
    const char c = static_cast<char>(data[i]);
    if (c == '\n') {
      ++line;
    } else if (c != '\0') {
      values[line] += c;
    }
  }
  static const char* const names[] = {
      "LOOM_TIMEOUT",        "LOOM_CHECK", "LOOM_FLIGHT_ENTRIES", "LOOM_TRACE_WAIT_US",
      "LOOM_SOCKET_STREAMS", "LOOM_DEBUG", "LOOM_ALGO",           "LOOM_CLUSTER_SPLIT"};
  for (size_t i = 0; i < values.size(); ++i) putValue(i, names[i], values[i]);
  expectArgumentError([] { env::timeoutMs(); });
  expectArgumentError([] { env::checkMode(); });
  expectArgumentError([] { env::flightEntries(); });
  expectArgumentError([] { env::traceWaitUs(); });
  expectArgumentError([] { env::socketStreams(); });
  expectArgumentError([] { parseLogLevel(env::debugLevel()); });
  expectArgumentError([&] {
    SelectorInputs inputs;
    inputs.nranks = 4;
    inputs.directMaxBytes = 1024;
    Selector selector(inputs, values[6]);
  });
  expectArgumentError([&] { parseClusterSplit(values[7], 5); });
  expectArgumentError([&] { parseDeviceSpec(values[0]); });
  expectArgumentError([&] {
    std::vector<NetInterface> available{{"lo", "127.0.0.1", false, true},
                                        {"eth0", "10.0.0.2", false, false},
                                        {"ib0", "fe80::1", true, false}};
    chooseInterface(available, values[1], false);
  });
  return 0;
}

void loomFuzzSeeds(std::vector<std::string>& seeds) {
  seeds = {"600\n1\n1024\n100\n2\nINFO\nallreduce:ring,allgather:direct\n2,3",
           "0.5\n2\n1\n0\n64\nwarn\nreduce:pipelined\n0,2;1,3-4",
           "cuda:1\n^docker,lo\n\n\n\nTRACE\nbarrier:pairwise\n1;2;3;4;0",
           "1e9\n=eth0\n99999999999999999999\n-1\n0\nNONE\nallreduce\n5"};
}
