// A small strict JSON reader (RFC 8259) for the files Loom loads (execution plans, plan/): values
// as a tree, errors naming the byte offset, line and column. Nesting and size are bounded so that
// a hostile or corrupt file fails with a message, never with a crash or a hang.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

namespace loom {

class JsonValue {
 public:
  enum class Kind : uint8_t { kNull, kBool, kNumber, kString, kArray, kObject };

  Kind kind() const { return kind_; }
  bool isNull() const { return kind_ == Kind::kNull; }
  bool isBool() const { return kind_ == Kind::kBool; }
  bool isNumber() const { return kind_ == Kind::kNumber; }
  bool isString() const { return kind_ == Kind::kString; }
  bool isArray() const { return kind_ == Kind::kArray; }
  bool isObject() const { return kind_ == Kind::kObject; }

  bool boolean() const { return bool_; }
  double number() const { return number_; }
  // The number's text was an integer (no fraction or exponent) that fits an int64.
  bool isInteger() const { return integer_; }
  int64_t integer() const { return int_; }
  const std::string& string() const { return string_; }
  const std::vector<JsonValue>& items() const { return items_; }
  // Members in the order of the text (duplicate keys are refused by the parser).
  const std::vector<std::pair<std::string, JsonValue>>& members() const { return members_; }
  // The member named `key`, or null when there is none.
  const JsonValue* find(std::string_view key) const;

  static const char* kindName(Kind kind);

 private:
  friend class JsonParser;
  Kind kind_ = Kind::kNull;
  bool bool_ = false;
  bool integer_ = false;
  double number_ = 0;
  int64_t int_ = 0;
  std::string string_;
  std::vector<JsonValue> items_;
  std::vector<std::pair<std::string, JsonValue>> members_;
};

struct JsonLimits {
  size_t maxBytes = 64u << 20;  // larger texts are refused before parsing
  int maxDepth = 64;            // arrays and objects nested deeper are refused
};

// Parses one JSON text (surrounding whitespace allowed, nothing else after it). Throws
// loom::Error(loomInvalidArgument) naming where and what went wrong.
JsonValue parseJson(std::string_view text, const JsonLimits& limits = {});

// `text` as a JSON string literal, quotes included.
std::string jsonQuote(std::string_view text);

}  // namespace loom
