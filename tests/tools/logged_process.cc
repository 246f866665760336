// LoggedProcess (see logged_process.h).
#include "tests/tools/logged_process.h"

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <thread>

#include "tests/tools/tool_test_util.h"

extern char** environ;

namespace kvtier::testing {
namespace {

using Clock = std::chrono::steady_clock;

// Polling interval while waiting on the child (another process).
constexpr auto kPoll = std::chrono::milliseconds(5);

std::string NameOf(const std::string& entry) { return entry.substr(0, entry.find('=')); }

bool Dropped(const std::string& name) {
  return name == "LD_PRELOAD" || name.rfind("KVTIER_", 0) == 0;
}

std::vector<std::string> ChildEnvironment(const std::vector<std::string>& added) {
  std::vector<std::string> out;
  for (char** e = environ; *e != nullptr; ++e) {
    if (!Dropped(NameOf(*e))) out.push_back(*e);
  }
  for (const std::string& entry : added) {
    const std::string name = NameOf(entry);
    const bool append = name == "ASAN_OPTIONS" || name == "UBSAN_OPTIONS";
    bool merged = false;
    for (std::string& existing : out) {
      if (NameOf(existing) != name) continue;
      if (append) {
        existing += ":" + entry.substr(name.size() + 1);
      } else {
        existing = entry;
      }
      merged = true;
    }
    if (!merged) out.push_back(entry);
  }
  return out;
}

std::vector<char*> CStrings(std::vector<std::string>& v) {
  std::vector<char*> out;
  for (std::string& s : v) out.push_back(s.data());
  out.push_back(nullptr);
  return out;
}

// The file's text; "" where it cannot be read.
std::string ReadAll(const std::string& path) {
  std::string text;
  ReadFile(path, &text);
  return text;
}

}  // namespace

LoggedProcess::LoggedProcess(const std::vector<std::string>& argv,
                             const std::vector<std::string>& env, const std::string& log_prefix)
    : out_path_(log_prefix + ".out"), err_path_(log_prefix + ".err") {
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  const int flags = O_WRONLY | O_CREAT | O_TRUNC;
  posix_spawn_file_actions_addopen(&actions, 1, out_path_.c_str(), flags, 0600);
  posix_spawn_file_actions_addopen(&actions, 2, err_path_.c_str(), flags, 0600);
  std::vector<std::string> args = argv;
  std::vector<std::string> envs = ChildEnvironment(env);
  std::vector<char*> c_args = CStrings(args);
  std::vector<char*> c_env = CStrings(envs);
  if (posix_spawn(&pid_, c_args[0], &actions, nullptr, c_args.data(), c_env.data()) != 0) {
    pid_ = -1;
  }
  posix_spawn_file_actions_destroy(&actions);
}

LoggedProcess::~LoggedProcess() {
  if (pid_ > 0 && !exited_) {
    kill(pid_, SIGKILL);
    int status;
    waitpid(pid_, &status, 0);
  }
}

std::string LoggedProcess::Stdout() const { return ReadAll(out_path_); }
std::string LoggedProcess::Stderr() const { return ReadAll(err_path_); }

bool LoggedProcess::Reap() {
  if (exited_) return true;
  if (pid_ <= 0) return false;
  int status = 0;
  if (waitpid(pid_, &status, WNOHANG) != pid_) return false;
  exited_ = true;
  exit_code_ = WIFEXITED(status) ? WEXITSTATUS(status) : -WTERMSIG(status);
  return true;
}

bool LoggedProcess::WaitForOutput(const std::string& text, std::chrono::milliseconds timeout) {
  const auto deadline = Clock::now() + timeout;
  while (true) {
    // Reap before reading: output written before the exit is then complete.
    const bool gone = Reap();
    if (Stdout().find(text) != std::string::npos) return true;
    if (gone || pid_ <= 0 || Clock::now() >= deadline) return false;
    // Polls a condition under a deadline; no race depends on this pause.
    std::this_thread::sleep_for(kPoll);
  }
}

int LoggedProcess::Wait(std::chrono::milliseconds timeout) {
  const auto deadline = Clock::now() + timeout;
  while (!Reap()) {
    if (pid_ <= 0) return -1;
    if (Clock::now() >= deadline) return kTimedOut;
    // Polls a condition under a deadline; no race depends on this pause.
    std::this_thread::sleep_for(kPoll);
  }
  return exit_code_;
}

}  // namespace kvtier::testing
