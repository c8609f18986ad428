// One process driving several GPUs, as nccl-tests -g N, ncclCommInitAll programs and JAX do:
// loomCommInitAll makes one communicator per GPU, and this one thread runs every collective and
// send/recv of all of them (a CUDA communicator's call only enqueues), results checked exactly.
// The peers' memory must be mapped directly (peer access) where the GPUs can reach each other,
// not through pinned host memory (loomCommDescribeTopology says which), and every call must leave
// the caller's current device as it was. Then the endings a program may choose:
//
//   gpu_one_process_test collectives N    the above on GPUs 0 .. N-1
//   gpu_one_process_test reset N          cudaDeviceReset on every GPU, then exit without destroy
//   gpu_one_process_test reset-destroy N  cudaDeviceReset on every GPU, then destroy every comm
//   gpu_one_process_test exit-alive N     exit without destroying (no reset)
//
// Each must return 0 (not hang, not crash: ctest's timeout and exit code say so). Exit 77 when
// the host has fewer than N GPUs.
#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "loom/loom.h"

namespace {

int gFailures = 0;

#define CHECK(cond, ...)                                                            \
  do {                                                                              \
    if (!(cond)) {                                                                  \
      std::fprintf(stderr, "%s:%d: check failed: %s: ", __FILE__, __LINE__, #cond); \
      std::fprintf(stderr, __VA_ARGS__);                                            \
      std::fprintf(stderr, "\n");                                                   \
      if (++gFailures > 20) std::exit(1);                                           \
    }                                                                               \
  } while (0)

void loomOk(loomResult_t r, const char* what) {
  if (r == loomSuccess) return;
  std::fprintf(stderr, "%s: %s (%s)\n", what, loomGetErrorString(r), loomGetLastError(nullptr));
  std::exit(1);
}
void cudaOk(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return;
  std::fprintf(stderr, "%s: %s\n", what, cudaGetErrorString(e));
  std::exit(1);
}
#define LOOM_OK(call) loomOk((call), #call)
#define CUDA_OK(call) cudaOk((call), #call)

struct Rank {
  int device;
  loomComm_t comm;
  cudaStream_t stream;
};

int32_t in(int rank, size_t i) { return static_cast<int32_t>((rank + 1) * 5 + i % 101); }

// Buffers of rank r on its device, filled with its input.
void* inputOn(const Rank& r, int rank, size_t count) {
  CUDA_OK(cudaSetDevice(r.device));
  void* p = nullptr;
  CUDA_OK(cudaMalloc(&p, count * sizeof(int32_t)));
  std::vector<int32_t> host(count);
  for (size_t i = 0; i < count; ++i) host[i] = in(rank, i);
  CUDA_OK(cudaMemcpy(p, host.data(), count * sizeof(int32_t), cudaMemcpyHostToDevice));
  return p;
}
std::vector<int32_t> read(const Rank& r, const void* p, size_t count) {
  CUDA_OK(cudaSetDevice(r.device));
  CUDA_OK(cudaStreamSynchronize(r.stream));
  std::vector<int32_t> host(count);
  CUDA_OK(cudaMemcpy(host.data(), p, count * sizeof(int32_t), cudaMemcpyDeviceToHost));
  return host;
}

// Every call below is issued from this thread; the caller's device must stay what it set.
void checkCurrentDevice(int expected, const char* after) {
  int current = -1;
  CUDA_OK(cudaGetDevice(&current));
  CHECK(current == expected, "after %s the current device is %d, not the caller's %d", after,
        current, expected);
}

void checkCollectives(std::vector<Rank>& ranks, size_t count) {
  const int n = static_cast<int>(ranks.size());
  std::vector<void*> send(n), recv(n);
  for (int i = 0; i < n; ++i) {
    send[i] = inputOn(ranks[i], i, count * n);
    CUDA_OK(cudaMalloc(&recv[i], count * n * sizeof(int32_t)));
  }
  CUDA_OK(cudaSetDevice(0));
  const char* names[] = {"allreduce", "allgather", "reducescatter", "sendrecv"};
  for (int op = 0; op < 4; ++op) {
    LOOM_OK(loomGroupStart());
    for (int i = 0; i < n; ++i) {
      Rank& r = ranks[i];
      if (op == 0)
        LOOM_OK(loomAllReduce(send[i], recv[i], count, loomInt32, loomSum, r.comm, r.stream));
      if (op == 1) LOOM_OK(loomAllGather(send[i], recv[i], count, loomInt32, r.comm, r.stream));
      if (op == 2)
        LOOM_OK(loomReduceScatter(send[i], recv[i], count, loomInt32, loomSum, r.comm, r.stream));
      if (op == 3) {
        LOOM_OK(loomSend(send[i], count, loomInt32, (i + 1) % n, r.comm, r.stream));
        LOOM_OK(loomRecv(recv[i], count, loomInt32, (i + n - 1) % n, r.comm, r.stream));
      }
    }
    LOOM_OK(loomGroupEnd());
    checkCurrentDevice(0, names[op]);
    for (int i = 0; i < n; ++i) {
      const size_t outCount = op == 1 ? count * n : count;
      std::vector<int32_t> got = read(ranks[i], recv[i], outCount);
      for (size_t j = 0; j < outCount; ++j) {
        int32_t want = 0;
        if (op == 0)
          for (int q = 0; q < n; ++q) want += in(q, j);
        if (op == 1) want = in(static_cast<int>(j / count), j % count);
        if (op == 2)
          for (int q = 0; q < n; ++q) want += in(q, i * count + j);
        if (op == 3) want = in((i + n - 1) % n, j);
        if (got[j] != want) {
          CHECK(false, "%s of %zu on GPU %d [%zu]: %d, want %d", names[op], count, i, j, got[j],
                want);
          break;
        }
      }
    }
    CUDA_OK(cudaSetDevice(0));
  }
  for (int i = 0; i < n; ++i) {
    CUDA_OK(cudaSetDevice(ranks[i].device));
    cudaFree(send[i]);
    cudaFree(recv[i]);
  }
  CUDA_OK(cudaSetDevice(0));
}

// Peers of this process map each other's memory directly wherever every pair of GPUs has peer
// access; loomCommDescribeTopology's device line says how.
void checkDirectPeers(std::vector<Rank>& ranks) {
  const int n = static_cast<int>(ranks.size());
  bool allPairs = true;
  for (int a = 0; a < n; ++a)
    for (int b = 0; b < n; ++b) {
      int can = 0;
      if (a != b && ranks[a].device != ranks[b].device &&
          (cudaDeviceCanAccessPeer(&can, ranks[a].device, ranks[b].device) != cudaSuccess ||
           can == 0))
        allPairs = false;
    }
  for (int i = 0; i < n; ++i) {
    char text[8192];
    LOOM_OK(loomCommDescribeTopology(ranks[i].comm, text, sizeof(text), nullptr));
    const std::string want =
        "p2p (" + std::to_string(n - 1) + " peers in this process directly, 0 through CUDA IPC)";
    if (allPairs)
      CHECK(std::strstr(text, want.c_str()) != nullptr,
            "rank %d does not map its peers "
            "directly:\n%s",
            i, text);
    else
      std::printf("rank %d: some GPUs have no peer access to each other; topology:\n%s\n", i, text);
    if (i == 0) std::printf("rank 0: %s\n", std::strstr(text, "device:"));
  }
}

}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "collectives";
  const int n = argc > 2 ? std::atoi(argv[2]) : 2;
  int gpus = 0;
  if (cudaGetDeviceCount(&gpus) != cudaSuccess || gpus < n) {
    std::printf("SKIPPED: %d GPUs, %d needed\n", gpus, n);
    return 77;
  }
  std::vector<Rank> ranks(n);
  std::vector<loomComm_t> comms(n);
  CUDA_OK(cudaSetDevice(0));
  LOOM_OK(loomCommInitAll(comms.data(), n, nullptr));
  checkCurrentDevice(0, "loomCommInitAll");
  for (int i = 0; i < n; ++i) {
    ranks[i] = Rank{i, comms[i], nullptr};
    CUDA_OK(cudaSetDevice(i));
    CUDA_OK(cudaStreamCreateWithFlags(&ranks[i].stream, cudaStreamNonBlocking));
  }
  CUDA_OK(cudaSetDevice(0));
  checkCollectives(ranks, 1000);  // LL kernels
  if (mode == "collectives") {
    checkCollectives(ranks, 4 << 20);  // simple kernels, 16 MiB per rank
    checkDirectPeers(ranks);
    for (Rank& r : ranks) LOOM_OK(loomCommDestroy(r.comm));
    checkCurrentDevice(0, "loomCommDestroy");
    std::printf("%s: %d GPUs from one thread: %s\n", mode.c_str(), n,
                gFailures == 0 ? "passed" : "FAILED");
    return gFailures == 0 ? 0 : 1;
  }
  if (mode == "reset" || mode == "reset-destroy") {
    for (int d = 0; d < n; ++d) {
      CUDA_OK(cudaSetDevice(d));
      CUDA_OK(cudaDeviceSynchronize());
      CUDA_OK(cudaDeviceReset());
    }
    if (mode == "reset-destroy") {
      for (Rank& r : ranks) LOOM_OK(loomCommDestroy(r.comm));
      // The devices work again for the program after the reset.
      void* p = nullptr;
      CUDA_OK(cudaSetDevice(0));
      CUDA_OK(cudaMalloc(&p, 64));
      CUDA_OK(cudaFree(p));
    }
  } else if (mode != "exit-alive") {
    std::fprintf(stderr, "unknown mode %s\n", mode.c_str());
    return 2;
  }
  std::printf("%s: %d GPUs, returning from main with %s\n", mode.c_str(), n,
              mode == "reset-destroy" ? "every communicator destroyed" : "communicators alive");
  return gFailures == 0 ? 0 : 1;
}
