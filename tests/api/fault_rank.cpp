// One rank of a fault-injection job. faults_test starts every rank itself (not through loomrun,
// which kills the survivors as soon as one rank dies, and the survivors are what is tested).
//
//   fault_rank MODE [ARGS...]   rank, size and rendezvous from LOOM_RANK, LOOM_WORLD_SIZE,
//                               LOOM_COMM_ID, LOOM_JOB_SECRET; the timeout from LOOM_TIMEOUT
//
// Each rank prints one machine-readable line when its part ends,
//   result rank=R code=C elapsed_ms=E iters=I msg=M
// (C: the loomResult_t of the last call; E: see each mode; M: loomGetLastError, one line) and
// then, after it released its communicator, "done destroy_ms=D". Modes:
//   kill OP BYTES VICTIM   OP (allreduce|allgather|broadcast) of BYTES in a loop until one fails;
//                          rank VICTIM SIGKILLs itself while in its 51st call. E: from the end of
//                          the last successful call to the failure.
//   init                   init only. E: the init.
//   mismatch KIND          calls that differ: KIND count: rank 0 allreduces 10 floats, the others
//                          11; the other kinds: every rank allreduces 10 floats (sum) but the
//                          last, which differs in KIND: func (allgathers), dtype (float64), op
//                          (max); root: every rank broadcasts from root 0, the last from itself.
//                          A rank whose call succeeds (its part only sent) makes one more, matched
//                          allreduce, where it learns of the mismatch; the last call's result.
//   absent                 every rank but the last allreduces 1000 floats; the last never calls
//                          it: it sleeps 2 x LOOM_TIMEOUT, then aborts. E: the allreduce.
//   p2p                    rank 0 sends 10 int32 to rank 1, which receives 12.
//   loop N                 N allreduces of 1000 int32, each result checked.
//   abort-thread           rank 0 allreduces alone; another thread aborts it after 300 ms. The
//                          other ranks init, sleep 3 s and exit.
//   algo                   one allreduce of 1 MiB, then prints "algorithm NAME".
//   late MS                after init, every rank but 0 sleeps MS ms; then as loop 3 (rank 0
//                          waits inside the first allreduce meanwhile, so its liveness checks run).
//   stuck HOW VICTIM       allreduces of 256 floats in a loop; before its 11th, rank VICTIM stops
//                          calling, alive: HOW stop: SIGSTOPs itself (the test kills it); HOW
//                          compute: spins for 2 x LOOM_TIMEOUT, then exits 0 without a result;
//                          HOW stop-inside: at its 11th call a second thread waits 200 ms and
//                          SIGSTOPs the process, most likely inside a call (a ring call waits
//                          for its neighbours); HOW destroy: destroys its communicator, then as
//                          compute. The others' result is their failed call's.
//                          E: that call.
//   dump                   3 allreduces of 256 floats; then rank 0 calls loomCommDumpFlight
//                          (LOOM_FLIGHT_DIR), the others raise SIGUSR2; then one more allreduce.
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "loom/loom.h"

namespace {

using Clock = std::chrono::steady_clock;

long long msSince(Clock::time_point start) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - start).count();
}

int gRank = -1;

void report(loomResult_t code, long long elapsedMs, long iters) {
  std::string msg = code == loomSuccess ? "" : loomGetLastError(nullptr);
  for (char& c : msg)
    if (c == '\n' || c == '\r') c = ' ';
  std::printf("result rank=%d code=%d elapsed_ms=%lld iters=%ld msg=%s\n", gRank,
              static_cast<int>(code), elapsedMs, iters, msg.c_str());
  std::fflush(stdout);
}

// A failed communicator is aborted, a healthy one destroyed; how long that takes is reported too
// (a release must not wait for peers that are gone).
int finish(loomComm_t comm, loomResult_t code) {
  Clock::time_point start = Clock::now();
  if (comm != nullptr) {
    if (code == loomSuccess) {
      loomCommDestroy(comm);
    } else {
      loomCommAbort(comm);
    }
  }
  std::printf("done destroy_ms=%lld\n", msSince(start));
  std::fflush(stdout);
  return 0;
}

