// The control plane's news: rank 0 hears goodbyes, aborts and deaths and tells a rank that asks;
// its news service relays an abort while rank 0 itself makes no control call.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <string>
#include <thread>

#include "base/error.hpp"
#include "bootstrap/bootstrap.hpp"
#include "group_helpers.hpp"

namespace loom {
namespace {

constexpr const char* kGoodbye =
    "destroyed its communicator after entering allreduce #7 (finished)";

TEST(ControlNews, ALeafLearnsWhoLeftAndAfterWhichCall) {
  auto group = makeGroup(localRoot(JobSecret::random()), 3);
  group[2]->leave(kGoodbye);
  group[2].reset();
  for (int r : {0, 1}) {
    const std::string news = group[r]->news(300);
    EXPECT_NE(news.find(std::string("rank 2 ") + kGoodbye), std::string::npos) << news;
    // A goodbye is not a death: nobody relayed one.
    EXPECT_EQ(news.find("is gone"), std::string::npos) << news;
  }
}

TEST(ControlNews, ADeathWithoutAGoodbyeIsNews) {
  auto group = makeGroup(localRoot(JobSecret::random()), 3);
  group[2].reset();  // as a process that died: its connection closes without a word
  const std::string news = group[1]->news(300);
  EXPECT_NE(news.find("rank 2 is gone"), std::string::npos) << news;
}

TEST(ControlNews, Rank0sGoodbyeReachesEveryLeaf) {
  auto group = makeGroup(localRoot(JobSecret::random()), 3);
  group[0]->leave(kGoodbye);
  group[0].reset();
  for (int r : {1, 2}) {
    const std::string news = group[r]->news(300);
    EXPECT_NE(news.find(std::string("rank 0 ") + kGoodbye), std::string::npos) << news;
  }
}

TEST(ControlNews, AnAbortReachesTheOthersWhileRank0CallsNothing) {
  auto group = makeGroup(localRoot(JobSecret::random()), 3);
  group[2]->broadcastAbort("disk full");
  // Rank 0 makes no control call: its news service relays the abort.
  const Outcome seen = firstHealthFailure(*group[1], 5.0, 5);
  EXPECT_EQ(seen.code, loomRemoteError) << seen.message;
  EXPECT_NE(seen.message.find("rank 2 aborted: disk full"), std::string::npos) << seen.message;
}

// Rank 0 in a child process, stopped once the group has formed: a leaf that asks hears nothing,
// and says so, naming rank 0 (which relays the control plane) as the silent one.
TEST(ControlNews, AStoppedRank0IsNamedAsTheHubThatDoesNotAnswer) {
  UniqueId id = localRoot(JobSecret::random());
  int ready[2];
  ASSERT_EQ(pipe(ready), 0);
  const pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    close(ready[0]);
    try {
      Bootstrap b(id, 0, 2, "child", quickOptions(5000));
      b.barrier();
      (void)!write(ready[1], "R", 1);
      for (int i = 0; i < 300; ++i) usleep(100000);  // stopped, then killed, long before this ends
    } catch (...) {
    }
    _exit(1);
  }
  close(ready[1]);
  Bootstrap leaf(id, 1, 2, "parent", quickOptions(5000));
  leaf.barrier();
  char byte = 0;
  ASSERT_EQ(read(ready[0], &byte, 1), 1);
  close(ready[0]);
  kill(pid, SIGSTOP);
  int status = 0;  // stopped for sure, not still answering on its way to the stop
  ASSERT_EQ(waitpid(pid, &status, WUNTRACED), pid);
  ASSERT_TRUE(WIFSTOPPED(status));
  const std::string news = leaf.news(300);
  kill(pid, SIGKILL);
  waitpid(pid, nullptr, 0);
  EXPECT_NE(news.find("rank 0, which relays the control plane, did not answer within"),
            std::string::npos)
      << news;
}

}  // namespace
}  // namespace loom
