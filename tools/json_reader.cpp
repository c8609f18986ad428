#include "json_reader.hpp"

#include <cstdlib>
#include <stdexcept>

namespace loom::tool {

class JsonParser {
 public:
  explicit JsonParser(const std::string& text) : text_(text) {}

  Json document() {
    Json value = parse(0);
    skipSpace();
    if (at_ != text_.size()) fail("trailing characters");
    return value;
  }

 private:
  static constexpr int kMaxDepth = 64;

  [[noreturn]] void fail(const char* what) const {
    throw std::runtime_error(std::string("malformed JSON at offset ") + std::to_string(at_) + ": " +
                             what);
  }
  void skipSpace() {
    while (at_ < text_.size() &&
           (text_[at_] == ' ' || text_[at_] == '\n' || text_[at_] == '\r' || text_[at_] == '\t'))
      ++at_;
  }
  bool take(char c) {
    skipSpace();
    if (at_ < text_.size() && text_[at_] == c) {
      ++at_;
      return true;
    }
    return false;
  }
  void expect(char c) {
    if (!take(c)) fail("unexpected character");
  }
  bool word(const char* w) {
    const std::string s(w);
    if (text_.compare(at_, s.size(), s) != 0) return false;
    at_ += s.size();
    return true;
  }

  Json parse(int depth) {
    if (depth > kMaxDepth) fail("nested too deeply");
    skipSpace();
    if (at_ >= text_.size()) fail("unexpected end");
    Json v;
    const char c = text_[at_];
    if (c == '{') {
      ++at_;
      v.type_ = Json::Type::kObject;
      if (take('}')) return v;
      do {
        skipSpace();
        if (at_ >= text_.size() || text_[at_] != '"') fail("expected a key");
        std::string key = string();
        expect(':');
        v.members_[key] = parse(depth + 1);
      } while (take(','));
      expect('}');
    } else if (c == '[') {
      ++at_;
      v.type_ = Json::Type::kArray;
      if (take(']')) return v;
      do {
        v.items_.push_back(parse(depth + 1));
      } while (take(','));
      expect(']');
    } else if (c == '"') {
      v.type_ = Json::Type::kString;
      v.string_ = string();
    } else if (word("true")) {
      v.type_ = Json::Type::kBool;
      v.boolean_ = true;
    } else if (word("false")) {
      v.type_ = Json::Type::kBool;
    } else if (word("null")) {
    } else {
      const char* begin = text_.c_str() + at_;
      char* end = nullptr;
      v.number_ = std::strtod(begin, &end);
      if (end == begin) fail("expected a value");
      v.type_ = Json::Type::kNumber;
      at_ += static_cast<size_t>(end - begin);
    }
    return v;
  }

  std::string string() {
    ++at_;  // the opening quote
    std::string out;
    while (at_ < text_.size() && text_[at_] != '"') {
      char c = text_[at_++];
      if (c != '\\') {
        out += c;
        continue;
      }
      if (at_ >= text_.size()) fail("unfinished escape");
      c = text_[at_++];
      switch (c) {
        case 'n':
          out += '\n';
          break;
        case 't':
          out += '\t';
          break;
        case 'r':
          out += '\r';
          break;
        case 'b':
          out += '\b';
          break;
        case 'f':
          out += '\f';
          break;
        case 'u': {
          if (at_ + 4 > text_.size()) fail("short \\u escape");
          const unsigned code =
              static_cast<unsigned>(std::strtoul(text_.substr(at_, 4).c_str(), nullptr, 16));
          at_ += 4;
          out += code < 0x80 ? static_cast<char>(code) : '?';  // the tools write ASCII only
          break;
        }
        default:
          out += c;
      }
    }
    if (at_ >= text_.size()) fail("unfinished string");
    ++at_;
    return out;
  }

  const std::string& text_;
  size_t at_ = 0;
};

Json Json::parse(const std::string& text) { return JsonParser(text).document(); }

const Json& Json::operator[](const std::string& key) const {
  static const Json null;
  auto it = members_.find(key);
  return it == members_.end() ? null : it->second;
}

}  // namespace loom::tool
