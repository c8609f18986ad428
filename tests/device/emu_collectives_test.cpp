// Every collective x data type (see kTypePerSize, composedRunCovers) x op x in-place/out-of-place
// x odd size on communicators of emulated-accelerator ranks (plugins/device/emu, loaded through
// LOOM_DEVICE_PLUGIN), compared bit for bit with the same reference as the CPU suite. Buffers are
// the plug-in's device memory, which the host cannot read: the test moves data only through the
// plug-in's own copies, as a program on a real accelerator would. Run by every rank under loomrun;
// the ctest entries run it with the plug-in's optional entries on (shared-memory algorithms with
// the device's own copies and reductions) and off (LOOM_EMU_DISABLE: staged through host memory,
// reduced on the host), and on fake nodes (staged over TCP). The execution plans' tests are in
// emu_plans_test.cpp; what both share, emu_test_env.hpp.
#include <dlfcn.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <numeric>
#include <string>
#include <thread>
#include <vector>

#include "emu_test_env.hpp"

namespace loom::test {
namespace {

TEST(EmuCollectives, Reductions) {
  for (const Config& c : configs()) {
    EmuComm ec(c);
    ASSERT_NE(ec.comm, nullptr);
    for (int ti = 0; ti < loomNumTypes; ++ti) {
      auto t = static_cast<loomDataType_t>(ti);
      const size_t es = dtypeSize(t);
      for (loomRedOp_t op : kOps) {
        if (!composedRunCovers(t, op)) continue;
        Pattern input = Pattern::input(t, op, gRank), reduced = Pattern::reduced(t, op, gRanks);
        for (size_t n : c.sizes) {
          if (n > 5000 && t != loomFloat32 && t != loomBfloat16) continue;  // one size does it
          if (!atLargeSize(op, n)) continue;
          for (bool inPlace : {false, true}) {
            const int root = static_cast<int>((ti + static_cast<int>(op) + n) % gRanks);
            std::vector<char> host(n * es * gRanks + 1);
            // allreduce and reduce
            DeviceBuffer send(n * es * gRanks), recv(n * es * gRanks);
            input.fill(host.data(), n);
            send.upload(host);
            char* out = inPlace ? send.get() : recv.get();
            EXPECT_LOOM(loomAllReduce(send.get(), out, n, t, op, ec.comm, nullptr));
            expectMatch(reduced, (inPlace ? send : recv).download(), 0, n, 0,
                        what("allreduce", c, t, op, inPlace, n));
            send.upload(host);
            EXPECT_LOOM(loomReduce(send.get(), out, n, t, op, root, ec.comm, nullptr));
            if (gRank == root)
              expectMatch(reduced, (inPlace ? send : recv).download(), 0, n, 0,
                          what("reduce", c, t, op, inPlace, n));
            // reduce-scatter: block i of the input is the sequence from i*n.
            input.fill(host.data(), n * gRanks);
            send.upload(host);
            char* rsOut = inPlace ? send.get() + gRank * n * es : recv.get();
            EXPECT_LOOM(loomReduceScatter(send.get(), rsOut, n, t, op, ec.comm, nullptr));
            expectMatch(reduced, (inPlace ? send : recv).download(), inPlace ? gRank * n * es : 0,
                        n, gRank * n, what("reducescatter", c, t, op, inPlace, n));
          }
        }
      }
    }
  }
}

TEST(EmuCollectives, DataMovement) {
  for (const Config& c : configs()) {
    EmuComm ec(c);
    ASSERT_NE(ec.comm, nullptr);
    for (loomDataType_t t : kTypePerSize) {
      const int ti = static_cast<int>(t);
      const size_t es = dtypeSize(t);
      for (size_t n : c.sizes) {
        if (n > 5000 && t != loomFloat32) continue;
        for (bool inPlace : {false, true}) {
          const int root = static_cast<int>((ti + n) % gRanks);
          const size_t all = n * gRanks;
          std::vector<char> host(all * es + 1);
          DeviceBuffer send(all * es), recv(all * es);
          const std::string label = std::string(c.name) + " " + dtypeName(t) + " count " +
                                    std::to_string(n) + (inPlace ? " in-place" : "");
          // allgather / gather: rank r contributes the sequence from r*n.
          Pattern mine = Pattern::input(t, loomSum, 0);
          mine.fill(host.data(), n, gRank * n);
          char* agSend = inPlace ? recv.get() + gRank * n * es : send.get();
          if (inPlace) {
            std::vector<char> full(all * es + 1);
            mine.fill(full.data() + gRank * n * es, n, gRank * n);
            recv.upload(full);
          } else {
            send.upload(host);
          }
          EXPECT_LOOM(loomAllGather(agSend, recv.get(), n, t, ec.comm, nullptr));
          expectMatch(mine, recv.download(), 0, all, 0, "allgather " + label);
          if (!inPlace) {
            EXPECT_LOOM(loomGather(send.get(), recv.get(), n, t, root, ec.comm, nullptr));
            if (gRank == root) expectMatch(mine, recv.download(), 0, all, 0, "gather " + label);
          }
          // broadcast and scatter from the root.
          Pattern rootData = Pattern::input(t, loomSum, root);
          if (gRank == root) {
            rootData.fill(host.data(), all);
            send.upload(host);
          }
          char* bOut = inPlace ? send.get() : recv.get();
          EXPECT_LOOM(loomBroadcast(send.get(), bOut, n, t, root, ec.comm, nullptr));
          expectMatch(rootData, (inPlace ? send : recv).download(), 0, n, 0, "bcast " + label);
          if (gRank == root) send.upload(host);
          EXPECT_LOOM(loomScatter(send.get(), recv.get(), n, t, root, ec.comm, nullptr));
          expectMatch(rootData, recv.download(), 0, n, gRank * n, "scatter " + label);
          if (inPlace) continue;
          // alltoall: block j of rank r's input is the sequence from (r*ranks + j)*n.
          mine.fill(host.data(), all, gRank * all);
          send.upload(host);
          EXPECT_LOOM(loomAllToAll(send.get(), recv.get(), n, t, ec.comm, nullptr));
          std::vector<char> got = recv.download();
          for (int j = 0; j < gRanks; ++j)
            expectMatch(mine, got, j * n * es, n, (j * gRanks + gRank) * n, "alltoall " + label);
          // alltoallv with the alltoall layout, counts n (self) and n/2 + j (others).
          std::vector<size_t> counts(gRanks), displs(gRanks);
          for (int j = 0; j < gRanks; ++j) {
            counts[j] = j == gRank ? n : std::min(n, n / 2 + j);
            displs[j] = j * n;
          }
          std::vector<size_t> rcounts(gRanks);
          for (int j = 0; j < gRanks; ++j) rcounts[j] = j == gRank ? n : std::min(n, n / 2 + gRank);
          EXPECT_LOOM(loomAllToAllv(send.get(), counts.data(), displs.data(), recv.get(),
                                    rcounts.data(), displs.data(), t, ec.comm, nullptr));
          got = recv.download();
          for (int j = 0; j < gRanks; ++j)
            expectMatch(mine, got, j * n * es, rcounts[j], (j * gRanks + gRank) * n,
                        "alltoallv " + label);
        }
      }
    }
    EXPECT_LOOM(loomBarrier(ec.comm, nullptr));
  }
}

TEST(EmuCollectives, SendRecvRingInAGroup) {
  EmuComm ec(configs()[0]);
  ASSERT_NE(ec.comm, nullptr);
  const int right = (gRank + 1) % gRanks, left = (gRank + gRanks - 1) % gRanks;
  for (size_t n : {size_t{0}, size_t{7}, size_t{300001}}) {
    std::vector<char> host(n * 4 + 1);
    Pattern mine = Pattern::input(loomFloat32, loomSum, gRank);
    mine.fill(host.data(), n);
    DeviceBuffer send(n * 4), recv(n * 4);
    send.upload(host);
    // Receive posted first: the group makes the order irrelevant.
    EXPECT_LOOM(loomGroupStart());
    EXPECT_LOOM(loomRecv(recv.get(), n, loomFloat32, left, ec.comm, nullptr));
    EXPECT_LOOM(loomSend(send.get(), n, loomFloat32, right, ec.comm, nullptr));
    EXPECT_LOOM(loomGroupEnd());
    expectMatch(Pattern::input(loomFloat32, loomSum, left), recv.download(), 0, n, 0,
                "sendrecv count " + std::to_string(n));
  }
}

TEST(EmuCollectives, TaggedSendRecvMatchByTag) {
  // Staged device point-to-point goes through the host P2PEngine with the group's tags: receives
  // posted in the other order than their sends match by tag, not by arrival (the tag was dropped
  // on staged devices before, and the first receive got the other message).
  if (allGpu()) GTEST_SKIP() << "a CUDA communicator's sends and receives ignore tags";
  EmuComm ec(configs()[0]);
  ASSERT_NE(ec.comm, nullptr);
  if (gRanks < 2) GTEST_SKIP() << "needs a peer";
  const int right = (gRank + 1) % gRanks, left = (gRank + gRanks - 1) % gRanks;
  const size_t small = 1000, large = 200003;  // large: more than a channel's buffer
  std::vector<char> host(large * 4 + 1);
  Pattern mine = Pattern::input(loomFloat32, loomSum, gRank);
  mine.fill(host.data(), large);
  DeviceBuffer sendSmall(small * 4), sendLarge(large * 4), recvSmall(small * 4),
      recvLarge(large * 4);
  sendSmall.upload(std::vector<char>(host.begin(), host.begin() + small * 4));
  sendLarge.upload(host);
  EXPECT_LOOM(loomGroupStart());
  EXPECT_LOOM(loomRecvTag(recvLarge.get(), large, loomFloat32, left, 9, ec.comm, nullptr));
  EXPECT_LOOM(loomRecvTag(recvSmall.get(), small, loomFloat32, left, 5, ec.comm, nullptr));
  EXPECT_LOOM(loomSendTag(sendSmall.get(), small, loomFloat32, right, 5, ec.comm, nullptr));
  EXPECT_LOOM(loomSendTag(sendLarge.get(), large, loomFloat32, right, 9, ec.comm, nullptr));
  EXPECT_LOOM(loomGroupEnd());
  Pattern theirs = Pattern::input(loomFloat32, loomSum, left);
  expectMatch(theirs, recvSmall.download(), 0, small, 0, "tag 5");
  expectMatch(theirs, recvLarge.download(), 0, large, 0, "tag 9");
}

TEST(EmuCollectives, GroupWithACollectiveBetweenReceiveAndSend) {
  // Every rank: receive from the left, allreduce, send to the right, in one group. The staged
  // sends and receives must progress while the allreduce runs (waiting for the receive before the
  // allreduce deadlocked: no rank got to its send).
  EmuComm ec(configs()[0]);
  ASSERT_NE(ec.comm, nullptr);
  if (gRanks < 2) GTEST_SKIP() << "needs a peer";
  const int right = (gRank + 1) % gRanks, left = (gRank + gRanks - 1) % gRanks;
  const size_t n = 70001;
  std::vector<char> host(n * 4 + 1);
  Pattern::input(loomFloat32, loomSum, gRank).fill(host.data(), n);
  DeviceBuffer send(n * 4), recv(n * 4), reduced(n * 4);
  send.upload(host);
  reduced.upload(host);
  EXPECT_LOOM(loomGroupStart());
  EXPECT_LOOM(loomRecv(recv.get(), n, loomFloat32, left, ec.comm, nullptr));
  EXPECT_LOOM(
      loomAllReduce(reduced.get(), reduced.get(), n, loomFloat32, loomSum, ec.comm, nullptr));
  EXPECT_LOOM(loomSend(send.get(), n, loomFloat32, right, ec.comm, nullptr));
  EXPECT_LOOM(loomGroupEnd());
  expectMatch(Pattern::input(loomFloat32, loomSum, left), recv.download(), 0, n, 0,
              "the group's receive");
  expectMatch(Pattern::reduced(loomFloat32, loomSum, gRanks), reduced.download(), 0, n, 0,
              "the group's allreduce");
}

TEST(EmuCollectives, NonBlockingOnHostBuffers) {
  // The ranks that pass host buffers (C, and H: an emulated-device rank of a heterogeneous
  // communicator) post loomIrecv before loomIsend around a ring of their own.
  std::vector<int> ring;
  for (int r = 0; r < gRanks; ++r)
    if (gPlacement[r] == 'C' || gPlacement[r] == 'H') ring.push_back(r);
  if (ring.size() < 2 || ring.size() == gPlacement.size())
    GTEST_SKIP() << "needs host-buffer ranks in a heterogeneous communicator";
  EmuComm ec(configs()[0]);
  ASSERT_NE(ec.comm, nullptr);
  const auto self = std::find(ring.begin(), ring.end(), gRank);
  if (self == ring.end()) return;
  const size_t i = self - ring.begin(), k = ring.size();
  const int right = ring[(i + 1) % k], left = ring[(i + k - 1) % k];
  const size_t n = 100003;
  std::vector<float> out(n), in(n, -1.0f);
  Pattern::input(loomFloat32, loomSum, gRank).fill(out.data(), n);
  loomRequest_t recv = nullptr, send = nullptr;
  EXPECT_LOOM(loomIrecv(in.data(), n, loomFloat32, left, 3, ec.comm, &recv));
  EXPECT_LOOM(loomIsend(out.data(), n, loomFloat32, right, 3, ec.comm, &send));
  EXPECT_LOOM(loomWait(recv));
  EXPECT_LOOM(loomWait(send));
  EXPECT_LOOM(loomRequestFree(recv));
  EXPECT_LOOM(loomRequestFree(send));
  EXPECT_EQ(Pattern::input(loomFloat32, loomSum, left).firstMismatch(in.data(), n, 0), -1);
}

// A host function the test enqueues on its own stream: holds the stream until `open` is set.
void holdStream(void* open) {
  auto* flag = static_cast<std::atomic<bool>*>(open);
  while (!flag->load()) std::this_thread::sleep_for(std::chrono::microseconds(100));
}

// The test's own stream on an E or G rank, with the operations a program would enqueue on it.
class UserStream {
 public:
  UserStream() {
#ifdef LOOM_HAVE_CUDA
    if (onGpu()) {
      EXPECT_EQ(cudaStreamCreateWithFlags(&cuda_, cudaStreamNonBlocking), cudaSuccess);
      EXPECT_EQ(cudaEventCreateWithFlags(&cudaEvent_, cudaEventDisableTiming), cudaSuccess);
      return;
    }
#endif
    EXPECT_EQ(gPlugin->streamCreate(0, &emu_), loomSuccess);
    EXPECT_EQ(gPlugin->eventCreate(0, &emuEvent_), loomSuccess);
  }
  ~UserStream() {
#ifdef LOOM_HAVE_CUDA
    if (onGpu()) {
      for (void* p : pinned_) cudaHostUnregister(p);
      cudaEventDestroy(cudaEvent_);
      cudaStreamDestroy(cuda_);
      return;
    }
#endif
    gPlugin->eventDestroy(0, emuEvent_);
    gPlugin->streamDestroy(0, emu_);
  }
  loomStream_t handle() const {
#ifdef LOOM_HAVE_CUDA
    if (onGpu()) return reinterpret_cast<loomStream_t>(cuda_);
#endif
    return emu_;
  }
  void hold(std::atomic<bool>& open) {
#ifdef LOOM_HAVE_CUDA
    if (onGpu()) {
      EXPECT_EQ(cudaLaunchHostFunc(cuda_, holdStream, &open), cudaSuccess);
      return;
    }
#endif
    EXPECT_EQ(gPlugin->launchHostFunc(0, emu_, holdStream, &open), loomSuccess);
  }
  // CUDA copies between a device and pageable host memory may wait for the stream (the driver
  // stages them), and this stream is held until after the copies are enqueued: on a G rank the
  // host side of every copy is page-locked first, as a program overlapping copies does.
  void pin(std::vector<char>& host) {
#ifdef LOOM_HAVE_CUDA
    if (onGpu()) {
      EXPECT_EQ(cudaHostRegister(host.data(), host.size(), cudaHostRegisterDefault), cudaSuccess);
      pinned_.push_back(host.data());
    }
#endif
    (void)host;
  }
  void copy(void* dst, const void* src, size_t bytes, bool toDevice) {
#ifdef LOOM_HAVE_CUDA
    if (onGpu()) {
      EXPECT_EQ(cudaMemcpyAsync(dst, src, bytes,
                                toDevice ? cudaMemcpyHostToDevice : cudaMemcpyDeviceToHost, cuda_),
                cudaSuccess);
      return;
    }
#endif
    EXPECT_EQ(
        gPlugin->memcpyAsync(0, dst, src, bytes,
                             toDevice ? loomMemcpyHostToDevice : loomMemcpyDeviceToHost, emu_),
        loomSuccess);
  }
  void record() {
#ifdef LOOM_HAVE_CUDA
    if (onGpu()) {
      EXPECT_EQ(cudaEventRecord(cudaEvent_, cuda_), cudaSuccess);
      return;
    }
#endif
    EXPECT_EQ(gPlugin->eventRecord(0, emuEvent_, emu_), loomSuccess);
  }
  bool recordedDone() {
#ifdef LOOM_HAVE_CUDA
    if (onGpu()) return cudaEventQuery(cudaEvent_) == cudaSuccess;
#endif
    int done = 0;
    EXPECT_EQ(gPlugin->eventQuery(0, emuEvent_, &done), loomSuccess);
    return done != 0;
  }
  void synchronize() {
#ifdef LOOM_HAVE_CUDA
    if (onGpu()) {
      EXPECT_EQ(cudaStreamSynchronize(cuda_), cudaSuccess);
      return;
    }
#endif
    EXPECT_EQ(gPlugin->streamSynchronize(0, emu_), loomSuccess);
  }

