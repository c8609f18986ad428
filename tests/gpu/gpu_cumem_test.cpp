// Buffers in cuMem memory (cuMemCreate, as PyTorch's expandable segments and ncclMemAlloc make
// it) beyond the sweeps of gpu_window_test.cpp: a registered buffer that starts inside a later
// physical allocation and crosses into the next, registrations renewed over the same memory, and
// memory that cannot be shared (made without POSIX file descriptor handles), which registration
// refuses with the reason and windows take without using it directly.
#include <cuda_runtime.h>

#include <string>
#include <vector>

#include "gpu_checks.hpp"

namespace loom::gputest {
namespace {

int currentDevice() {
  int device = 0;
  EXPECT_CUDA(cudaGetDevice(&device));
  return device;
}

// Allreduce (sum) of `count` floats at `data`, each rank contributing rank + 1: every element of
// the result must be n (n + 1) / 2. `direct`: whether registration `reg` is used directly.
void allReduceInPlaceAndCheck(loomComm_t comm, float* data, size_t count, bool& direct,
                              loomRegistration_t reg) {
  std::vector<float> host(count, static_cast<float>(gRank + 1));
  ASSERT_CUDA(cudaMemcpy(data, host.data(), count * sizeof(float), cudaMemcpyHostToDevice));
  int d = 0;
  ASSERT_LOOM(loomCommRegistrationIsDirect(comm, reg, &d));
  direct = d == 1;
  cudaStream_t s = nullptr;
  ASSERT_CUDA(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  EXPECT_LOOM(loomAllReduce(data, data, count, loomFloat32, loomSum, comm, s));
  EXPECT_CUDA(cudaStreamSynchronize(s));
  loomResult_t async = loomSuccess;
  EXPECT_LOOM(loomCommGetAsyncError(comm, &async));
  EXPECT_EQ(async, loomSuccess) << loomGetLastError(comm);
  cudaStreamDestroy(s);
  ASSERT_CUDA(cudaMemcpy(host.data(), data, count * sizeof(float), cudaMemcpyDeviceToHost));
  const float want = static_cast<float>(gRanks * (gRanks + 1) / 2);
  size_t wrong = 0, first = count;
  for (size_t i = 0; i < count; ++i) {
    if (host[i] != want) {
      if (first == count) first = i;
      ++wrong;
    }
  }
  EXPECT_EQ(wrong, 0u) << "first wrong element " << first << " of " << count << ": "
                       << (first < count ? host[first] : 0.0f) << ", want " << want;
}

class CuMemComm {
 public:
  CuMemComm() {
    loomConfig_t cfg = LOOM_CONFIG_INITIALIZER;
    cfg.device = "cuda";
    cfg.name = "cumem";
    EXPECT_LOOM(loomCommSplit(gWorld, 0, gRank, &comm_, &cfg));
  }
  ~CuMemComm() {
    if (comm_ != nullptr) {
      EXPECT_LOOM(loomCommDestroy(comm_));
    }
  }
  loomComm_t get() const { return comm_; }

 private:
  loomComm_t comm_ = nullptr;
};

// Three physical allocations; the buffer starts 512 bytes into the second and ends 512 bytes
// before the end of the third; registered three times over (each renewal is mapped anew by the
// peers, from new descriptors).
TEST(CuMemRegistration, ABufferStartingInALaterAllocationIsMappedAndRenewed) {
  if (cpuReferenceMode()) GTEST_SKIP() << "CUDA only";
  CuMemComm comm;
  ASSERT_NE(comm.get(), nullptr);
  const int device = currentDevice();
  CuMemBuffer probe(device, 1);  // learns the granularity
  ASSERT_TRUE(probe.ok()) << probe.error();
  CuMemBuffer three(device, 3 * probe.granularity());
  ASSERT_TRUE(three.ok()) << three.error();
  ASSERT_EQ(three.allocations(), 3u);
  char* start = three.data() + three.granularity() + 512;
  const size_t bytes = 2 * three.granularity() - 1024;
  const size_t count = bytes / sizeof(float);
  for (int round = 0; round < 3; ++round) {
    loomRegistration_t reg = nullptr;
    ASSERT_LOOM(loomCommRegister(comm.get(), start, bytes, &reg));
    bool direct = false;
    allReduceInPlaceAndCheck(comm.get(), reinterpret_cast<float*>(start), count, direct, reg);
    EXPECT_TRUE(direct) << "round " << round << ": the cuMem buffer is not used directly";
    ASSERT_LOOM(loomCommDeregister(comm.get(), reg));
  }
}

// Registration refuses memory it cannot share, on this rank alone and with the reason; a window
// over it is registered on every rank and used as any buffer.
TEST(CuMemRegistration, MemoryWithoutDescriptorHandlesIsRefusedWithTheReason) {
  if (cpuReferenceMode()) GTEST_SKIP() << "CUDA only";
  CuMemComm comm;
  ASSERT_NE(comm.get(), nullptr);
  CuMemBuffer plain(currentDevice(), 1 << 20, /*exportable=*/false);
  ASSERT_TRUE(plain.ok()) << plain.error();
  loomRegistration_t reg = nullptr;
  EXPECT_EQ(loomCommRegister(comm.get(), plain.data(), plain.bytes(), &reg), loomInvalidArgument);
  const std::string message = loomGetLastError(comm.get());
  EXPECT_NE(message.find("CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR"), std::string::npos) << message;
  loomWindow_t window = nullptr;
  ASSERT_LOOM(loomCommWindowRegister(comm.get(), plain.data(), plain.bytes(), &window,
                                     LOOM_WIN_COLL_SYMMETRIC));
  int direct = 1;
  EXPECT_LOOM(loomCommWindowIsDirect(comm.get(), window, &direct));
  EXPECT_EQ(direct, 0);
  // Collectives on it still run (staged through the communicator's own windows).
  const size_t count = plain.bytes() / sizeof(float) / 2;
  std::vector<float> ones(count, 1.0f);
  ASSERT_CUDA(cudaMemcpy(plain.data(), ones.data(), count * sizeof(float), cudaMemcpyHostToDevice));
  cudaStream_t s = nullptr;
  ASSERT_CUDA(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  EXPECT_LOOM(
      loomAllReduce(plain.data(), plain.data(), count, loomFloat32, loomSum, comm.get(), s));
  EXPECT_CUDA(cudaStreamSynchronize(s));
  cudaStreamDestroy(s);
  ASSERT_CUDA(cudaMemcpy(ones.data(), plain.data(), count * sizeof(float), cudaMemcpyDeviceToHost));
  EXPECT_EQ(ones[0], static_cast<float>(gRanks));
  EXPECT_EQ(ones[count - 1], static_cast<float>(gRanks));
  EXPECT_LOOM(loomCommWindowDeregister(comm.get(), window));
}

// A buffer that runs past the memory mapped in its range is a bad argument, not a crash.
TEST(CuMemRegistration, ABufferPastItsMappedMemoryIsABadArgument) {
  if (cpuReferenceMode()) GTEST_SKIP() << "CUDA only";
  CuMemComm comm;
  ASSERT_NE(comm.get(), nullptr);
  CuMemBuffer memory(currentDevice(), 1);
  ASSERT_TRUE(memory.ok()) << memory.error();
  loomRegistration_t reg = nullptr;
  // The range reserved holds only the mapped allocations: one byte more is outside.
  EXPECT_EQ(loomCommRegister(comm.get(), memory.data() + 64, memory.bytes(), &reg),
            loomInvalidArgument);
  EXPECT_NE(std::string(loomGetLastError(comm.get())).find("past the end"), std::string::npos)
      << loomGetLastError(comm.get());
}

}  // namespace
}  // namespace loom::gputest
