// LOOM_DEBUG's levels: NCCL's names in any case, and a clear error for anything else.
#include "base/log.hpp"

#include <gtest/gtest.h>

#include <string>

namespace loom {
namespace {

TEST(LogLevel, AcceptsNcclLevelsInAnyCase) {
  EXPECT_EQ(parseLogLevel("NONE"), LogLevel::kNone);
  EXPECT_EQ(parseLogLevel("version"), LogLevel::kVersion);
  EXPECT_EQ(parseLogLevel("Warn"), LogLevel::kWarn);
  EXPECT_EQ(parseLogLevel("info"), LogLevel::kInfo);
  EXPECT_EQ(parseLogLevel("ABORT"), LogLevel::kAbort);
  EXPECT_EQ(parseLogLevel("trace"), LogLevel::kTrace);
}

TEST(LogLevel, RejectsUnknownLevelNamingTheValidOnes) {
  try {
    parseLogLevel("VERBOSE");
    FAIL() << "VERBOSE accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), loomInvalidArgument);
    std::string message = e.what();
    EXPECT_NE(message.find("LOOM_DEBUG='VERBOSE'"), std::string::npos) << message;
    EXPECT_NE(message.find("NONE, VERSION, WARN, INFO, ABORT or TRACE"), std::string::npos)
        << message;
  }
}

}  // namespace
}  // namespace loom
