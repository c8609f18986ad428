#include "base/json.hpp"

#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <limits>

#include "base/error.hpp"

namespace loom {

const JsonValue* JsonValue::find(std::string_view key) const {
  for (const auto& [name, value] : members_)
    if (name == key) return &value;
  return nullptr;
}

const char* JsonValue::kindName(Kind kind) {
  switch (kind) {
    case Kind::kNull:
      return "null";
    case Kind::kBool:
      return "a boolean";
    case Kind::kNumber:
      return "a number";
    case Kind::kString:
      return "a string";
    case Kind::kArray:
      return "an array";
    case Kind::kObject:
      return "an object";
  }
  return "?";
}

class JsonParser {
 public:
  JsonParser(std::string_view text, const JsonLimits& limits) : text_(text), limits_(limits) {}

  JsonValue document() {
    if (text_.size() > limits_.maxBytes)
      LOOM_THROW(loomInvalidArgument, "JSON text of ", text_.size(), " bytes exceeds the limit of ",
                 limits_.maxBytes);
    JsonValue v = value(0);
    skipSpace();
    if (pos_ != text_.size()) fail("unexpected text after the JSON value");
    return v;
  }

 private:
  [[noreturn]] void fail(const std::string& what) const {
    size_t line = 1, column = 1;
    for (size_t i = 0; i < pos_ && i < text_.size(); ++i) {
      column = text_[i] == '\n' ? 1 : column + 1;
      line += text_[i] == '\n';
    }
    LOOM_THROW(loomInvalidArgument, "JSON: ", what, " at line ", line, " column ", column,
               " (byte ", pos_, ")");
  }

  void skipSpace() {
    while (pos_ < text_.size() && (text_[pos_] == ' ' || text_[pos_] == '\t' ||
                                   text_[pos_] == '\n' || text_[pos_] == '\r'))
      ++pos_;
  }
  bool at(char c) const { return pos_ < text_.size() && text_[pos_] == c; }
  void expect(char c) {
    if (!at(c)) fail(std::string("expected '") + c + "'");
    ++pos_;
  }
  void literal(std::string_view word) {
    if (text_.substr(pos_, word.size()) != word) fail("unknown literal");
    pos_ += word.size();
  }

  JsonValue value(int depth) {
    if (depth > limits_.maxDepth) fail("nesting deeper than " + std::to_string(limits_.maxDepth));
    skipSpace();
    if (pos_ >= text_.size()) fail("unexpected end of text");
    JsonValue v;
    switch (text_[pos_]) {
      case '{':
        return object(depth);
      case '[':
        return array(depth);
      case '"':
        v.kind_ = JsonValue::Kind::kString;
        v.string_ = string();
        return v;
      case 't':
        literal("true");
        v.kind_ = JsonValue::Kind::kBool;
        v.bool_ = true;
        return v;
      case 'f':
        literal("false");
        v.kind_ = JsonValue::Kind::kBool;
        return v;
      case 'n':
        literal("null");
        return v;
      default:
        return number();
    }
  }

  JsonValue object(int depth) {
    JsonValue v;
    v.kind_ = JsonValue::Kind::kObject;
    expect('{');
    skipSpace();
    if (at('}')) {
      ++pos_;
      return v;
    }
    while (true) {
      skipSpace();
      if (!at('"')) fail("expected a member name");
      std::string key = string();
      if (v.find(key) != nullptr) fail("duplicate member \"" + key + "\"");
      skipSpace();
      expect(':');
      JsonValue member = value(depth + 1);
      v.members_.emplace_back(std::move(key), std::move(member));
      skipSpace();
      if (at(',')) {
        ++pos_;
        continue;
      }
      expect('}');
      return v;
    }
  }

  JsonValue array(int depth) {
    JsonValue v;
    v.kind_ = JsonValue::Kind::kArray;
    expect('[');
    skipSpace();
    if (at(']')) {
      ++pos_;
      return v;
    }
    while (true) {
      v.items_.push_back(value(depth + 1));
      skipSpace();
      if (at(',')) {
        ++pos_;
        continue;
      }
      expect(']');
      return v;
    }
  }

  unsigned hex4() {
    if (pos_ + 4 > text_.size()) fail("short \\u escape");
    unsigned code = 0;
    for (int i = 0; i < 4; ++i) {
      const char c = text_[pos_++];
      code <<= 4;
      if (c >= '0' && c <= '9')
        code |= c - '0';
      else if (c >= 'a' && c <= 'f')
        code |= c - 'a' + 10;
      else if (c >= 'A' && c <= 'F')
        code |= c - 'A' + 10;
      else
        fail("bad hex digit in \\u escape");
    }
    return code;
  }