loomResult_t runOp(const std::string& op, std::vector<float>& send, std::vector<float>& recv,
                   size_t count, loomComm_t comm) {
  if (op == "allgather")
    return loomAllGather(send.data(), recv.data(), count, loomFloat, comm, nullptr);
  if (op == "alltoall")
    return loomAllToAll(send.data(), recv.data(), count, loomFloat, comm, nullptr);
  if (op == "broadcast")
    return loomBroadcast(send.data(), recv.data(), count, loomFloat, 0, comm, nullptr);
  return loomAllReduce(send.data(), recv.data(), count, loomFloat, loomSum, comm, nullptr);
}

int modeKill(loomComm_t comm, int nranks, const std::string& op, size_t bytes, int victim) {
  size_t count = std::max<size_t>(bytes / sizeof(float), 1);
  // allgather and alltoall: `bytes` per rank.
  std::vector<float> send(count * (op == "alltoall" ? nranks : 1), 1.0f),
      recv(count * (op == "allgather" || op == "alltoall" ? nranks : 1));
  Clock::time_point lastSuccess = Clock::now();
  for (long iters = 0;; ++iters) {
    if (gRank == victim && iters == 50) {
      // Dies a moment later, in the middle of the next call.
      std::thread([] {
        std::this_thread::sleep_for(std::chrono::microseconds(200));
        kill(getpid(), SIGKILL);
      }).detach();
    }
    loomResult_t r = runOp(op, send, recv, count, comm);
    if (r != loomSuccess) {
      report(r, msSince(lastSuccess), iters);
      return finish(comm, r);
    }
    lastSuccess = Clock::now();
  }
}

int modeMismatch(loomComm_t comm, int nranks, const std::string& kind) {
  std::vector<double> send(64, 1.0), recv(64 * 8);
  bool odd = gRank == nranks - 1;  // the rank that differs (but for count)
  size_t count = (kind == "count" && gRank != 0) || (kind == "bcastcount" && odd) ? 11 : 10;
  Clock::time_point start = Clock::now();
  loomResult_t r;
  if (kind == "func" && odd)
    r = loomAllGather(send.data(), recv.data(), count, loomFloat, comm, nullptr);
  else if (kind == "leaf" && odd)  // waits for no rank; no rank waits for it
    r = loomReduce(send.data(), recv.data(), count, loomFloat, loomSum, 0, comm, nullptr);
  else if (kind == "leaf" || kind == "bcastcount")
    r = loomBroadcast(send.data(), recv.data(), count, loomFloat, 0, comm, nullptr);
  else if (kind == "root")
    r = loomBroadcast(send.data(), recv.data(), count, loomFloat, odd ? gRank : 0, comm, nullptr);
  else
    r = loomAllReduce(send.data(), recv.data(), count,
                      kind == "dtype" && odd ? loomFloat64 : loomFloat,
                      kind == "op" && odd ? loomMax : loomSum, comm, nullptr);
  if (r == loomSuccess)
    r = loomAllReduce(send.data(), recv.data(), 10, loomFloat, loomSum, comm, nullptr);
  report(r, msSince(start), 1);
  return finish(comm, r);
}

int modeAbsent(loomComm_t comm, int nranks) {
  if (gRank == nranks - 1) {
    const char* timeout = std::getenv("LOOM_TIMEOUT");
    double seconds = timeout != nullptr ? std::atof(timeout) : 1.0;
    std::this_thread::sleep_for(std::chrono::milliseconds(static_cast<long>(2000 * seconds)));
    report(loomSuccess, 0, 0);
    loomCommAbort(comm);
    return finish(nullptr, loomSuccess);
  }
  std::vector<float> data(1000, 1.0f);
  Clock::time_point start = Clock::now();
  loomResult_t r =
      loomAllReduce(data.data(), data.data(), data.size(), loomFloat, loomSum, comm, nullptr);
  report(r, msSince(start), 1);
  return finish(comm, r);
}

