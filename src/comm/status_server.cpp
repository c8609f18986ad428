#include "comm/status_server.hpp"

#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>

#include "base/log.hpp"
#include "comm/status_socket.hpp"

namespace loom {

namespace {

constexpr size_t kMaxRequest = 1024;

bool peerIsThisUser(int fd) {
  ucred cred{};
  socklen_t len = sizeof(cred);
  if (::getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0) return false;
  return cred.uid == ::geteuid() || cred.uid == 0;
}

}  // namespace

std::unique_ptr<StatusServer> StatusServer::start(const std::string& dir, Handlers handlers) {
  const std::string why = checkStatusDirectory(dir, true);
  if (!why.empty()) {
    LOOM_WARN(kSubsysInit, -1,
              "status socket not started (loom-info --status will not see this "
              "process): ",
              why, " (LOOM_STATUS_DIR; LOOM_STATUS=0 turns it off)");
    return nullptr;
  }
  // This copy of Loom's tag: the address of its code, different in every copy in a process.
  const auto tag =
      static_cast<unsigned>(reinterpret_cast<uintptr_t>(&peerIsThisUser) >> 4 & 0xffffff);
  const std::string path = statusSocketPath(dir, static_cast<int>(::getpid()), tag);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (path.size() >= sizeof(addr.sun_path)) {
    LOOM_WARN(kSubsysInit, -1, "status socket not started: the path ", path,
              " is too long for a Unix socket (LOOM_STATUS_DIR)");
    return nullptr;
  }
  std::memcpy(addr.sun_path, path.c_str(), path.size() + 1);
  Fd fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!fd.valid()) return nullptr;
  ::unlink(path.c_str());  // a socket left by a dead process that had this pid and tag
  if (::bind(fd.get(), reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 ||
      ::chmod(path.c_str(), 0600) != 0 || ::listen(fd.get(), 16) != 0) {
    LOOM_WARN(kSubsysInit, -1, "status socket not started: ", path, ": ", std::strerror(errno));
    return nullptr;
  }
  try {
    return std::unique_ptr<StatusServer>(
        new StatusServer(std::move(fd), path, std::move(handlers)));
  } catch (const Error& e) {
    ::unlink(path.c_str());
    LOOM_WARN(kSubsysInit, -1, "status socket not started: ", e.what());
    return nullptr;
  }
}

StatusServer::StatusServer(Fd listen, std::string path, Handlers handlers)
    : listen_(std::move(listen)), path_(std::move(path)), handlers_(std::move(handlers)) {
  thread_ = std::thread([this] { loop(); });
}

StatusServer::~StatusServer() {
  wake_.signal();
  thread_.join();
  ::unlink(path_.c_str());
}

void StatusServer::loop() {
  // The application's signals go to its own threads, not to this one.
  sigset_t all;
  sigfillset(&all);
  pthread_sigmask(SIG_BLOCK, &all, nullptr);
  for (;;) {
    pollfd fds[2] = {{listen_.get(), POLLIN, 0}, {wake_.get(), POLLIN, 0}};
    const int ready = ::poll(fds, 2, handlers_.tick ? kTickMs : -1);
    if (ready < 0 && errno != EINTR) return;
    if (ready == 0) handlers_.tick();
    if (fds[1].revents != 0) return;
    if (fds[0].revents == 0) continue;
    const int fd = ::accept4(listen_.get(), nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) continue;
    if (peerIsThisUser(fd)) answer(fd);
    ::close(fd);
  }
}

void StatusServer::answer(int fd) {
  // A client that says nothing, or stops reading, holds this thread for a second at most.
  timeval limit{1, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &limit, sizeof(limit));
  ::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &limit, sizeof(limit));
  char request[kMaxRequest];
  size_t have = 0;
  while (have < sizeof(request) - 1) {
    const ssize_t n = ::recv(fd, request + have, sizeof(request) - 1 - have, 0);
    if (n <= 0) return;
    have += static_cast<size_t>(n);
    if (std::memchr(request, '\n', have) != nullptr) break;
  }
  request[have] = '\0';
  char* end = std::strchr(request, '\n');
  if (end == nullptr) return;
  *end = '\0';
  FdWriter out(fd);
  if (std::strcmp(request, "status") == 0) {
    handlers_.status(out);
  } else if (std::strncmp(request, "dump ", 5) == 0) {
    out.raw("dumped ").integer(handlers_.dump(request + 5)).raw("\n");
  } else {
    out.raw("error: unknown request\n");
  }
}

}  // namespace loom
