// FdServer and fetchFds: descriptors arrive in order and refer to the owner's objects (memfds
// with known contents), across batches and across processes; every failure (no server, unknown
// key, a descriptor gone mid-answer, a caller that refuses one) is a clear false and leaks no
// descriptor.
#include "bootstrap/fd_passing.hpp"

#include <dirent.h>
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

#include "base/error.hpp"
#include "base/shm_segment.hpp"

namespace loom {
namespace {

size_t openDescriptors() {
  size_t n = 0;
  DIR* d = opendir("/proc/self/fd");
  if (d == nullptr) return 0;
  while (readdir(d) != nullptr) ++n;
  closedir(d);
  return n;
}

std::string contentOf(int fd) {
  char buffer[64] = {};
  ssize_t n = pread(fd, buffer, sizeof(buffer), 0);
  return n > 0 ? std::string(buffer, static_cast<size_t>(n)) : std::string();
}

// `count` memfds, the i-th holding "object i"; served under key 7 with payload "sizes".
class Objects {
 public:
  explicit Objects(size_t count) {
    for (size_t i = 0; i < count; ++i) {
      Fd fd(memfd_create("fd-passing-test", MFD_CLOEXEC));
      const std::string text = "object " + std::to_string(i);
      EXPECT_EQ(write(fd.get(), text.data(), text.size()), static_cast<ssize_t>(text.size()));
      fds_.push_back(std::move(fd));
    }
  }
  FdServer::Source source(size_t failAt = SIZE_MAX) {
    FdServer::Source s;
    s.describe = [this](uint64_t key, std::string& payload, size_t& count) {
      if (key != 7) return false;
      payload = "sizes";
      count = fds_.size();
      return true;
    };
    s.open = [this, failAt](uint64_t, size_t index, std::string& why) {
      if (index == failAt) {
        why = "withdrawn meanwhile";
        return -1;
      }
      return dup(fds_[index].get());
    };
    return s;
  }

