// The strict JSON reader: what it accepts, and that what it refuses fails with a place.
#include "base/json.hpp"

#include <gtest/gtest.h>

#include <string>

#include "base/error.hpp"

namespace loom {
namespace {

std::string errorOf(const std::string& text) {
  try {
    parseJson(text);
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), loomInvalidArgument);
    return e.what();
  }
  return "";
}

TEST(Json, ReadsValuesOfEveryKind) {
  JsonValue v = parseJson(
      R"( {"a": [1, -2.5e1, true, false, null], "s": "x\"\u00e9\ud83d\ude00\n", "o": {}} )");
  ASSERT_TRUE(v.isObject());
  const JsonValue& a = *v.find("a");
  ASSERT_EQ(a.items().size(), 5u);
  EXPECT_TRUE(a.items()[0].isInteger());
  EXPECT_EQ(a.items()[0].integer(), 1);
  EXPECT_FALSE(a.items()[1].isInteger());
  EXPECT_DOUBLE_EQ(a.items()[1].number(), -25.0);
  EXPECT_TRUE(a.items()[2].boolean());
  EXPECT_TRUE(a.items()[4].isNull());
  EXPECT_EQ(v.find("s")->string(), "x\"\xc3\xa9\xf0\x9f\x98\x80\n");
  EXPECT_TRUE(v.find("o")->members().empty());
  EXPECT_EQ(v.find("missing"), nullptr);
}

TEST(Json, RefusesWhatIsNotStrictJson) {
  for (const char* bad :
       {"", "{", "[1,]", "{\"a\":1,}", "{'a':1}", "01", "1.", "-", "nul", "\"\\x\"", "\"\\ud800\"",
        "{\"a\":1} x", "[1 2]", "\"a\nb\"", "{\"a\":1,\"a\":2}", "1e999", "[\"\\u12\"]"})
    EXPECT_NE(errorOf(bad), "") << bad;
  EXPECT_NE(errorOf("[1,]").find("line 1 column 4"), std::string::npos) << errorOf("[1,]");
  EXPECT_NE(errorOf("{\"a\":1,\"a\":2}").find("duplicate member \"a\""), std::string::npos);
}

TEST(Json, BoundsNestingAndSize) {
  std::string deep(100, '[');
  deep += std::string(100, ']');
  EXPECT_NE(errorOf(deep).find("nesting deeper than 64"), std::string::npos);
  JsonLimits small;
  small.maxBytes = 4;
  EXPECT_THROW(parseJson("[1, 2]", small), Error);
  EXPECT_EQ(jsonQuote("a\"b\\\x01"), "\"a\\\"b\\\\\\u0001\"");
}

}  // namespace
}  // namespace loom
