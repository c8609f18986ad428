#include "status_client.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <map>
#include <sstream>

#include "comm/status_socket.hpp"
#include "json_reader.hpp"

namespace loom::tool {

namespace {

using Clock = std::chrono::steady_clock;

// Why a process did not answer, from /proc: stopped, blocked, gone.
std::string processStateText(int pid) {
  char path[64];
  std::snprintf(path, sizeof(path), "/proc/%d/stat", pid);
  FILE* f = std::fopen(path, "r");
  if (f == nullptr) return "the process is gone";
  char text[512] = {};
  const size_t n = std::fread(text, 1, sizeof(text) - 1, f);
  std::fclose(f);
  text[n] = '\0';
  const char* paren = std::strrchr(text, ')');
  const char state = paren != nullptr && paren[1] == ' ' ? paren[2] : '?';
  switch (state) {
    case 'T':
      return "the process is stopped (state T: SIGSTOP or a debugger)";
    case 't':
      return "the process is stopped by a debugger (state t)";
    case 'D':
      return "the process is blocked in the kernel (state D)";
    case 'Z':
      return "the process has exited (zombie)";
    default:
      return std::string("the process is alive (state ") + state + ") but did not answer";
  }
}

// Sends `request` and reads the reply to EOF, within timeoutMs; false with `why` otherwise.
bool ask(const std::string& path, const std::string& request, int timeoutMs, std::string& reply,
         std::string& why) {
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (path.size() >= sizeof(addr.sun_path)) {
    why = "socket path too long";
    return false;
  }
  std::memcpy(addr.sun_path, path.c_str(), path.size() + 1);
  const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0) {
    why = std::strerror(errno);
    return false;
  }
  const auto deadline = Clock::now() + std::chrono::milliseconds(timeoutMs);
  auto left = [&] {
    return static_cast<int>(std::max<int64_t>(
        0, std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count()));
  };
  bool ok = false;
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 &&
      errno != EINPROGRESS) {
    why = std::string("connect: ") + std::strerror(errno);
  } else {
    const std::string line = request + "\n";
    size_t sent = 0;
    while (sent < line.size()) {
      pollfd p{fd, POLLOUT, 0};
      if (::poll(&p, 1, left()) <= 0) break;
      const ssize_t n = ::send(fd, line.data() + sent, line.size() - sent, MSG_NOSIGNAL);
      if (n <= 0 && errno != EAGAIN) break;
      if (n > 0) sent += static_cast<size_t>(n);
    }
    while (sent == line.size()) {
      pollfd p{fd, POLLIN, 0};
      if (::poll(&p, 1, left()) <= 0) {
        why = "no answer within " + std::to_string(timeoutMs) + " ms";
        break;
      }
      char buffer[4096];
      const ssize_t n = ::recv(fd, buffer, sizeof(buffer), 0);
      if (n == 0) {
        ok = true;
        break;
      }
      if (n < 0 && errno != EAGAIN) {
        why = std::strerror(errno);
        break;
      }
      if (n > 0) reply.append(buffer, static_cast<size_t>(n));
    }
    if (sent != line.size() && why.empty()) why = "could not send the request";
  }
  ::close(fd);
  return ok;
}

}  // namespace

std::string secondsText(int64_t ns) {
  char text[32];
  std::snprintf(text, sizeof(text), "%.1f s", static_cast<double>(ns) / 1e9);
  return text;
}

