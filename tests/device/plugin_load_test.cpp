// Loading device plug-ins: every wrong plug-in is refused with a clear error naming the file and
// the problem (never a crash), two plug-ins live side by side, a kind is provided once, and a
// communicator on a kind without devices fails cleanly. The libraries are tests/device/
// test_plugin.c built once per fault (TEST_PLUGIN_DIR) and the emulated device (EMU_PLUGIN).
#include <gtest/gtest.h>

#include <cstdint>
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
                {"libloom-test-plugin-version.so", "ABI version 99", "implements versions 1 to 2"});
}

TEST(PluginLoad, MissingRequiredEntry) {
  expectRefused(plugin("libloom-test-plugin-missing.so"), loomInvalidArgument,
                {"libloom-test-plugin-missing.so", "required entry memcpyAsync is NULL"});
}

TEST(PluginLoad, FailingInit) {
  expectRefused(plugin("libloom-test-plugin-init.so"), loomSystemError,
                {"libloom-test-plugin-init.so", "init failed", "the test plug-in's own message"});
}

// The loaded plug-in of `kind`, as loomDevicePluginGetInfo reports it.
loomDevicePluginInfo_t infoOf(const std::string& kind) {
  int count = 0;
  EXPECT_EQ(loomDevicePluginCount(&count), loomSuccess) << loomGetLastError(nullptr);
  for (int i = 0; i < count; ++i) {
    loomDevicePluginInfo_t info{};
    EXPECT_EQ(loomDevicePluginGetInfo(i, &info), loomSuccess) << loomGetLastError(nullptr);
    if (kind == info.kind) return info;
  }
  ADD_FAILURE() << "no plug-in of kind " << kind << " among " << count;
  return {};
}

TEST(PluginLoad, TableSize) {
  // A version 1 table that ends before the entries appended to version 1 later (launchHostFunc)
  // is a plug-in built against an older header: it loads, those entries absent. One shorter
  // still is refused, and so is a version 2 table without the torch entries.
  EXPECT_EQ(loomDevicePluginLoad(plugin("libloom-test-plugin-oldsize.so").c_str()), loomSuccess)
      << loomGetLastError(nullptr);
  EXPECT_EQ(infoOf("test-old").torchDeviceType, nullptr);
  expectRefused(plugin("libloom-test-plugin-small.so"), loomInvalidArgument,
                {"libloom-test-plugin-small.so", "its table is 16 bytes", "needs at least"});
  expectRefused(plugin("libloom-test-plugin-v2small.so"), loomInvalidArgument,
                {"libloom-test-plugin-v2small.so", "version 2 needs at least"});
}

TEST(PluginLoad, VersionOneTable) {
  // A plug-in compiled against the version 1 header (loomDevicePlugin_v1, version 1, its size)
  // loads and runs a communicator; it serves no torch device type.
  ASSERT_EQ(loomDevicePluginLoad(plugin("libloom-test-plugin-v1.so").c_str()), loomSuccess)
      << loomGetLastError(nullptr);
  const loomDevicePluginInfo_t info = infoOf("test-v1");
  EXPECT_EQ(info.torchDeviceType, nullptr);
  EXPECT_EQ(info.deviceCount, 0);
  EXPECT_NE(std::string(info.path).find("libloom-test-plugin-v1.so"), std::string::npos);
  loomStream_t stream = nullptr;
  EXPECT_EQ(loomDevicePluginTorchStream("test-v1", 0, 3, &stream), loomInvalidArgument);
  EXPECT_NE(std::string(loomGetLastError(nullptr)).find("serves no torch device type"),
            std::string::npos)
      << loomGetLastError(nullptr);
}

TEST(PluginLoad, TorchEntries) {
  // Version 2: the torch device type, and torch stream ids mapped by the plug-in's entry (the
  // test plug-in's: id + 1) or, without one (the emulated device validates ids itself), by Loom.
  ASSERT_EQ(loomDevicePluginLoad(plugin("libloom-test-plugin.so").c_str()), loomSuccess)
      << loomGetLastError(nullptr);
  EXPECT_STREQ(infoOf("test-dev").torchDeviceType, "test_dev");
  loomStream_t stream = nullptr;
  ASSERT_EQ(loomDevicePluginTorchStream("test-dev", 0, 41, &stream), loomSuccess)
      << loomGetLastError(nullptr);
  EXPECT_EQ(reinterpret_cast<intptr_t>(stream), 42);
  EXPECT_EQ(loomDevicePluginTorchStream("test-dev", 1, 41, &stream), loomInvalidArgument);
  EXPECT_NE(std::string(loomGetLastError(nullptr)).find("torchStream failed"), std::string::npos)
      << loomGetLastError(nullptr);
  EXPECT_EQ(loomDevicePluginTorchStream("no-such-kind", 0, 0, &stream), loomInvalidArgument);
  EXPECT_EQ(loomDevicePluginTorchStream(nullptr, 0, 0, &stream), loomInvalidArgument);
  EXPECT_EQ(loomDevicePluginGetInfo(-1, nullptr), loomInvalidArgument);
  expectRefused(plugin("libloom-test-plugin-badtorch.so"), loomInvalidArgument,
                {"libloom-test-plugin-badtorch.so", "torchDeviceType 'cuda'"});
}

TEST(PluginLoad, BadArguments) {
  EXPECT_EQ(loomDevicePluginLoad(nullptr), loomInvalidArgument);
  EXPECT_EQ(loomDevicePluginLoad(""), loomInvalidArgument);
}

TEST(PluginLoad, TwoPluginsAndOneKindOnce) {
  ASSERT_EQ(loomDevicePluginLoad(EMU_PLUGIN), loomSuccess) << loomGetLastError(nullptr);
  ASSERT_EQ(loomDevicePluginLoad(plugin("libloom-test-plugin.so").c_str()), loomSuccess)
      << loomGetLastError(nullptr);
  EXPECT_STREQ(infoOf("loom-emu").torchDeviceType, "loomemu");
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
