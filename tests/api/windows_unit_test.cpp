// Windows, window memory and buffers registered alone through the C API on host communicators
// (ranks as threads): the calls' argument checks, collective failure on one rank's bad argument,
// and collectives on registered buffers that still give the right results where the device does
// not use them directly. The direct (zero-copy) paths are tested on GPUs in
// tests/gpu/gpu_window_test.cpp.
#include <cstdint>
#include <vector>

#include "api_test_helpers.hpp"

namespace loom::test {
namespace {

#define EXPECT_LOOM_ERROR(call, code) \
  EXPECT_EQ((call), (code)) << #call << ": " << loomGetLastError(nullptr)

void destroyAll(const std::vector<loomComm_t>& comms) {
  for (loomComm_t c : comms) EXPECT_LOOM(loomCommDestroy(c));
}

TEST(Windows, HostCommunicatorRegistersAndCollectivesStayCorrect) {
  const int n = 3;
  std::vector<loomComm_t> comms = initRanks(n);
  onEachRank(comms, [&](int r) {
    loomComm_t comm = comms[r];
    void* mem = nullptr;
    ASSERT_LOOM(loomMemAlloc(comm, &mem, 64 * sizeof(int32_t)));
    ASSERT_NE(mem, nullptr);
    loomWindow_t win = nullptr;
    ASSERT_LOOM(
        loomCommWindowRegister(comm, mem, 64 * sizeof(int32_t), &win, LOOM_WIN_COLL_SYMMETRIC));
    int direct = -1;
    EXPECT_LOOM(loomCommWindowIsDirect(comm, win, &direct));
    EXPECT_EQ(direct, 0);  // host algorithms do not read peers' windows
    auto* buf = static_cast<int32_t*>(mem);
    for (int i = 0; i < 8; ++i) buf[i] = r * 100 + i;
    EXPECT_LOOM(loomAllGather(buf, buf + 8, 8, loomInt32, comm, nullptr));
    for (int q = 0; q < n; ++q)
      for (int i = 0; i < 8; ++i) EXPECT_EQ(buf[8 + q * 8 + i], q * 100 + i);
    EXPECT_LOOM(loomAllReduce(buf, buf, 8, loomInt32, loomSum, comm, nullptr));
    for (int i = 0; i < 8; ++i) EXPECT_EQ(buf[i], 100 * n * (n - 1) / 2 + n * i);
    EXPECT_LOOM(loomCommWindowDeregister(comm, win));
    EXPECT_LOOM(loomMemFree(comm, mem));
  });
  destroyAll(comms);
}

TEST(Windows, BadArgumentsAreRefusedLocally) {
  loomComm_t comm = initSolo();
  loomWindow_t win = nullptr;
  int32_t buf[4];
  EXPECT_LOOM_ERROR(loomCommWindowRegister(comm, buf, sizeof(buf), nullptr, 0),
                    loomInvalidArgument);
  EXPECT_LOOM_ERROR(loomCommWindowRegister(comm, buf, sizeof(buf), &win, 0x40),
                    loomInvalidArgument);
  EXPECT_EQ(win, nullptr);
  EXPECT_LOOM_ERROR(loomCommWindowRegister(nullptr, buf, sizeof(buf), &win, 0),
                    loomInvalidArgument);
  EXPECT_LOOM_ERROR(loomMemAlloc(comm, nullptr, 16), loomInvalidArgument);
  void* mem = reinterpret_cast<void*>(1);
  EXPECT_LOOM_ERROR(loomMemAlloc(comm, &mem, 0), loomInvalidArgument);
  EXPECT_EQ(mem, nullptr);
  EXPECT_LOOM_ERROR(loomCommWindowDeregister(comm, nullptr), loomInvalidArgument);
  int direct = 0;
  EXPECT_LOOM_ERROR(loomCommWindowIsDirect(comm, nullptr, &direct), loomInvalidArgument);
  // A window of another communicator.
  loomComm_t other = initSolo();
  ASSERT_LOOM(loomCommWindowRegister(other, buf, sizeof(buf), &win, 0));
  EXPECT_LOOM_ERROR(loomCommWindowDeregister(comm, win), loomInvalidArgument);
  EXPECT_LOOM_ERROR(loomCommWindowIsDirect(comm, win, &direct), loomInvalidArgument);
  EXPECT_LOOM(loomCommWindowDeregister(other, win));
  EXPECT_LOOM(loomCommDestroy(other));
  // Both communicators still work.
  expectUsable({comm});
  EXPECT_LOOM(loomCommDestroy(comm));
}

TEST(Windows, OneRanksBadBufferFailsTheRegistrationOnEveryRank) {
  const int n = 3;
  std::vector<loomComm_t> comms = initRanks(n);
  std::vector<loomResult_t> results(n, loomSuccess);
  std::vector<std::string> messages(n);
  onEachRank(comms, [&](int r) {
    int32_t buf[16];
    loomWindow_t win = nullptr;
    results[r] = loomCommWindowRegister(comms[r], r == 1 ? nullptr : buf, sizeof(buf), &win,
                                        LOOM_WIN_COLL_SYMMETRIC);
    messages[r] = lastError();
    EXPECT_EQ(win, nullptr);
  });
  for (int r = 0; r < n; ++r) {
    EXPECT_EQ(results[r], loomInvalidArgument) << "rank " << r;
    EXPECT_NE(messages[r].find("rank 1"), std::string::npos) << messages[r];
  }
  // A bad argument leaves the communicators usable.
  expectUsable(comms);
  destroyAll(comms);
}

// Registration alone involves no peer: ranks register different buffers, of different sizes,
// some none at all, and collectives on them stay correct.
TEST(Registrations, HostCommunicatorRegistersAloneAndCollectivesStayCorrect) {
  const int n = 3;
  std::vector<loomComm_t> comms = initRanks(n);
  onEachRank(comms, [&](int r) {
    loomComm_t comm = comms[r];
    std::vector<int32_t> buf(64 + 8 * r);
    int32_t* data = buf.data() + 8 * r;  // another offset on every rank
    loomRegistration_t reg = nullptr;
    if (r != 2) {
      ASSERT_LOOM(loomCommRegister(comm, buf.data(), buf.size() * sizeof(int32_t), &reg));
      ASSERT_NE(reg, nullptr);
      int direct = -1;
      EXPECT_LOOM(loomCommRegistrationIsDirect(comm, reg, &direct));
      EXPECT_EQ(direct, 0);  // host algorithms do not read peers' buffers
    }
    for (int i = 0; i < 8; ++i) data[i] = r * 100 + i;
    EXPECT_LOOM(loomAllGather(data, data + 8, 8, loomInt32, comm, nullptr));
    for (int q = 0; q < n; ++q)
      for (int i = 0; i < 8; ++i) EXPECT_EQ(data[8 + q * 8 + i], q * 100 + i);
    EXPECT_LOOM(loomAllReduce(data, data, 8, loomInt32, loomSum, comm, nullptr));
    for (int i = 0; i < 8; ++i) EXPECT_EQ(data[i], 100 * n * (n - 1) / 2 + n * i);
    if (reg != nullptr) {
      EXPECT_LOOM(loomCommDeregister(comm, reg));
    }
  });
  destroyAll(comms);
}

TEST(Registrations, BadArgumentsAreRefusedLocally) {
  loomComm_t comm = initSolo();
  loomRegistration_t reg = nullptr;
  int32_t buf[4];
  EXPECT_LOOM_ERROR(loomCommRegister(comm, buf, sizeof(buf), nullptr), loomInvalidArgument);
  EXPECT_LOOM_ERROR(loomCommRegister(comm, nullptr, sizeof(buf), &reg), loomInvalidArgument);
  EXPECT_LOOM_ERROR(loomCommRegister(comm, buf, 0, &reg), loomInvalidArgument);
  EXPECT_LOOM_ERROR(loomCommRegister(nullptr, buf, sizeof(buf), &reg), loomInvalidArgument);
  EXPECT_EQ(reg, nullptr);
  EXPECT_LOOM_ERROR(loomCommDeregister(comm, nullptr), loomInvalidArgument);
  int direct = 0;
  EXPECT_LOOM_ERROR(loomCommRegistrationIsDirect(comm, nullptr, &direct), loomInvalidArgument);
  // A registration of another communicator, and a window passed as one.
  loomComm_t other = initSolo();
  ASSERT_LOOM(loomCommRegister(other, buf, sizeof(buf), &reg));
  EXPECT_LOOM_ERROR(loomCommDeregister(comm, reg), loomInvalidArgument);
  EXPECT_LOOM_ERROR(loomCommRegistrationIsDirect(comm, reg, &direct), loomInvalidArgument);
  EXPECT_LOOM_ERROR(loomCommRegistrationIsDirect(other, reg, nullptr), loomInvalidArgument);
  loomWindow_t win = nullptr;
  ASSERT_LOOM(loomCommWindowRegister(other, buf, sizeof(buf), &win, 0));
  EXPECT_LOOM_ERROR(loomCommDeregister(other, reinterpret_cast<loomRegistration_t>(win)),
                    loomInvalidArgument);
  EXPECT_LOOM(loomCommWindowDeregister(other, win));
  EXPECT_LOOM(loomCommDeregister(other, reg));
  EXPECT_LOOM(loomCommDestroy(other));
  expectUsable({comm});
  EXPECT_LOOM(loomCommDestroy(comm));
}

}  // namespace
}  // namespace loom::test
