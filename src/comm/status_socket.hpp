// Where a process's status socket lives (comm/status_server.hpp), shared with the tools that talk
// to it (loom-info --status, loomrun): header-only, no dependency on the library.
//
// One Unix socket per copy of Loom in a process with communicators: <dir>/<pid>-<tag>.sock (a
// process may hold several copies: the Python module and its torch backend each link Loom
// statically; the tag tells them apart), in a directory only its user
// can enter (created with mode 0700; a directory owned by anyone else, open to others or a
// symbolic link is refused), so no other user can connect; the server also checks the caller's
// credentials (SO_PEERCRED). <dir> is LOOM_STATUS_DIR, else $XDG_RUNTIME_DIR/loom-status, else
// /tmp/loom-status-<uid>.
//
// Protocol: the client sends one line, the server answers and closes.
//   "status\n"      one JSON line per communicator of the process: identity, last call entered
//                   and finished, the calls in flight (FlightRecorder::writeStatus)
//   "dump <dir>\n"  every communicator's flight record written into <dir> (which must exist),
//                   answered "dumped N\n"
#pragma once

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <string>

namespace loom {

// The directory for this user; `configured`: LOOM_STATUS_DIR's value (null or empty: default).
inline std::string statusDirectory(const char* configured) {
  if (configured != nullptr && configured[0] != '\0') return configured;
  const char* runtime = std::getenv("XDG_RUNTIME_DIR");
  if (runtime != nullptr && runtime[0] != '\0') return std::string(runtime) + "/loom-status";
  return "/tmp/loom-status-" + std::to_string(::geteuid());
}

inline std::string statusSocketPath(const std::string& dir, int pid, unsigned tag) {
  return dir + "/" + std::to_string(pid) + "-" + std::to_string(tag) + ".sock";
}

// The pid of a socket's name ("1234-5.sock"), or -1 when the name is not a status socket's.
inline int statusSocketPid(const std::string& name) {
  const size_t dash = name.find('-');
  if (dash == std::string::npos || dash == 0 || name.size() < 5 ||
      name.compare(name.size() - 5, 5, ".sock") != 0)
    return -1;
  int pid = 0;
  for (size_t i = 0; i < dash; ++i) {
    if (name[i] < '0' || name[i] > '9' || pid > 100000000) return -1;
    pid = pid * 10 + (name[i] - '0');
  }
  return pid;
}

// "" when `dir` is a directory of this user that no one else may enter (created so when missing
// and `create`), else why it cannot be used.
inline std::string checkStatusDirectory(const std::string& dir, bool create) {
  if (create && ::mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST)
    return "cannot create " + dir + ": " + std::strerror(errno);
  struct stat st {};
  if (::lstat(dir.c_str(), &st) != 0) return dir + ": " + std::strerror(errno);
  if (!S_ISDIR(st.st_mode)) return dir + " is not a directory (a symbolic link?)";
  if (st.st_uid != ::geteuid()) return dir + " belongs to another user";
  if ((st.st_mode & 077) != 0) return dir + " is open to other users (mode must be 0700)";
  return "";
}

}  // namespace loom
