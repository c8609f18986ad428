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

namespace loom {
namespace {

// NCCL_DEBUG_SUBSYS's syntax: a comma list in any case, ^ for all but those; by default every
// subsystem but COLL, whose lines come once per call.
TEST(LogSubsys, DefaultLeavesOutThePerCallLines) {
  EXPECT_EQ(parseLogSubsys(""), static_cast<unsigned>(kSubsysDefault));
  EXPECT_EQ(parseLogSubsys("") & kSubsysColl, 0u);
  EXPECT_NE(parseLogSubsys("") & kSubsysInit, 0u);
  EXPECT_NE(parseLogSubsys("") & kSubsysNet, 0u);
}

TEST(LogSubsys, NamesInAnyCaseAndInverted) {
  EXPECT_EQ(parseLogSubsys("coll"), static_cast<unsigned>(kSubsysColl));
  EXPECT_EQ(parseLogSubsys(" Init , COLL "), static_cast<unsigned>(kSubsysInit | kSubsysColl));
  EXPECT_EQ(parseLogSubsys("tuning"), static_cast<unsigned>(kSubsysTune));  // NCCL's spelling
  EXPECT_EQ(parseLogSubsys("all"), static_cast<unsigned>(kSubsysAll));
  EXPECT_EQ(parseLogSubsys("^coll"), kSubsysAll & ~kSubsysColl);
  EXPECT_EQ(parseLogSubsys("^init,net") & (kSubsysInit | kSubsysNet), 0u);
  EXPECT_NE(parseLogSubsys("^init,net") & kSubsysColl, 0u);
}

TEST(LogSubsys, UnknownNameIsRefusedNamingTheValidOnes) {
  try {
    parseLogSubsys("INIT,COLLS");
    FAIL() << "COLLS accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), loomInvalidArgument);
    const std::string message = e.what();
    EXPECT_NE(message.find("LOOM_DEBUG_SUBSYS='INIT,COLLS': 'COLLS' is not a subsystem"),
              std::string::npos)
        << message;
    EXPECT_NE(message.find("INIT, COLL, NET, BOOTSTRAP, SHM, TUNE or ALL"), std::string::npos)
        << message;
  }
}

// NCCL_DEBUG_FILE's substitutions.
TEST(LogFile, HostAndPidAreSubstituted) {
  EXPECT_EQ(expandLogFileName("/tmp/loom.%h.%p.log", "node7", 4242), "/tmp/loom.node7.4242.log");
  EXPECT_EQ(expandLogFileName("100%%-%x-%", "h", 1), "100%-%x-%");
  EXPECT_EQ(expandLogFileName("plain", "h", 1), "plain");
}

}  // namespace
}  // namespace loom