 private:
  std::vector<Fd> fds_;
};

std::string serverName() { return ShmSegment::uniqueName("loom-fd-test-"); }

// Fetches key 7 from `name`, counting the descriptors taken; fetchFds' result.
bool fetchCounting(const std::string& name, size_t& taken, std::string& why) {
  std::string payload;
  taken = 0;
  return fetchFds(
      name, 7, 2000, payload,
      [&](size_t, int, std::string&) {
        ++taken;
        return true;
      },
      why);
}

TEST(FdPassing, DescriptorsArriveInOrderAcrossBatches) {
  const size_t count = 2 * FdServer::kFdsPerMessage + 5;
  Objects objects(count);
  const std::string name = serverName();
  const size_t before = openDescriptors();
  {
    FdServer server(name, objects.source());
    server.start();
    std::string payload, why;
    std::vector<std::string> seen;
    ASSERT_TRUE(fetchFds(
        name, 7, 2000, payload,
        [&](size_t index, int fd, std::string&) {
          EXPECT_EQ(index, seen.size());
          seen.push_back(contentOf(fd));
          return true;
        },
        why))
        << why;
    EXPECT_EQ(payload, "sizes");
    ASSERT_EQ(seen.size(), count);
    for (size_t i = 0; i < count; ++i) EXPECT_EQ(seen[i], "object " + std::to_string(i));
    // A second fetch from the same server works as well.
    seen.clear();
    ASSERT_TRUE(fetchFds(
        name, 7, 2000, payload,
        [&](size_t, int fd, std::string&) {
          seen.push_back(contentOf(fd));
          return true;
        },
        why))
        << why;
    EXPECT_EQ(seen.size(), count);
  }
  EXPECT_EQ(openDescriptors(), before) << "descriptors leaked";
}

TEST(FdPassing, AnotherProcessReceivesTheSameObjects) {
  Objects objects(3);
  const std::string name = serverName();
  int go[2];
  ASSERT_EQ(pipe(go), 0);
  // Forked before the server's thread exists: the child only fetches.
  pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    close(go[1]);
    char c = 0;
    if (read(go[0], &c, 1) != 1) _exit(2);
    std::string payload, why;
    std::vector<std::string> seen;
    bool ok = fetchFds(
        name, 7, 2000, payload,
        [&](size_t, int fd, std::string&) {
          seen.push_back(contentOf(fd));
          return true;
        },
        why);
    _exit(ok && payload == "sizes" && seen.size() == 3 && seen[2] == "object 2" ? 0 : 1);
  }
  close(go[0]);
  FdServer server(name, objects.source());
  server.start();
  ASSERT_EQ(write(go[1], "g", 1), 1);
  close(go[1]);
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "child status " << status;
}

// Linux counts the descriptors a user has in flight against its RLIMIT_NOFILE (root with
// CAP_SYS_RESOURCE is exempt): a server that sent batches faster than its client took them ran
// past a 1024 limit after about a thousand descriptors (a 2 GiB buffer in 2 MiB allocations). As
// an unprivileged user with a limit of 256, 3000 descriptors pass, each created when it is sent,
// to a client that takes its time over the first.
TEST(FdPassing, ThousandsOfDescriptorsPassUnderALowDescriptorLimit) {
  const std::string name = serverName();
  pid_t child = fork();  // before any thread: the child runs the server and the client
  ASSERT_GE(child, 0);
  if (child == 0) {
    if (geteuid() == 0 && (setgid(65534) != 0 || setuid(65534) != 0)) _exit(3);
    const rlimit limit{256, 256};
    if (setrlimit(RLIMIT_NOFILE, &limit) != 0) _exit(4);
    constexpr size_t kCount = 3000;
    FdServer::Source source;
    source.describe = [](uint64_t, std::string& payload, size_t& count) {
      payload = "many";
      count = kCount;
      return true;
    };
    source.open = [](uint64_t, size_t index, std::string& why) {
      Fd fd(memfd_create("fd-passing-many", MFD_CLOEXEC));
      const std::string text = "object " + std::to_string(index);
      if (!fd.valid() || write(fd.get(), text.data(), text.size()) < 0) {
        why = "memfd_create";
        return -1;
      }
      return fd.release();
    };
    FdServer server(name, source);
    server.start();
    std::string payload, why;
    size_t seen = 0, wrong = 0;
    const bool ok = fetchFds(
        name, 1, 10000, payload,
        [&](size_t index, int fd, std::string&) {
          if (index == 0) usleep(200 * 1000);  // a slow first import: the server must wait
          wrong += contentOf(fd) != "object " + std::to_string(index);
          ++seen;
          return true;
        },
        why);
    if (!ok) std::fprintf(stderr, "fetch failed after %zu: %s\n", seen, why.c_str());
    _exit(ok && seen == kCount && wrong == 0 ? 0 : 1);
  }
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "child status " << status;
}

// Peers fetching at the same time are answered at the same time: each takes 3 ms over every
// descriptor (about 0.6 s a fetch, 0.4 s of it with the server waiting for acknowledgements),
// so answered one after another the last ones would run past their 1.5 s deadline.
TEST(FdPassing, PeersFetchingAtOnceAreAnsweredAtOnce) {
  Objects objects(3 * FdServer::kFdsPerMessage);
  const std::string name = serverName();
  FdServer server(name, objects.source());
  server.start();
  constexpr int kPeers = 6;
  std::atomic<int> fetched{0};
  std::vector<std::thread> peers;
  for (int p = 0; p < kPeers; ++p) {
    peers.emplace_back([&] {
      std::string payload, why;
      const bool ok = fetchFds(
          name, 7, 1500, payload,
          [](size_t, int, std::string&) {
            usleep(3000);
            return true;
          },
          why);
      if (ok)
        fetched.fetch_add(1);
      else
        ADD_FAILURE() << why;
    });
  }
  for (std::thread& t : peers) t.join();
  EXPECT_EQ(fetched.load(), kPeers);
}

TEST(FdPassing, NoServerFailsAtOnce) {
  std::string payload, why;
  const auto start = std::chrono::steady_clock::now();
  EXPECT_FALSE(fetchFds(
      serverName(), 7, 5000, payload, [](size_t, int, std::string&) { return true; }, why));
  EXPECT_NE(why.find("connecting to descriptor server"), std::string::npos) << why;
  EXPECT_NE(why.find("its process is gone"), std::string::npos) << why;
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(4));
}