 private:
  loomStream_t emu_ = nullptr;
  loomDevEvent_t emuEvent_ = nullptr;
#ifdef LOOM_HAVE_CUDA
  cudaStream_t cuda_ = nullptr;
  cudaEvent_t cudaEvent_ = nullptr;
  std::vector<void*> pinned_;
#endif
};

TEST(EmuCollectives, StreamOrder) {
  // On device ranks (E, G) a call returns once enqueued and completes in the order of the
  // caller's stream: the test holds its stream closed (a host function of its own) and, behind
  // it, uploads the input, then makes four calls without synchronizing: a small allreduce, a
  // large one (Loom's staging memory grows while the first is in flight), an allgather of the
  // large one's output, and a broadcast of it on another stream (the default one); then it
  // overwrites the input and downloads the outputs on its stream. Every call returns while the
  // stream is still held (a call that waited for its stream would never return), and once the
  // stream runs the results are those of the input uploaded before the calls, bit for bit. C
  // ranks make the same calls on host memory.
  if (gPlugin->launchHostFunc == nullptr) GTEST_SKIP() << "the plug-in runs no host functions";
  EmuComm ec(configs()[0]);
  ASSERT_NE(ec.comm, nullptr);
  const size_t n = (size_t{3} << 18) + 5, m = 4099;  // several chunks; a part of them
  const Pattern input = Pattern::input(loomFloat32, loomSum, gRank);
  const Pattern reduced = Pattern::reduced(loomFloat32, loomSum, gRanks);
  std::vector<char> in(n * 4 + 1), garbage(n * 4 + 1, 0x7f);
  input.fill(in.data(), n);
  DeviceBuffer send(n * 4), small(m * 4), recv(n * 4), gathered(m * 4 * gRanks), bcast(m * 4);
  std::vector<char> out(n * 4 + 1), outSmall(m * 4 + 1), outGathered(m * 4 * gRanks + 1);
  const bool device = onEmu() || onGpu();
  std::unique_ptr<UserStream> stream;
  std::atomic<bool> open{false};
  if (device) {
    stream = std::make_unique<UserStream>();
    for (std::vector<char>* host : {&in, &garbage, &out, &outSmall, &outGathered})
      stream->pin(*host);
    stream->hold(open);
    stream->copy(send.get(), in.data(), n * 4, true);
  } else {
    send.upload(in);
  }
  loomStream_t s = device ? stream->handle() : nullptr;
  const int root = gRanks - 1;
  EXPECT_LOOM(loomAllReduce(send.get(), small.get(), m, loomFloat32, loomSum, ec.comm, s));
  EXPECT_LOOM(loomAllReduce(send.get(), recv.get(), n, loomFloat32, loomSum, ec.comm, s));
  EXPECT_LOOM(loomAllGather(recv.get(), gathered.get(), m, loomFloat32, ec.comm, s));
  EXPECT_LOOM(loomBroadcast(recv.get(), bcast.get(), m, loomFloat32, root, ec.comm, nullptr));
  if (device) {
    stream->record();
    EXPECT_FALSE(stream->recordedDone()) << "the calls returned: the stream is held before them";
    // Work after the calls: the input overwritten (the calls read it before), outputs read.
    stream->copy(send.get(), garbage.data(), n * 4, true);
    stream->copy(out.data(), recv.get(), n * 4, false);
    stream->copy(outSmall.data(), small.get(), m * 4, false);
    stream->copy(outGathered.data(), gathered.get(), m * 4 * gRanks, false);
    open.store(true);
    stream->synchronize();
    EXPECT_TRUE(stream->recordedDone());
  } else {
    out = recv.download();
    outSmall = small.download();
    outGathered = gathered.download();
  }
  // The broadcast ran on the default stream, after the calls before it on the test's stream.
  std::vector<char> outBcast = bcast.download();
  expectMatch(reduced, outSmall, 0, m, 0, "small allreduce in stream order");
  expectMatch(reduced, out, 0, n, 0, "allreduce in stream order");
  for (int r = 0; r < gRanks; ++r)
    expectMatch(reduced, outGathered, r * m * 4, m, 0, "allgather of the allreduce's output");
  expectMatch(reduced, outBcast, 0, m, 0, "broadcast of the allreduce's output, other stream");
}

TEST(EmuPlugin, FreeKeepsTheNeighboursOfItsPage) {
  // Two small allocations share a page: freeing one read the other as zeros (the plug-in dropped
  // the whole page), which corrupted a call whose input sat beside scratch that a composed
  // collective freed.
  void *freed = nullptr, *kept = nullptr;
  ASSERT_EQ(gPlugin->memAlloc(0, 100, &freed), loomSuccess);
  ASSERT_EQ(gPlugin->memAlloc(0, 100, &kept), loomSuccess);
  std::vector<char> in(100), out(100, 0);
  std::iota(in.begin(), in.end(), 1);
  EXPECT_EQ(gPlugin->memcpyAsync(0, kept, in.data(), 100, loomMemcpyHostToDevice, nullptr),
            loomSuccess);
  EXPECT_EQ(gPlugin->memFree(0, freed), loomSuccess);
  EXPECT_EQ(gPlugin->memcpyAsync(0, out.data(), kept, 100, loomMemcpyDeviceToHost, nullptr),
            loomSuccess);
  EXPECT_EQ(gPlugin->streamSynchronize(0, nullptr), loomSuccess);
  EXPECT_EQ(in, out);
  EXPECT_EQ(gPlugin->memFree(0, kept), loomSuccess);
}

TEST(EmuCollectives, HostPointersAreRefused) {
  // A host buffer passed to an emulated-device communicator is the caller's mistake: refused
  // with loomInvalidArgument before anything moves, and the communicator stays usable.
  if (!allEmu()) GTEST_SKIP() << "only the E ranks would call the refused collective";
  if (std::getenv("LOOM_CLUSTER_SPLIT") != nullptr)
    GTEST_SKIP() << "a heterogeneous communicator's device ranks may pass host buffers";
  EmuComm ec(configs()[0]);
  ASSERT_NE(ec.comm, nullptr);
  std::vector<float> host(16, 1.0f);
  EXPECT_EQ(loomAllReduce(host.data(), host.data(), 16, loomFloat32, loomSum, ec.comm, nullptr),
            loomInvalidArgument);
  EXPECT_NE(std::string(loomGetLastError(nullptr)).find("is not memory of device loom-emu"),
            std::string::npos)
      << loomGetLastError(nullptr);
  DeviceBuffer ok(16 * 4);
  EXPECT_LOOM(loomAllReduce(ok.get(), ok.get(), 16, loomFloat32, loomSum, ec.comm, nullptr));
}

}  // namespace
}  // namespace loom::test

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  const char* path = std::getenv("LOOM_DEVICE_PLUGIN");
  void* library = path != nullptr ? dlopen(path, RTLD_NOW | RTLD_LOCAL) : nullptr;
  if (library == nullptr) {
    fprintf(stderr, "LOOM_DEVICE_PLUGIN must name the emulated-device plug-in\n");
    return 2;
  }
  loom::test::gPlugin =
      static_cast<const loomDevicePlugin_v1*>(dlsym(library, LOOM_DEVICE_PLUGIN_SYMBOL));
  const char* placement = std::getenv("LOOM_TEST_PLACEMENT");
  if (placement != nullptr && std::strchr(placement, 'G') != nullptr) {
    // CUDA ranks (the GPU hosts' entries): every rank of a host without a GPU skips, at once.
    int gpus = 0;
#ifdef LOOM_HAVE_CUDA
    if (cudaGetDeviceCount(&gpus) != cudaSuccess) gpus = 0;
#endif
    if (gpus == 0) {
      std::printf("SKIPPED: LOOM_TEST_PLACEMENT has CUDA ranks and this host has no GPU\n");
      return 77;
    }
  }
  if (loomCommInitFromEnv(&loom::test::gWorld, nullptr) != loomSuccess) {  // loads the plug-in
    fprintf(stderr, "init failed: %s\n", loomGetLastError(nullptr));
    return 2;
  }
  loomCommUserRank(loom::test::gWorld, &loom::test::gRank);
  loomCommCount(loom::test::gWorld, &loom::test::gRanks);
  loom::test::gPlacement = placement != nullptr ? placement : "";
  if (loom::test::gPlacement.empty()) loom::test::gPlacement.assign(loom::test::gRanks, 'E');
  if (static_cast<int>(loom::test::gPlacement.size()) != loom::test::gRanks ||
      loom::test::gPlacement.find_first_not_of("ECHG") != std::string::npos) {
    fprintf(stderr, "LOOM_TEST_PLACEMENT='%s' must have one letter E, C, H or G per rank (%d)\n",
            placement, loom::test::gRanks);
    return 2;
  }
  int result = RUN_ALL_TESTS();
  loomCommDestroy(loom::test::gWorld);
  return result;
}
