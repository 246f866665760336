// LoggedProcess: a child program (the demo engine and the tools in the
// end-to-end test) with a controlled environment and its stdout and stderr in
// files, so it can write freely while the test looks at its output.
//
// The environment is this process's minus every KVTIER_* and LD_PRELOAD entry
// (a setting in the caller's shell must not change the test), plus the given
// entries. ASAN_OPTIONS and UBSAN_OPTIONS given are appended to inherited
// ones, so a sanitizer setting of the CI run is kept.
// Thread-safety: none; use from the test thread.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <string>
#include <vector>

namespace kvtier::testing {

class LoggedProcess {
 public:
  // Starts argv[0] (a path) with `env` ("NAME=value") added; its stdout and
  // stderr go to `log_prefix`.out and `log_prefix`.err.
  LoggedProcess(const std::vector<std::string>& argv, const std::vector<std::string>& env,
                const std::string& log_prefix);
  // Kills (SIGKILL) and reaps the child if it still runs.
  ~LoggedProcess();
  LoggedProcess(const LoggedProcess&) = delete;
  LoggedProcess& operator=(const LoggedProcess&) = delete;

  bool started() const { return pid_ > 0; }
  pid_t pid() const { return pid_; }
  std::string Stdout() const;
  std::string Stderr() const;

  // Polls stdout until it contains `text`. False at the deadline, or as
  // soon as the child has exited without printing it.
  bool WaitForOutput(const std::string& text, std::chrono::milliseconds timeout);
  // Waits for the child to exit: its exit status, -signal if a signal ended
  // it, or kTimedOut (the child is left running for the destructor).
  int Wait(std::chrono::milliseconds timeout);
  static constexpr int kTimedOut = -1000;

 private:
  // Reaps the child if it has exited; true once it has.
  bool Reap();

  pid_t pid_ = -1;
  bool exited_ = false;
  int exit_code_ = -1;
  std::string out_path_;
  std::string err_path_;
};

}  // namespace kvtier::testing