std::vector<StatusAnswer> queryStatus(const std::string& dir, const std::vector<int>& pids,
                                      const std::string& request, int timeoutMs) {
  std::vector<StatusAnswer> answers;
  DIR* d = ::opendir(dir.c_str());
  if (d == nullptr) return answers;
  std::vector<std::string> names;
  while (dirent* entry = ::readdir(d)) names.push_back(entry->d_name);
  ::closedir(d);
  std::sort(names.begin(), names.end());
  for (const std::string& name : names) {
    const int pid = statusSocketPid(name);
    if (pid <= 0) continue;
    if (!pids.empty() && std::find(pids.begin(), pids.end(), pid) == pids.end()) continue;
    StatusAnswer a;
    a.pid = pid;
    a.socket = dir + "/" + name;
    if (::kill(pid, 0) != 0 && errno == ESRCH) {
      ::unlink(a.socket.c_str());  // left by a process that died without cleaning up
      continue;
    }
    std::string reply;
    a.answered = ask(a.socket, request, timeoutMs, reply, a.why);
    if (!a.answered) a.why += "; " + processStateText(pid);
    std::istringstream in(reply);
    for (std::string line; std::getline(in, line);)
      if (!line.empty()) a.lines.push_back(line);
    answers.push_back(std::move(a));
  }
  return answers;
}

std::string statusReport(const std::vector<StatusAnswer>& answers) {
  struct RankState {
    int pid;
    std::string host;
    uint64_t entered, finished;
    int64_t nowNs;
    std::vector<Json> inFlight;
  };
  struct Comm {
    std::string name;
    int nranks = 0;
    std::map<int, RankState> ranks;
  };
  std::map<std::string, Comm> comms;
  std::ostringstream out;
  for (const StatusAnswer& a : answers) {
    for (const std::string& line : a.lines) {
      Json j;
      try {
        j = Json::parse(line);
      } catch (const std::exception&) {
        continue;
      }
      Comm& c = comms[j["job"].str()];
      c.name = j["comm"].str();
      c.nranks = static_cast<int>(j["nranks"].integer());
      c.ranks[static_cast<int>(j["rank"].integer())] =
          RankState{a.pid,
                    j["host"].str(),
                    static_cast<uint64_t>(j["last_entered"].integer()),
                    static_cast<uint64_t>(j["last_finished"].integer()),
                    j["now_ns"].integer(),
                    j["in_flight"].items()};
    }
  }
  for (const auto& [job, c] : comms) {
    uint64_t front = 0;
    for (const auto& [rank, r] : c.ranks) front = std::max(front, r.entered);
    out << "communicator " << (c.name.empty() ? "" : "'" + c.name + "' ") << "(id " << job << ", "
        << c.nranks << " ranks): " << c.ranks.size() << " rank(s) on this host answered";
    if (front > 0) out << "; the furthest call entered is #" << front;
    out << "\n";
    for (const auto& [rank, r] : c.ranks) {
      out << "  rank " << rank << " (pid " << r.pid << " on " << r.host << "): last entered #"
          << r.entered << ", last finished #" << r.finished;
      if (r.entered < front) out << "  <- behind: it has not entered #" << front;
      out << "\n";
      for (const Json& call : r.inFlight) {
        const bool collective = call["kind"].str() == "collective";
        const int64_t since = call["started_ns"].integer() != 0 ? call["started_ns"].integer()
                                                                : call["queued_ns"].integer();
        out << "    " << call["state"].str() << " " << call["op"].str();
        if (collective) out << " #" << call["seq"].integer();
        out << " (" << call["bytes"].integer() << " bytes";
        if (!collective)
          out << ", peer " << call["peer"].integer() << ", tag " << call["tag"].integer();
        out << ") for " << secondsText(r.nowNs - since);
        if (call["waiting_for"].integer() >= 0)
          out << ", waiting for rank " << call["waiting_for"].integer();
        out << "\n";
      }
    }
    std::vector<int> silent;
    for (int r = 0; r < c.nranks; ++r)
      if (c.ranks.count(r) == 0) silent.push_back(r);
    if (!silent.empty()) {
      out << "  not heard from: ranks";
      for (int r : silent) out << " " << r;
      out << " (on other hosts, or their processes are below)\n";
    }
  }
  for (const StatusAnswer& a : answers)
    if (!a.answered) out << "process " << a.pid << " did not answer: " << a.why << "\n";
  if (answers.empty()) out << "no Loom process of this user has a status socket here\n";
  return out.str();
}

}  // namespace loom::tool
