// What loom-info reads from other processes: flight records in a directory anyone of the user's
// jobs may write, and status replies (tools/json_reader.hpp). Malformed text is an exception with
// its offset; nesting is bounded.
#include <stdexcept>
#include <string>

#include "fuzz_target.hpp"
#include "json_reader.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    const loom::tool::Json j =
        loom::tool::Json::parse(std::string(reinterpret_cast<const char*>(data), size));
    (void)j["calls"].items().size();
    (void)j["rank"].integer();
  } catch (const std::runtime_error&) {
  }
  return 0;
}

void loomFuzzSeeds(std::vector<std::string>& seeds) {
  seeds = {R"({"loom_flight":1,"job":"ab","rank":2,"calls":[{"id":1,"seq":3,"op":"allreduce",)"
           R"("state":"done","waiting_for":-1}]})",
           R"([{"name":"x","ph":"X","ts":1.5,"args":{"a":"\u0041\n"}}, true, false, null])",
           "[[[[[[[[[[[[[[[[[[[[]]]]]]]]]]]]]]]]]]]", R"({"a":1e308,"b":-0.0,"c":"\\"})"};
}
