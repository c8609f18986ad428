// The NCCL shim's own LOOM_NCCL_* variables, declared once here (the shim is a client of Loom's
// public C API and does not include src/; this file is its src/base/env.* equivalent). Each is
// documented in docs/configuration.md. Read when first used; the shim reads them per call to
// keep no cached state beyond what a test can change between processes.
#pragma once

#include <string>
#include <vector>

namespace loom::nccl_shim::env {

// LOOM_NCCL_DEVICE: "cuda" (default; buffers are CUDA device memory, communicators run on the
// calling thread's current GPU) or "cpu" (test mode: buffers are host memory, communicators are
// Loom CPU communicators, streams are ignored).
std::string device();
// LOOM_NCCL_FALLBACK: path of the real libnccl.so.2; "off" disables the fallback; empty: search.
std::string fallbackPath();
// LOOM_NCCL_FORCE_FALLBACK: operations sent to the real NCCL although Loom runs them
// (allreduce, broadcast, reduce, allgather, reducescatter, alltoall, gather, scatter, sendrecv;
// "all": whole communicators, from init on).
std::vector<std::string> forceFallback();
// LOOM_NCCL_REPORT=1: per entry point, how many calls ran on Loom, on the real NCCL, or failed,
// printed to stderr at exit.
bool report();
// LOOM_CHECK (Loom's own variable, read here too): at 2 every collective of a communicator first
// meets its peers on the host, so a group's communicators of this process run on a thread each.
int loomCheck();
// LOOM_DEBUG (Loom's own variable, read here too): WARN and above print the shim's warnings.
bool warnEnabled();
bool infoEnabled();

}  // namespace loom::nccl_shim::env