int modeP2P(loomComm_t comm) {
  std::vector<int32_t> data(12, 7);
  Clock::time_point start = Clock::now();
  loomResult_t r = loomSuccess;
  if (gRank == 0) r = loomSend(data.data(), 10, loomInt32, 1, comm, nullptr);
  if (gRank == 1) r = loomRecv(data.data(), 12, loomInt32, 0, comm, nullptr);
  report(r, msSince(start), 1);
  return finish(comm, r);
}

int modeLoop(loomComm_t comm, int nranks, long n) {
  std::vector<int32_t> data(1000);
  Clock::time_point start = Clock::now();
  for (long i = 0; i < n; ++i) {
    for (size_t k = 0; k < data.size(); ++k) data[k] = static_cast<int32_t>(k + gRank);
    loomResult_t r =
        loomAllReduce(data.data(), data.data(), data.size(), loomInt32, loomSum, comm, nullptr);
    int32_t want = static_cast<int32_t>(999 * nranks + nranks * (nranks - 1) / 2);
    if (r == loomSuccess && data[999] != want) {
      std::printf("result rank=%d code=%d elapsed_ms=0 iters=%ld msg=wrong sum %d, want %d\n",
                  gRank, static_cast<int>(loomInternalError), i, data[999], want);
      return finish(comm, loomInternalError);
    }
    if (r != loomSuccess) {
      report(r, msSince(start), i);
      return finish(comm, r);
    }
  }
  report(loomSuccess, msSince(start), n);
  return finish(comm, loomSuccess);
}

int modeAbortThread(loomComm_t comm) {
  if (gRank != 0) {
    std::this_thread::sleep_for(std::chrono::seconds(3));
    report(loomSuccess, 0, 0);
    return finish(comm, loomSuccess);
  }
  std::thread aborter([comm] {
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    loomCommAbort(comm);
  });
  std::vector<float> data(1024, 1.0f);
  Clock::time_point start = Clock::now();
  loomResult_t r =
      loomAllReduce(data.data(), data.data(), data.size(), loomFloat, loomSum, comm, nullptr);
  report(r, msSince(start), 1);
  aborter.join();
  return finish(nullptr, r);  // the aborter released it
}

int modeStuck(loomComm_t comm, const std::string& how, int victim) {
  std::vector<float> data(256, 1.0f);
  std::thread stopper;
  for (long i = 0;; ++i) {
    if (gRank == victim && i == 10 && how == "stop-inside") {
      stopper = std::thread([] {
        std::this_thread::sleep_for(std::chrono::milliseconds(200));
        kill(getpid(), SIGSTOP);
      });
      stopper.detach();  // the test kills the process
    } else if (gRank == victim && i == 10) {
      if (how == "stop") raise(SIGSTOP);
      if (how == "destroy") loomCommDestroy(comm);
      const char* timeout = std::getenv("LOOM_TIMEOUT");
      const double seconds = 2 * (timeout != nullptr ? std::atof(timeout) : 1.0);
      const Clock::time_point begin = Clock::now();
      volatile uint64_t spins = 0;
      while (msSince(begin) < static_cast<long long>(seconds * 1000)) spins = spins + 1;
      std::_Exit(0);  // as a rank that moved on would: no release, no result
    }
    Clock::time_point start = Clock::now();
    loomResult_t r =
        loomAllReduce(data.data(), data.data(), data.size(), loomFloat, loomSum, comm, nullptr);
    if (r != loomSuccess) {
      report(r, msSince(start), i);
      return finish(comm, r);
    }
  }
}

int modeDump(loomComm_t comm) {
  std::vector<float> data(256, 1.0f);
  loomResult_t r = loomSuccess;
  for (int i = 0; i < 3 && r == loomSuccess; ++i)
    r = loomAllReduce(data.data(), data.data(), data.size(), loomFloat, loomSum, comm, nullptr);
  if (r == loomSuccess && gRank == 0) r = loomCommDumpFlight(comm, nullptr);
  if (r == loomSuccess && gRank != 0) raise(SIGUSR2);  // the handler runs before raise returns
  if (r == loomSuccess)
    r = loomAllReduce(data.data(), data.data(), data.size(), loomFloat, loomSum, comm, nullptr);
  report(r, 0, 4);
  return finish(comm, r);
}

