// FdServer and fetchFds: descriptors arrive in order and refer to the owner's objects (memfds
// with known contents), across batches and across processes; every failure (no server, unknown
// key, a descriptor gone mid-answer, a caller that refuses one) is a clear false and leaks no
// descriptor.
#include "bootstrap/fd_passing.hpp"

#include <dirent.h>
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <string>
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

TEST(FdPassing, DescriptorsArriveInOrderAcrossBatches) {
  const size_t count = 2 * FdServer::kFdsPerMessage + 5;
  Objects objects(count);
  const std::string name = serverName();
  const size_t before = openDescriptors();
  {
    FdServer server(name, objects.source());
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
  ASSERT_EQ(write(go[1], "g", 1), 1);
  close(go[1]);
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "child status " << status;
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

TEST(FdPassing, UnknownKeyIsAClearFailure) {
  Objects objects(1);
  const std::string name = serverName();
  FdServer server(name, objects.source());
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
    std::string payload, why;
    size_t taken = 0;
    EXPECT_FALSE(fetchFds(
        name, 7, 2000, payload,
        [&](size_t, int, std::string&) {
          ++taken;
          return true;
        },
        why));
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

TEST(FdPassing, ANameInUseIsAnError) {
  Objects objects(1);
  const std::string name = serverName();
  FdServer first(name, objects.source());
  EXPECT_THROW(FdServer(name, objects.source()), Error);
}

}  // namespace
}  // namespace loom
