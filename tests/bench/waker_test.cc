// libkvtier-bench-waker.so, loaded as a preload would load it: its thread
// starts, and wakes at its period; BENCH_WAKER_MS=0 starts none, and a value
// that does not parse keeps the default. Each case loads the library in a
// child process, since its constructor runs once a process.
#include <dlfcn.h>
#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <string>

namespace {

// The voluntary context switches of this process's thread named
// "bench-waker"; -1 when there is none.
long WakerSwitches() {
  for (const auto& task : std::filesystem::directory_iterator("/proc/self/task")) {
    std::string comm;
    std::getline(std::ifstream(task.path() / "comm"), comm);
    if (comm != "bench-waker") continue;
    std::ifstream status(task.path() / "status");
    for (std::string line; std::getline(status, line);) {
      if (line.rfind("voluntary_ctxt_switches:", 0) == 0) return std::stol(line.substr(24));
    }
  }
  return -1;
}

// In a child: sets BENCH_WAKER_MS (unset for nullptr), loads the library,
// and exits 0 when a waker thread exists and has woken `wakes` times within
// 5 s, 1 when none exists, 2 when it exists but did not wake, 3 when the
// library did not load.
int LoadInChild(const char* ms, long wakes) {
  const pid_t pid = fork();
  if (pid == 0) {
    if (ms != nullptr) setenv("BENCH_WAKER_MS", ms, 1);
    if (ms == nullptr) unsetenv("BENCH_WAKER_MS");
    if (dlopen(KVTIER_BENCH_WAKER_LIB, RTLD_NOW) == nullptr) _exit(3);
    if (WakerSwitches() < 0) _exit(1);
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
    while (WakerSwitches() < wakes) {
      if (std::chrono::steady_clock::now() > deadline) _exit(2);
      usleep(1000);  // polls the condition; the deadline bounds it
    }
    _exit(0);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

TEST(BenchWakerTest, ItsThreadWakesAtItsPeriod) { EXPECT_EQ(LoadInChild("1", 20), 0); }

TEST(BenchWakerTest, ItsDefaultPeriodWakesToo) { EXPECT_EQ(LoadInChild(nullptr, 3), 0); }

TEST(BenchWakerTest, AValueThatDoesNotParseKeepsTheDefault) {
  EXPECT_EQ(LoadInChild("ten", 3), 0);
  EXPECT_EQ(LoadInChild("-5", 3), 0);
}

TEST(BenchWakerTest, ZeroStartsNoThread) { EXPECT_EQ(LoadInChild("0", 1), 1); }

// A period of a second: 300 ms after the load the thread has gone to sleep
// once (its one voluntary switch), where the default's would have woken
// about 30 times.
TEST(BenchWakerTest, ALongPeriodWakesRarely) {
  const pid_t pid = fork();
  if (pid == 0) {
    setenv("BENCH_WAKER_MS", "1000", 1);
    if (dlopen(KVTIER_BENCH_WAKER_LIB, RTLD_NOW) == nullptr) _exit(3);
    const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(300);
    while (std::chrono::steady_clock::now() < until) usleep(10000);
    const long switches = WakerSwitches();
    _exit(switches < 0 ? 1 : switches <= 2 ? 0 : 2);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0);
}

}  // namespace