// One deadline bounds the whole exchange, however the server stalls.
TEST(FdPassing, AServerThatStallsEndsTheFetchAtItsDeadline) {
  FdServer::Source slow;
  slow.describe = [](uint64_t, std::string&, size_t& count) {
    usleep(800 * 1000);
    count = 0;
    return true;
  };
  slow.open = [](uint64_t, size_t, std::string&) { return -1; };
  const std::string name = serverName();
  FdServer server(name, slow);
  server.start();
  std::string payload, why;
  const auto start = std::chrono::steady_clock::now();
  EXPECT_FALSE(fetchFds(
      name, 7, 200, payload, [](size_t, int, std::string&) { return true; }, why));
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::milliseconds(600));
  EXPECT_NE(why.find("timed out"), std::string::npos) << why;
}

TEST(FdPassing, UnknownKeyIsAClearFailure) {
  Objects objects(1);
  const std::string name = serverName();
  FdServer server(name, objects.source());
  server.start();
  std::string payload, why;
  EXPECT_FALSE(fetchFds(
      name, 8, 2000, payload, [](size_t, int, std::string&) { return true; }, why));
  EXPECT_NE(why.find("nothing under key 8"), std::string::npos) << why;
}

TEST(FdPassing, ADescriptorGoneMidAnswerFailsWithTheOwnersReasonAndLeaksNothing) {
  Objects objects(FdServer::kFdsPerMessage + 10);
  const std::string name = serverName();
  const size_t before = openDescriptors();
  {
    FdServer server(name, objects.source(FdServer::kFdsPerMessage + 3));
    server.start();
    std::string why;
    size_t taken = 0;
    EXPECT_FALSE(fetchCounting(name, taken, why));
    EXPECT_EQ(taken, FdServer::kFdsPerMessage);  // the first batch was whole
    EXPECT_NE(why.find("withdrawn meanwhile"), std::string::npos) << why;
  }
  EXPECT_EQ(openDescriptors(), before) << "descriptors leaked";
}

TEST(FdPassing, ACallerThatRefusesADescriptorEndsTheFetch) {
  Objects objects(10);
  const std::string name = serverName();
  const size_t before = openDescriptors();
  {
    FdServer server(name, objects.source());
    server.start();
    std::string payload, why;
    size_t taken = 0;
    EXPECT_FALSE(fetchFds(
        name, 7, 2000, payload,
        [&](size_t index, int, std::string& reason) {
          ++taken;
          if (index < 4) return true;
          reason = "cannot map it";
          return false;
        },
        why));
    EXPECT_EQ(taken, 5u);
    EXPECT_EQ(why, "cannot map it");
  }
  EXPECT_EQ(openDescriptors(), before) << "descriptors leaked";
}

// The name is taken when the server is made, before it answers anyone.
TEST(FdPassing, ANameInUseIsAnError) {
  Objects objects(1);
  const std::string name = serverName();
  FdServer first(name, objects.source());
  EXPECT_THROW(FdServer(name, objects.source()), Error);
}

// Abstract names are visible to every user: a server another user bound under the expected name
// is not trusted with the request.
TEST(FdPassing, AServerOfAnotherUserIsRefused) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root to run a server as another user";
  const std::string name = serverName();
  int ready[2], done[2];
  ASSERT_EQ(pipe(ready), 0);
  ASSERT_EQ(pipe(done), 0);
  pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    if (setgid(65534) != 0 || setuid(65534) != 0) _exit(3);
    Objects objects(1);
    FdServer squatter(name, objects.source());
    squatter.start();
    char c = 0;
    if (write(ready[1], "r", 1) != 1 || read(done[0], &c, 1) != 1) _exit(2);
    _exit(0);
  }
  char c = 0;
  ASSERT_EQ(read(ready[0], &c, 1), 1);
  std::string why;
  size_t taken = 0;
  EXPECT_FALSE(fetchCounting(name, taken, why));
  EXPECT_EQ(taken, 0u);
  EXPECT_NE(why.find("runs as user 65534"), std::string::npos) << why;
  ASSERT_EQ(write(done[1], "d", 1), 1);
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "child status " << status;
  for (int fd : {ready[0], ready[1], done[0], done[1]}) close(fd);
}

}  // namespace
}  // namespace loom
