#include "nccl_loader.hpp"

#include <dlfcn.h>

#include <cstdlib>
#include <vector>

namespace loom::bench::nccl {
namespace {

// Assigns dlsym's result to a typed function pointer; false when the symbol is missing.
template <typename Fn>
bool resolve(void* handle, const char* symbol, Fn* fn, std::string* missing) {
  void* address = dlsym(handle, symbol);
  if (address == nullptr) {
    if (!missing->empty()) *missing += ", ";
    *missing += symbol;
    return false;
  }
  *fn = reinterpret_cast<Fn>(address);
  return true;
}

}  // namespace

const Api* load(std::string* error) {
  static Api api;
  static bool loaded = false;
  if (loaded) return &api;

  // A file the user names is the only one tried: comparing against another NCCL than the one
  // asked for would mislead.
  std::vector<std::string> candidates;
  if (const char* path = std::getenv("LOOM_BENCH_NCCL"); path != nullptr && *path != '\0') {
    candidates.emplace_back(path);
  } else {
    candidates.emplace_back("libnccl.so.2");
    candidates.emplace_back("libnccl.so");
  }
  void* handle = nullptr;
  std::string reasons;
  for (const std::string& candidate : candidates) {
    // RTLD_LOCAL: NCCL's own symbols must not interpose on anything else in the process.
    handle = dlopen(candidate.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (handle != nullptr) {
      api.path = candidate;
      break;
    }
    const char* why = dlerror();
    reasons += "\n  " + candidate + ": " + (why != nullptr ? why : "not found");
  }
  if (handle == nullptr) {
    *error =
        "cannot load NCCL (install it, add its directory to LD_LIBRARY_PATH, or set "
        "LOOM_BENCH_NCCL to the library's path):" +
        reasons;
    return nullptr;
  }

  std::string missing;
  bool ok = true;
  ok &= resolve(handle, "ncclGetUniqueId", &api.getUniqueId, &missing);
  ok &= resolve(handle, "ncclCommInitRank", &api.commInitRank, &missing);
  ok &= resolve(handle, "ncclCommDestroy", &api.commDestroy, &missing);
  ok &= resolve(handle, "ncclAllReduce", &api.allReduce, &missing);
  ok &= resolve(handle, "ncclAllGather", &api.allGather, &missing);
  ok &= resolve(handle, "ncclReduceScatter", &api.reduceScatter, &missing);
  ok &= resolve(handle, "ncclBroadcast", &api.broadcast, &missing);
  ok &= resolve(handle, "ncclReduce", &api.reduce, &missing);
  ok &= resolve(handle, "ncclSend", &api.send, &missing);
  ok &= resolve(handle, "ncclRecv", &api.recv, &missing);
  ok &= resolve(handle, "ncclGroupStart", &api.groupStart, &missing);
  ok &= resolve(handle, "ncclGroupEnd", &api.groupEnd, &missing);
  ok &= resolve(handle, "ncclGetErrorString", &api.getErrorString, &missing);
  if (!ok) {
    *error = api.path + " lacks " + missing + " (NCCL 2.7 or later is needed)";
    dlclose(handle);
    return nullptr;
  }
  // Optional: windows (loom-bench --window 1 gives NCCL its own registered buffers) and
  // registration (--register 1).
  std::string absent;
  resolve(handle, "ncclMemAlloc", &api.memAlloc, &absent);
  resolve(handle, "ncclMemFree", &api.memFree, &absent);
  resolve(handle, "ncclCommWindowRegister", &api.commWindowRegister, &absent);
  resolve(handle, "ncclCommWindowDeregister", &api.commWindowDeregister, &absent);
  resolve(handle, "ncclCommRegister", &api.commRegister, &absent);
  resolve(handle, "ncclCommDeregister", &api.commDeregister, &absent);
  // Optional: only decides which types and ops are offered to it.
  Result (*getVersion)(int*) = nullptr;
  std::string ignored;
  if (resolve(handle, "ncclGetVersion", &getVersion, &ignored) && getVersion(&api.version) != 0) {
    api.version = 0;
  }
  loaded = true;
  return &api;
}

}  // namespace loom::bench::nccl
