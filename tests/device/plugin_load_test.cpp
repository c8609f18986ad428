// Loading device plug-ins: every wrong plug-in is refused with a clear error naming the file and
// the problem (never a crash), two plug-ins live side by side, a kind is provided once, and a
// communicator on a kind without devices fails cleanly. The libraries are tests/device/
// test_plugin.c built once per fault (TEST_PLUGIN_DIR) and the emulated device (EMU_PLUGIN).
#include <gtest/gtest.h>

#include <string>

#include "loom/loom.h"
#include "loom/loom_device_plugin.h"

namespace {

std::string plugin(const char* name) { return std::string(TEST_PLUGIN_DIR) + "/" + name; }

// Loads `path`, expects `code` and a message containing every one of `words`.
void expectRefused(const std::string& path, loomResult_t code,
                   std::initializer_list<const char*> words) {
  EXPECT_EQ(loomDevicePluginLoad(path.c_str()), code) << path;
  std::string why = loomGetLastError(nullptr);
  for (const char* w : words) EXPECT_NE(why.find(w), std::string::npos) << why;
}

TEST(PluginLoad, MissingFile) {
  expectRefused(plugin("no-such-plugin.so"), loomInvalidArgument,
                {"no-such-plugin.so", "cannot load it"});
}

TEST(PluginLoad, NotAPlugin) {
  expectRefused(plugin("libloom-test-plugin-nosymbol.so"), loomInvalidArgument,
                {"libloom-test-plugin-nosymbol.so", "exports no loomDevicePluginEntry"});
}

TEST(PluginLoad, WrongVersion) {
  expectRefused(plugin("libloom-test-plugin-version.so"), loomInvalidArgument,
                {"libloom-test-plugin-version.so", "ABI version 99", "implements version 1"});
}

TEST(PluginLoad, MissingRequiredEntry) {
  expectRefused(plugin("libloom-test-plugin-missing.so"), loomInvalidArgument,
                {"libloom-test-plugin-missing.so", "required entry memcpyAsync is NULL"});
}

TEST(PluginLoad, FailingInit) {
  expectRefused(plugin("libloom-test-plugin-init.so"), loomSystemError,
                {"libloom-test-plugin-init.so", "init failed", "the test plug-in's own message"});
}

TEST(PluginLoad, TableSize) {
  // A table that ends before the entries appended to version 1 later (launchHostFunc) is a plug-in
  // built against an older header: it loads, those entries absent. One shorter still is refused.
  EXPECT_EQ(loomDevicePluginLoad(plugin("libloom-test-plugin-oldsize.so").c_str()), loomSuccess)
      << loomGetLastError(nullptr);
  expectRefused(plugin("libloom-test-plugin-small.so"), loomInvalidArgument,
                {"libloom-test-plugin-small.so", "its table is 16 bytes", "needs at least"});
}

TEST(PluginLoad, BadArguments) {
  EXPECT_EQ(loomDevicePluginLoad(nullptr), loomInvalidArgument);
  EXPECT_EQ(loomDevicePluginLoad(""), loomInvalidArgument);
}

TEST(PluginLoad, TwoPluginsAndOneKindOnce) {
  ASSERT_EQ(loomDevicePluginLoad(EMU_PLUGIN), loomSuccess) << loomGetLastError(nullptr);
  ASSERT_EQ(loomDevicePluginLoad(plugin("libloom-test-plugin.so").c_str()), loomSuccess)
      << loomGetLastError(nullptr);
  // The same file again is a no-op; another file with a kind already known is refused.
  EXPECT_EQ(loomDevicePluginLoad(EMU_PLUGIN), loomSuccess);
  expectRefused(plugin("libloom-test-plugin-emukind.so"), loomInvalidArgument,
                {"kind 'loom-emu' is already provided by", EMU_PLUGIN});

  // A communicator of one rank on each: the emulated device works, the kind without devices
  // and an unknown kind fail with loomInvalidArgument and say why.
  auto initOn = [](const char* device, loomComm_t* comm) {
    loomUniqueId id;
    EXPECT_EQ(loomGetUniqueId(&id), loomSuccess);
    loomConfig_t config = LOOM_CONFIG_INITIALIZER;
    config.device = device;
    return loomCommInitRankConfig(comm, 1, id, 0, &config);
  };
  loomComm_t comm = nullptr;
  ASSERT_EQ(initOn("loom-emu:1", &comm), loomSuccess) << loomGetLastError(nullptr);
  EXPECT_EQ(loomCommDestroy(comm), loomSuccess);
  EXPECT_EQ(initOn("test-dev", &comm), loomInvalidArgument);
  EXPECT_NE(std::string(loomGetLastError(nullptr)).find("has 0 device(s)"), std::string::npos)
      << loomGetLastError(nullptr);
  EXPECT_EQ(initOn("no-such-kind:0", &comm), loomInvalidArgument);
  std::string why = loomGetLastError(nullptr);
  EXPECT_NE(why.find("unknown device 'no-such-kind:0'"), std::string::npos) << why;
  EXPECT_NE(why.find("loom-emu"), std::string::npos) << why;
  EXPECT_NE(why.find("test-dev"), std::string::npos) << why;
}

}  // namespace
