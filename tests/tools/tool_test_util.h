// Helpers for the stats and tool tests: a temporary directory, running a tool
// binary and capturing its output, a child process whose stdout is read line
// by line, and polling with a deadline for things other processes do.
// Thread-safety: none; use from the test thread.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <functional>
#include <string>
#include <vector>

namespace kvtier::testing {

// A fresh directory under $TMPDIR (or /tmp), removed with its files.
class TempDir {
 public:
  TempDir();
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

struct RunResult {
  int exit_code = -1;  // -1: killed by a signal or timed out
  std::string out;
  std::string err;
};

// Runs argv[0] with argv (and extra environment entries "NAME=value"),
// waits at most `timeout`, captures stdout and stderr.
RunResult Run(const std::vector<std::string>& argv, std::chrono::milliseconds timeout,
              const std::vector<std::string>& env = {});

// A running child with its stdout on a pipe; killed (SIGKILL) and reaped by
// the destructor if still running.
class Child {
 public:
  explicit Child(const std::vector<std::string>& argv);
  ~Child();
  Child(const Child&) = delete;
  Child& operator=(const Child&) = delete;
  pid_t pid() const { return pid_; }
  // The next line of stdout (without '\n'); false on EOF or timeout.
  bool ReadLine(std::string* line, std::chrono::milliseconds timeout);
  // Sends `sig` and waits for exit; returns the exit code, or -signal.
  int Stop(int sig, std::chrono::milliseconds timeout);

 private:
  pid_t pid_ = -1;
  int out_fd_ = -1;
  std::string buffered_;
};

// Calls `done` until it returns true or `timeout` passes; returns its last
// answer. For waiting on other processes only.
bool PollUntil(const std::function<bool()>& done, std::chrono::milliseconds timeout);

// Writes `data` to `path` (creating it with `mode`); false on error.
bool WriteFile(const std::string& path, const void* data, size_t len, int mode = 0600);
bool FileExists(const std::string& path);
// The whole of the file at `path` into *out; false if it cannot be read.
bool ReadFile(const std::string& path, std::string* out);

}  // namespace kvtier::testing
