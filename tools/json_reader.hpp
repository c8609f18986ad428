// A small JSON reader for the tools (flight records, status replies): objects, arrays, strings,
// numbers, true/false/null. Throws std::runtime_error with the offset on malformed input.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace loom::tool {

class Json {
 public:
  enum class Type { kNull, kBool, kNumber, kString, kArray, kObject };
  static Json parse(const std::string& text);

  Type type() const { return type_; }
  bool isObject() const { return type_ == Type::kObject; }
  // Members and elements; a missing key or a value of another type reads as null, 0 or "".
  const Json& operator[](const std::string& key) const;
  const std::vector<Json>& items() const { return items_; }
  bool has(const std::string& key) const { return members_.count(key) > 0; }
  int64_t integer() const { return static_cast<int64_t>(number_); }
  double number() const { return number_; }
  const std::string& str() const { return string_; }
  bool boolean() const { return boolean_; }

 private:
  friend class JsonParser;
  Type type_ = Type::kNull;
  bool boolean_ = false;
  double number_ = 0;
  std::string string_;
  std::vector<Json> items_;
  std::map<std::string, Json> members_;
};

}  // namespace loom::tool