// Rank 1 faults (a write through a null pointer) after three allreduces; rank 0 waits for it in
// a fourth, which fails when rank 1 dies.
int modeSegv(loomComm_t comm) {
  std::vector<float> data(256, 1.0f);
  loomResult_t r = loomSuccess;
  for (int i = 0; i < 3 && r == loomSuccess; ++i)
    r = loomAllReduce(data.data(), data.data(), data.size(), loomFloat, loomSum, comm, nullptr);
  if (r == loomSuccess && gRank == 1) {
    // A real fault in the never-mapped first page, but not through a null pointer: UBSan
    // stops at a null store itself, before any signal (scripts/sanitize.sh).
    volatile uintptr_t firstPage = 64;  // volatile: no compiler sees a constant address
    volatile int* nowhere = reinterpret_cast<volatile int*>(firstPage);
    *nowhere = 1;
  }
  if (r == loomSuccess)
    r = loomAllReduce(data.data(), data.data(), data.size(), loomFloat, loomSum, comm, nullptr);
  report(r, 0, 4);
  return finish(comm, r);
}

int modeAlgo(loomComm_t comm) {
  std::vector<float> data(1 << 18, 1.0f);
  loomResult_t r =
      loomAllReduce(data.data(), data.data(), data.size(), loomFloat, loomSum, comm, nullptr);
  const char* name = "?";
  loomCommGetAlgorithm(comm, loomFuncAllReduce, data.size(), loomFloat, &name);
  std::printf("algorithm %s\n", name);
  report(r, 0, 1);
  return finish(comm, r);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: fault_rank MODE [ARGS...] (see the source)\n");
    return 2;
  }
  std::string mode = argv[1];
  auto arg = [&](int i) { return std::string(i < argc ? argv[i] : ""); };
  const char* rankText = std::getenv("LOOM_RANK");
  gRank = rankText != nullptr ? std::atoi(rankText) : -1;
  // FAULT_RANK_NODES="a b a": rank i on the fake node of the i-th word (LOOM_NODE_ID), as
  // tests/api/fake_nodes.sh does under loomrun.
  if (const char* nodes = std::getenv("FAULT_RANK_NODES")) {
    std::string list = nodes, word;
    size_t at = 0;
    for (int i = 0; i <= gRank && at != std::string::npos; ++i) {
      size_t end = list.find(' ', at);
      word = list.substr(at, end == std::string::npos ? end : end - at);
      at = end == std::string::npos ? end : end + 1;
    }
    setenv("LOOM_NODE_ID", word.c_str(), 1);
  }

  loomComm_t comm = nullptr;
  Clock::time_point start = Clock::now();
  loomResult_t r = loomCommInitFromEnv(&comm, nullptr);
  if (r != loomSuccess || mode == "init") {
    report(r, msSince(start), 0);
    return finish(r == loomSuccess ? comm : nullptr, r);
  }
  int nranks = 0;
  loomCommCount(comm, &nranks);
  if (mode == "kill")
    return modeKill(comm, nranks, arg(2), std::strtoull(arg(3).c_str(), nullptr, 10),
                    std::atoi(arg(4).c_str()));
  if (mode == "mismatch") return modeMismatch(comm, nranks, arg(2));
  if (mode == "p2p") return modeP2P(comm);
  if (mode == "absent") return modeAbsent(comm, nranks);
  if (mode == "loop") return modeLoop(comm, nranks, std::atol(arg(2).c_str()));
  if (mode == "abort-thread") return modeAbortThread(comm);
  if (mode == "algo") return modeAlgo(comm);
  if (mode == "dump") return modeDump(comm);
  if (mode == "segv") return modeSegv(comm);
  if (mode == "stuck") return modeStuck(comm, arg(2), std::atoi(arg(3).c_str()));
  if (mode == "late") {
    if (gRank != 0)
      std::this_thread::sleep_for(std::chrono::milliseconds(std::atol(arg(2).c_str())));
    return modeLoop(comm, nranks, 3);
  }
  std::fprintf(stderr, "fault_rank: unknown mode '%s'\n", mode.c_str());
  loomCommDestroy(comm);
  return 2;
}
