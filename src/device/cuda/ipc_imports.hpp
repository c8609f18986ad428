// Peers' allocations mapped into this process through CUDA IPC, shared by windows
// (user_windows.hpp) and local registrations (local_registrations.hpp): CUDA refuses a second
// open of one handle in a process, so an allocation is opened once, however many windows and
// registrations lie in it, and closed with the last of them. Thread-safe: the watchdog maps
// registrations while the caller's thread registers windows.
#pragma once

#include <map>
#include <mutex>
#include <string>

namespace loom {

class IpcImports {
 public:
  IpcImports() = default;
  ~IpcImports();
  IpcImports(const IpcImports&) = delete;
  IpcImports& operator=(const IpcImports&) = delete;

  // The allocation of `handle` (a cudaIpcMemHandle_t's bytes) as mapped here; null, with `why`,
  // when CUDA cannot open it. The current device must be this rank's.
  char* open(const std::string& handle, std::string* why = nullptr);
  // One use of `handle` fewer; unmapped with its last.
  void close(const std::string& handle);

 private:
  struct Opened {
    char* base;
    int users;
  };
  std::mutex mutex_;
  std::map<std::string, Opened> opened_;
};

}  // namespace loom
