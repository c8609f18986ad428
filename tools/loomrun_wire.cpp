#include "loomrun_wire.hpp"

#include <cstdlib>
#include <sstream>

namespace loom::launcher {

std::map<std::string, std::string> parseFields(const std::string& text) {
  std::istringstream in(text);
  std::map<std::string, std::string> fields;
  for (std::string word; in >> word;) {
    size_t eq = word.find('=');
    if (eq != std::string::npos) fields[word.substr(0, eq)] = word.substr(eq + 1);
  }
  return fields;
}

int fieldInt(const std::map<std::string, std::string>& fields, const char* name) {
  auto it = fields.find(name);
  if (it == fields.end()) return -1;
  char* end = nullptr;
  long value = std::strtol(it->second.c_str(), &end, 10);
  return (it->second.empty() || *end != '\0' || value < 0 || value > (1 << 30))
             ? -1
             : static_cast<int>(value);
}

std::vector<int> parseRanks(const std::string& text) {
  std::vector<int> ranks;
  std::istringstream in(text);
  for (std::string item; std::getline(in, item, ',');) {
    char* end = nullptr;
    long value = std::strtol(item.c_str(), &end, 10);
    if (item.empty() || *end != '\0' || value < 0 || value > (1 << 30)) return {};
    ranks.push_back(static_cast<int>(value));
  }
  return ranks;
}

std::string joinRanks(const std::vector<int>& ranks) {
  std::string text;
  for (int r : ranks) {
    if (!text.empty()) text += ',';
    text += std::to_string(r);
  }
  return text;
}

bool takeLine(std::string& inbox, std::string& line) {
  const size_t newline = inbox.find('\n');
  if (newline == std::string::npos) return false;
  line = inbox.substr(0, newline);
  inbox.erase(0, newline + 1);
  return true;
}

}  // namespace loom::launcher
