// What loom-bench's measurement loop needs from the memory it runs on: host buffers timed with
// the CPU clock (bench_host.cpp), or CUDA device buffers timed with events on a stream
// (bench_gpu.cpp). The loop, the result check and the report are the same for both.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "bench_options.hpp"
#include "loom/loom.h"

namespace loom::tool {
class Memory;  // bench_memory.hpp
}

namespace loom::bench {

// The arguments of one call, the same for Loom and for the library it is compared with.
struct CallArgs {
  void* send = nullptr;
  void* recv = nullptr;
  size_t count = 0;
  loomDataType_t dtype = loomFloat;
  loomRedOp_t redop = loomSum;
};

class Backend {
 public:
  virtual ~Backend() = default;

  // The stream argument of every Loom call.
  virtual loomStream_t stream() const = 0;
  // Both buffers hold at least BenchOptions::maxBytes; they live where the collectives run.
  virtual unsigned char* sendBuffer() = 0;
  virtual unsigned char* recvBuffer() = 0;

  // Host memory standing for the bytes at `buf` (a pointer into either buffer), where the check
  // writes inputs and reads results: `buf` itself on the host, a staging copy for a device.
  virtual unsigned char* hostView(unsigned char* buf) = 0;
  // Copy [buf, buf + bytes) from its host view to the buffer, and back.
  virtual void upload(unsigned char* buf, size_t bytes) = 0;
  virtual void download(unsigned char* buf, size_t bytes) = 0;
  // Waits for every call issued so far and fails the run on any error it reports.
  virtual void synchronize() = 0;

  // Whether the run starts with nccl-tests' warm-up at the largest and the smallest size, so that
  // lazy connection setup lands there and not in the first row (CUDA; host output stays as it
  // always was).
  virtual bool warmUpFirst() const = 0;
  // This rank's seconds per call of `launch`: warm-up calls, all ranks synchronized, then
  // BenchOptions::iters calls timed together.
  virtual double secondsPerCall(const std::function<void()>& launch) = 0;
  // The next secondsPerCall times calls of `bytes` (for backends that report more per size).
  virtual void sizeOfNextCalls(size_t /*bytes*/) {}
  virtual double maxOverRanks(double value) = 0;
  virtual int64_t sumOverRanks(int64_t value) = 0;
};

// Host buffers, timed as loom-bench always did on the CPU.
std::unique_ptr<Backend> makeHostBackend(const BenchOptions& options, loomComm_t comm);

// A rank on any device (a plug-in's, or a --placement's): buffers in `memory`, timed with the CPU
// clock up to the end of the rank's stream, scalars over `hostComm`, a host communicator of every
// rank (bench_placed.cpp).
std::unique_ptr<Backend> makePlacedBackend(const BenchOptions& options, loomComm_t hostComm,
                                           tool::Memory& memory);

// Another library run on the same buffers, for comparison (NCCL: bench_nccl.cpp).
class PeerLibrary {
 public:
  virtual ~PeerLibrary() = default;
  virtual const char* name() const = 0;
  // Name and version, for the header.
  virtual std::string description() const = 0;
  // False where the library has no such call or type: its columns then say N/A.
  virtual bool supports(BenchOp op, loomDataType_t dtype, loomRedOp_t redop) const = 0;
  // Issues one call with the conventions of loom-bench's Loom call (count, in-place layout).
  virtual void issue(BenchOp op, const CallArgs& call, int root) = 0;
};

[[noreturn]] void failCall(const char* call, loomResult_t result, loomComm_t comm);
inline void checkCall(loomResult_t result, const char* call, loomComm_t comm) {
  if (result != loomSuccess) failCall(call, result, comm);
}

}  // namespace loom::bench
