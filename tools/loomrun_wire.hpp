// The fields of the lines loomruns exchange (loomrun_nodes.hpp): "node=1 nnodes=2 ranks=2,3",
// parsed from what another host sent, so every malformed value is refused rather than trusted
// (fuzzed by tests/fuzz/fuzz_loomrun_wire.cpp).
#pragma once

#include <map>
#include <string>
#include <vector>

namespace loom::launcher {

// "key=value" words separated by spaces; words without '=' are ignored.
std::map<std::string, std::string> parseFields(const std::string& text);
// The field as an integer in [0, 2^30], or -1 when absent or not such a number.
int fieldInt(const std::map<std::string, std::string>& fields, const char* name);
// "0,1,5": ranks in [0, 2^30]; empty when any item is not one.
std::vector<int> parseRanks(const std::string& text);
std::string joinRanks(const std::vector<int>& ranks);
// Moves the first whole line of `inbox` (bytes read so far) into `line`, without its '\n'; false
// while no line is complete.
bool takeLine(std::string& inbox, std::string& line);

}  // namespace loom::launcher
