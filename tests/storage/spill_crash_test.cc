// A process SIGKILLed while spilling leaves nothing in the spill directory,
// with O_TMPFILE and with the open+unlink fallback.
#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include "runtime/storage/fault_env.h"
#include "runtime/storage/spill_store.h"
#include "storage_test_util.h"

namespace kvtier {
namespace {

using storage_test::kTestPage;
using storage_test::Pattern;
using storage_test::SmallConfig;
using storage_test::TempDir;

// Child: spills and frees pages forever; writes one byte to `ready` after
// the first spill. Never returns.
[[noreturn]] void SpillForever(const std::string& dir, bool refuse_tmpfile, int ready) {
  FaultEnv env(Env::Default());
  env.RefuseTmpfile(refuse_tmpfile);
  Result<std::unique_ptr<SpillStore>> s = SpillStore::Create(SmallConfig(dir, 64), &env, nullptr);
  if (!s.ok()) _exit(2);
  std::vector<uint8_t> page = Pattern(kTestPage, 1);
  bool told = false;
  for (uint64_t i = 0;; ++i) {
    Result<SpillSlot> r = s.value()->Write(page.data(), page.size());
    if (!r.ok()) _exit(3);
    if (i % 2) s.value()->Free(r.value().index);
    if (!told) {
      told = write(ready, "x", 1) == 1;
      if (!told) _exit(4);
    }
  }
}

TEST(SpillCrashTest, KilledSpillerLeavesNoFile) {
  for (bool refuse_tmpfile : {false, true}) {
    SCOPED_TRACE(refuse_tmpfile ? "open+unlink" : "O_TMPFILE");
    TempDir tmp;
    ASSERT_TRUE(tmp.ok());
    int fds[2];
    ASSERT_EQ(pipe(fds), 0);
    pid_t pid = fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      close(fds[0]);
      SpillForever(tmp.path(), refuse_tmpfile, fds[1]);
    }
    close(fds[1]);
    // Waiting on another process: poll with a deadline.
    struct pollfd p = {fds[0], POLLIN, 0};
    int ready = poll(&p, 1, 20000);
    char byte = 0;
    bool spilling = ready == 1 && read(fds[0], &byte, 1) == 1;
    close(fds[0]);
    EXPECT_TRUE(spilling) << "the child never spilled a page";
    EXPECT_TRUE(tmp.Entries().empty()) << "a spill file is visible while spilling";
    ASSERT_EQ(kill(pid, SIGKILL), 0);
    int status = 0;
    ASSERT_EQ(waitpid(pid, &status, 0), pid);
    EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL) << "child status " << status;
    EXPECT_TRUE(tmp.Entries().empty());
  }
}

}  // namespace
}  // namespace kvtier
