// ExpectKilledSpillerLeavesNoFile: the kill -9 check shared by the store's
// and the simulated GPU's crash tests. Thread-safety: test thread only;
// forks.
#pragma once

#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <string>

#include "tests/storage/storage_test_util.h"

namespace kvtier::storage_test {

// The child's work: spill into `dir` forever (refusing O_TMPFILE when asked,
// so the open+unlink fallback runs), writing one byte to `ready` after the
// first spill. Never returns.
using SpillForeverFn = void (*)(const std::string& dir, bool refuse_tmpfile, int ready);

// With O_TMPFILE and with open+unlink: forks a child running
// `spill_forever`, waits until it spills, checks that no spill file is
// visible, SIGKILLs it mid-spill and checks the directory is still empty.
inline void ExpectKilledSpillerLeavesNoFile(SpillForeverFn spill_forever) {
  for (bool refuse_tmpfile : {false, true}) {
    SCOPED_TRACE(refuse_tmpfile ? "open+unlink" : "O_TMPFILE");
    TempDir tmp;
    ASSERT_TRUE(tmp.ok());
    int fds[2];
    ASSERT_EQ(pipe(fds), 0);
    // The caller has no device or thread of its own: the child builds them.
    const pid_t pid = fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      close(fds[0]);
      spill_forever(tmp.path(), refuse_tmpfile, fds[1]);
      _exit(1);  // not reached
    }
    close(fds[1]);
    // Waiting on another process: poll with a deadline.
    struct pollfd p = {fds[0], POLLIN, 0};
    const int ready = poll(&p, 1, 20000);
    char byte = 0;
    const bool spilling = ready == 1 && read(fds[0], &byte, 1) == 1;
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

}  // namespace kvtier::storage_test