  static void appendUtf8(std::string& out, unsigned code) {
    if (code < 0x80) {
      out += static_cast<char>(code);
    } else if (code < 0x800) {
      out += static_cast<char>(0xc0 | code >> 6);
      out += static_cast<char>(0x80 | (code & 0x3f));
    } else if (code < 0x10000) {
      out += static_cast<char>(0xe0 | code >> 12);
      out += static_cast<char>(0x80 | (code >> 6 & 0x3f));
      out += static_cast<char>(0x80 | (code & 0x3f));
    } else {
      out += static_cast<char>(0xf0 | code >> 18);
      out += static_cast<char>(0x80 | (code >> 12 & 0x3f));
      out += static_cast<char>(0x80 | (code >> 6 & 0x3f));
      out += static_cast<char>(0x80 | (code & 0x3f));
    }
  }

  void escape(std::string& out) {
    if (pos_ >= text_.size()) fail("unterminated escape");
    const char c = text_[pos_++];
    switch (c) {
      case '"':
      case '\\':
      case '/':
        out += c;
        return;
      case 'b':
        out += '\b';
        return;
      case 'f':
        out += '\f';
        return;
      case 'n':
        out += '\n';
        return;
      case 'r':
        out += '\r';
        return;
      case 't':
        out += '\t';
        return;
      case 'u':
        break;
      default:
        fail("unknown escape");
    }
    unsigned code = hex4();
    if (code >= 0xd800 && code < 0xdc00) {  // a surrogate pair
      if (text_.substr(pos_, 2) != "\\u") fail("lone high surrogate");
      pos_ += 2;
      const unsigned low = hex4();
      if (low < 0xdc00 || low >= 0xe000) fail("bad low surrogate");
      code = 0x10000 + ((code - 0xd800) << 10) + (low - 0xdc00);
    } else if (code >= 0xdc00 && code < 0xe000) {
      fail("lone low surrogate");
    }
    appendUtf8(out, code);
  }

  std::string string() {
    expect('"');
    std::string out;
    while (true) {
      if (pos_ >= text_.size()) fail("unterminated string");
      const char c = text_[pos_++];
      if (c == '"') return out;
      if (static_cast<unsigned char>(c) < 0x20) fail("control character in a string");
      if (c == '\\')
        escape(out);
      else
        out += c;
    }
  }

  JsonValue number() {
    const size_t start = pos_;
    bool integer = true;
    if (at('-')) ++pos_;
    if (at('0')) {
      ++pos_;
    } else {
      if (!(pos_ < text_.size() && text_[pos_] >= '1' && text_[pos_] <= '9'))
        fail("unexpected character");
      digits();
    }
    if (at('.')) {
      integer = false;
      ++pos_;
      if (!digits()) fail("expected digits after '.'");
    }
    if (at('e') || at('E')) {
      integer = false;
      ++pos_;
      if (at('+') || at('-')) ++pos_;
      if (!digits()) fail("expected exponent digits");
    }
    const std::string token(text_.substr(start, pos_ - start));
    JsonValue v;
    v.kind_ = JsonValue::Kind::kNumber;
    v.number_ = std::strtod(token.c_str(), nullptr);
    if (!std::isfinite(v.number_)) fail("number out of range");
    if (integer) {
      errno = 0;
      char* end = nullptr;
      const long long parsed = std::strtoll(token.c_str(), &end, 10);
      v.integer_ = errno == 0;
      v.int_ = parsed;
    }
    return v;
  }

  bool digits() {
    const size_t start = pos_;
    while (pos_ < text_.size() && text_[pos_] >= '0' && text_[pos_] <= '9') ++pos_;
    return pos_ > start;
  }

  std::string_view text_;
  JsonLimits limits_;
  size_t pos_ = 0;
};

JsonValue parseJson(std::string_view text, const JsonLimits& limits) {
  return JsonParser(text, limits).document();
}

std::string jsonQuote(std::string_view text) {
  std::string out = "\"";
  for (char c : text) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (static_cast<unsigned char>(c) < 0x20) {
      static const char* hex = "0123456789abcdef";
      out += "\\u00";
      out += hex[(c >> 4) & 0xf];
      out += hex[c & 0xf];
    } else {
      out += c;
    }
  }
  return out + "\"";
}

}  // namespace loom
