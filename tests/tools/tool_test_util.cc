// Helpers for the stats and tool tests (see tool_test_util.h).
#include "tests/tools/tool_test_util.h"

#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <thread>

extern char** environ;

namespace kvtier::testing {
namespace {

using Clock = std::chrono::steady_clock;

void RemoveTree(const std::string& path) {
  DIR* d = opendir(path.c_str());
  if (d == nullptr) return;
  while (dirent* e = readdir(d)) {
    std::string name = e->d_name;
    if (name == "." || name == "..") continue;
    std::string child = path + "/" + name;
    struct stat st;
    if (lstat(child.c_str(), &st) == 0 && S_ISDIR(st.st_mode)) {
      RemoveTree(child);
    } else {
      unlink(child.c_str());
    }
  }
  closedir(d);
  rmdir(path.c_str());
}

std::vector<char*> CStrings(const std::vector<std::string>& v) {
  std::vector<char*> out;
  for (const std::string& s : v) out.push_back(const_cast<char*>(s.c_str()));
  out.push_back(nullptr);
  return out;
}

// Spawns argv with stdout (and optionally stderr) on pipes.
pid_t Spawn(const std::vector<std::string>& argv, const std::vector<std::string>& extra_env,
            int* out_fd, int* err_fd) {
  int out_pipe[2], err_pipe[2] = {-1, -1};
  if (pipe2(out_pipe, O_CLOEXEC) != 0) return -1;
  if (err_fd != nullptr && pipe2(err_pipe, O_CLOEXEC) != 0) return -1;
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, out_pipe[1], 1);
  if (err_fd != nullptr) posix_spawn_file_actions_adddup2(&actions, err_pipe[1], 2);
  std::vector<std::string> env_strings;
  for (char** e = environ; *e != nullptr; ++e) env_strings.push_back(*e);
  for (const std::string& e : extra_env) env_strings.push_back(e);
  std::vector<char*> args = CStrings(argv);
  std::vector<char*> env = CStrings(env_strings);
  pid_t pid = -1;
  if (posix_spawn(&pid, args[0], &actions, nullptr, args.data(), env.data()) != 0) pid = -1;
  posix_spawn_file_actions_destroy(&actions);
  close(out_pipe[1]);
  *out_fd = out_pipe[0];
  if (err_fd != nullptr) {
    close(err_pipe[1]);
    *err_fd = err_pipe[0];
  }
  return pid;
}

int DecodeStatus(int status) {
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return -WTERMSIG(status);
  return -1;
}

// waitpid with a deadline: polls (the child is another process).
bool WaitExit(pid_t pid, Clock::time_point deadline, int* code) {
  while (true) {
    int status = 0;
    pid_t r = waitpid(pid, &status, WNOHANG);
    if (r == pid) {
      *code = DecodeStatus(status);
      return true;
    }
    if (r < 0) return false;
    if (Clock::now() >= deadline) return false;
    // Polls a condition under a deadline; no race depends on this pause.
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
}

}  // namespace

TempDir::TempDir() {
  const char* base = getenv("TMPDIR");
  std::string tmpl =
      std::string(base != nullptr && *base != '\0' ? base : "/tmp") + "/kvtier-test.XXXXXX";
  std::vector<char> buf(tmpl.begin(), tmpl.end());
  buf.push_back('\0');
  if (mkdtemp(buf.data()) != nullptr) path_ = buf.data();
}

TempDir::~TempDir() {
  if (!path_.empty()) RemoveTree(path_);
}

RunResult Run(const std::vector<std::string>& argv, std::chrono::milliseconds timeout,
              const std::vector<std::string>& env) {
  RunResult result;
  int out_fd = -1, err_fd = -1;
  pid_t pid = Spawn(argv, env, &out_fd, &err_fd);
  if (pid < 0) {
    result.err = "cannot spawn " + argv[0];
    if (out_fd >= 0) close(out_fd);
    if (err_fd >= 0) close(err_fd);
    return result;
  }
  const auto deadline = Clock::now() + timeout;
  pollfd fds[2] = {{out_fd, POLLIN, 0}, {err_fd, POLLIN, 0}};
  std::string* sinks[2] = {&result.out, &result.err};
  int open_fds = 2;
  while (open_fds > 0) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    if (left.count() <= 0) break;
    if (poll(fds, 2, static_cast<int>(left.count())) <= 0) continue;
    for (int i = 0; i < 2; ++i) {
      if (fds[i].fd < 0 || fds[i].revents == 0) continue;
      char buf[4096];
      ssize_t n = read(fds[i].fd, buf, sizeof buf);
      if (n > 0) {
        sinks[i]->append(buf, n);
      } else if (n == 0 || errno != EINTR) {
        close(fds[i].fd);
        fds[i].fd = -1;
        --open_fds;
      }
    }
  }
  for (pollfd& p : fds) {
    if (p.fd >= 0) close(p.fd);
  }
  if (!WaitExit(pid, deadline, &result.exit_code)) {
    kill(pid, SIGKILL);
    int status;
    waitpid(pid, &status, 0);
    result.exit_code = -1;
    result.err += "\n[timed out]";
  }
  return result;
}

Child::Child(const std::vector<std::string>& argv) { pid_ = Spawn(argv, {}, &out_fd_, nullptr); }

Child::~Child() {
  if (pid_ > 0) {
    kill(pid_, SIGKILL);
    int status;
    waitpid(pid_, &status, 0);
  }
  if (out_fd_ >= 0) close(out_fd_);
}

bool Child::ReadLine(std::string* line, std::chrono::milliseconds timeout) {
  const auto deadline = Clock::now() + timeout;
  while (true) {
    size_t nl = buffered_.find('\n');
    if (nl != std::string::npos) {
      *line = buffered_.substr(0, nl);
      buffered_.erase(0, nl + 1);
      return true;
    }
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    if (left.count() <= 0 || out_fd_ < 0) return false;
    pollfd p{out_fd_, POLLIN, 0};
    if (poll(&p, 1, static_cast<int>(left.count())) <= 0) continue;
    char buf[1024];
    ssize_t n = read(out_fd_, buf, sizeof buf);
    if (n <= 0) return false;
    buffered_.append(buf, n);
  }
}

int Child::Stop(int sig, std::chrono::milliseconds timeout) {
  if (pid_ <= 0) return -1;
  kill(pid_, sig);
  int code = -1;
  if (!WaitExit(pid_, Clock::now() + timeout, &code)) return -1000;  // destructor kills it
  pid_ = -1;
  return code;
}

bool PollUntil(const std::function<bool()>& done, std::chrono::milliseconds timeout) {
  const auto deadline = Clock::now() + timeout;
  while (true) {
    if (done()) return true;
    if (Clock::now() >= deadline) return false;
    // Polls a condition under a deadline; no race depends on this pause.
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

bool WriteFile(const std::string& path, const void* data, size_t len, int mode) {
  int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, mode);
  if (fd < 0) return false;
  bool ok = write(fd, data, len) == static_cast<ssize_t>(len);
  close(fd);
  return ok;
}

bool FileExists(const std::string& path) {
  struct stat st;
  return lstat(path.c_str(), &st) == 0;
}

bool ReadFile(const std::string& path, std::string* out) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return false;
  std::ostringstream text;
  text << in.rdbuf();
  *out = text.str();
  return !in.bad();
}

}  // namespace kvtier::testing
