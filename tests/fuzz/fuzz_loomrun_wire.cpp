// loomrun's node-link fields (tools/loomrun_wire.hpp), as another host's loomrun, or a stranger
// who got past nothing yet, may send them: parsed without trusting any value, and a rank list
// parses back to what it was written as.
#include <string>

#include "fuzz_target.hpp"
#include "loomrun_wire.hpp"

using namespace loom::launcher;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  const auto fields = parseFields(text);
  for (const char* name : {"node", "nnodes", "world", "masterport"}) {
    const int v = fieldInt(fields, name);
    if (v < -1 || v > (1 << 30)) __builtin_trap();
  }
  const auto it = fields.find("ranks");
  const std::vector<int> ranks = parseRanks(it != fields.end() ? it->second : text);
  for (int r : ranks)
    if (r < 0 || r > (1 << 30)) __builtin_trap();
  if (!ranks.empty() && parseRanks(joinRanks(ranks)) != ranks) __builtin_trap();
  return 0;
}

void loomFuzzSeeds(std::vector<std::string>& seeds) {
  seeds = {"node=1 nnodes=2 world=8 ranks=4,5,6,7",
           "world=4 masterport=29500 commid=10.0.0.1:29501", "ranks=0",
           "node=-1 nnodes=99999999999 ranks=1,,2", "ranks=0,1,2,3,4,5,6,7,8,9,10"};
}
