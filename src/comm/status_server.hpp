// A process's status socket (comm/status_socket.hpp has the path and the protocol): a thread that
// answers `loom-info --status` and loomrun with every communicator's calls in flight while a job
// runs, as NCCL's RAS answers "which ranks launched how many collectives". It runs while the
// process has communicators (comm/flight_registry.hpp starts and stops it; LOOM_STATUS=0: never).
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "base/fd_writer.hpp"
#include "bootstrap/socket.hpp"

namespace loom {

class StatusServer {
 public:
  static constexpr int kTickMs = 1000;
  struct Handlers {
    std::function<void(FdWriter&)> status;     // one JSON line per communicator
    std::function<int(const char* dir)> dump;  // flight records into dir; how many
    std::function<void()> tick;                // about every kTickMs while the server runs
  };
  // Listens in `dir`; null (with a warning) when the directory or the socket cannot be used.
  static std::unique_ptr<StatusServer> start(const std::string& dir, Handlers handlers);
  ~StatusServer();
  StatusServer(const StatusServer&) = delete;
  StatusServer& operator=(const StatusServer&) = delete;

 private:
  StatusServer(Fd listen, std::string path, Handlers handlers);
  void loop();
  void answer(int fd);

  Fd listen_;
  EventFd wake_{"the status socket"};  // the destructor stops the thread through it
  std::string path_;
  Handlers handlers_;
  std::thread thread_;
};

}  // namespace loom
