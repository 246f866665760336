// preload_check: runs a program under LD_PRELOAD and checks what it did.
//
//   preload_check --preload LIST [--env NAME=VALUE]... [--compare]
//                 [--expect-rc N] [--stdout-has TEXT]... [--stderr-has TEXT]...
//                 [--stdout-regex RE]... [--stderr-regex RE]... [--timeout SECONDS]
//                 -- COMMAND [ARGS...]
//
// --compare runs COMMAND twice, without and with the preload (the --env
// variables in both runs), and fails unless exit status, stdout and stderr are
// identical. The other checks apply to the preloaded run. Exit status 0 when
// every check holds, 1 otherwise (with both runs' output on stderr).
// Thread-safety: single-threaded program.
#include <fcntl.h>
#include <poll.h>
#include <regex.h>
#include <signal.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace {

struct Run {
  int status = -1;  // exit code, or 128 + signal
  std::string out, err;
  bool timed_out = false;
};

struct Args {
  std::string preload;
  std::vector<std::string> env;
  bool compare = false;
  int expect_rc = -1;
  std::vector<std::string> stdout_has, stderr_has, stdout_regex, stderr_regex;
  int timeout_s = 120;
  std::vector<std::string> command;
};

// POSIX extended regular expression search (std::regex trips GCC 12's
// -Wmaybe-uninitialized in sanitizer builds).
bool Matches(const std::string& text, const std::string& re) {
  regex_t compiled;
  if (regcomp(&compiled, re.c_str(), REG_EXTENDED | REG_NOSUB) != 0) {
    fprintf(stderr, "preload_check: bad regular expression /%s/\n", re.c_str());
    exit(1);
  }
  bool found = regexec(&compiled, text.c_str(), 0, nullptr, 0) == 0;
  regfree(&compiled);
  return found;
}

double Now() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return double(ts.tv_sec) + double(ts.tv_nsec) / 1e9;
}

Run Execute(const Args& a, bool preload) {
  int out[2], err[2];
  if (pipe2(out, O_CLOEXEC) != 0 || pipe2(err, O_CLOEXEC) != 0) {
    perror("preload_check: pipe");
    exit(1);
  }
  pid_t pid = fork();
  if (pid < 0) {
    perror("preload_check: fork");
    exit(1);
  }
  if (pid == 0) {
    dup2(out[1], STDOUT_FILENO);
    dup2(err[1], STDERR_FILENO);
    unsetenv("LD_PRELOAD");
    for (const std::string& e : a.env) putenv(const_cast<char*>(e.c_str()));
    if (preload) setenv("LD_PRELOAD", a.preload.c_str(), 1);
    std::vector<char*> argv;
    for (const std::string& s : a.command) argv.push_back(const_cast<char*>(s.c_str()));
    argv.push_back(nullptr);
    execvp(argv[0], argv.data());
    fprintf(stderr, "preload_check: cannot run %s: %s\n", argv[0], strerror(errno));
    _exit(127);
  }
  close(out[1]);
  close(err[1]);
  Run r;
  pollfd fds[2] = {{out[0], POLLIN, 0}, {err[0], POLLIN, 0}};
  std::string* sinks[2] = {&r.out, &r.err};
  int open_fds = 2;
  double deadline = Now() + a.timeout_s;
  while (open_fds > 0) {
    int left_ms = static_cast<int>((deadline - Now()) * 1000);
    if (left_ms <= 0) {
      r.timed_out = true;
      kill(pid, SIGKILL);
      break;
    }
    if (poll(fds, 2, left_ms) < 0 && errno != EINTR) break;
    for (int i = 0; i < 2; ++i) {
      if (fds[i].fd < 0 || !(fds[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
      char buf[65536];
      ssize_t n = read(fds[i].fd, buf, sizeof buf);
      if (n > 0) {
        sinks[i]->append(buf, static_cast<size_t>(n));
      } else {
        close(fds[i].fd);
        fds[i].fd = -1;
        --open_fds;
      }
    }
  }
  for (pollfd& p : fds) {
    if (p.fd >= 0) close(p.fd);
  }
  int st = 0;
  waitpid(pid, &st, 0);
  r.status = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
  return r;
}

void Show(const char* label, const Run& r) {
  fprintf(stderr, "---- %s: exit status %d%s\n---- stdout:\n%s---- stderr:\n%s", label, r.status,
          r.timed_out ? " (timed out, killed)" : "", r.out.c_str(), r.err.c_str());
}

bool ParseArgs(int argc, char** argv, Args* a) {
  int i = 1;
  auto value = [&](const char* flag) -> std::string {
    if (i + 1 >= argc) {
      fprintf(stderr, "preload_check: %s needs a value\n", flag);
      exit(1);
    }
    return argv[++i];
  };
  for (; i < argc; ++i) {
    std::string f = argv[i];
    if (f == "--") {
      for (++i; i < argc; ++i) a->command.push_back(argv[i]);
      break;
    }
    if (f == "--preload")
      a->preload = value("--preload");
    else if (f == "--env")
      a->env.push_back(value("--env"));
    else if (f == "--compare")
      a->compare = true;
    else if (f == "--expect-rc")
      a->expect_rc = atoi(value("--expect-rc").c_str());
    else if (f == "--stdout-has")
      a->stdout_has.push_back(value("--stdout-has"));
    else if (f == "--stderr-has")
      a->stderr_has.push_back(value("--stderr-has"));
    else if (f == "--stdout-regex")
      a->stdout_regex.push_back(value("--stdout-regex"));
    else if (f == "--stderr-regex")
      a->stderr_regex.push_back(value("--stderr-regex"));
    else if (f == "--timeout")
      a->timeout_s = atoi(value("--timeout").c_str());
    else {
      fprintf(stderr, "preload_check: unknown flag %s\n", f.c_str());
      return false;
    }
  }
  if (a->command.empty() || a->preload.empty()) {
    fprintf(stderr, "preload_check: needs --preload LIST and -- COMMAND\n");
    return false;
  }
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  Args a;
  if (!ParseArgs(argc, argv, &a)) return 1;
  std::vector<std::string> failures;
  Run plain;
  if (a.compare) plain = Execute(a, false);
  Run pre = Execute(a, true);

  if (pre.timed_out) failures.push_back("the preloaded run timed out");
  if (a.compare) {
    if (plain.status != pre.status) failures.push_back("exit status differs");
    if (plain.out != pre.out) failures.push_back("stdout differs");
    if (plain.err != pre.err) failures.push_back("stderr differs");
  }
  if (a.expect_rc >= 0 && pre.status != a.expect_rc) {
    failures.push_back("exit status " + std::to_string(pre.status) + ", expected " +
                       std::to_string(a.expect_rc));
  }
  for (const std::string& t : a.stdout_has) {
    if (pre.out.find(t) == std::string::npos) failures.push_back("stdout lacks \"" + t + "\"");
  }
  for (const std::string& t : a.stderr_has) {
    if (pre.err.find(t) == std::string::npos) failures.push_back("stderr lacks \"" + t + "\"");
  }
  for (const std::string& re : a.stdout_regex) {
    if (!Matches(pre.out, re)) failures.push_back("stdout does not match /" + re + "/");
  }
  for (const std::string& re : a.stderr_regex) {
    if (!Matches(pre.err, re)) failures.push_back("stderr does not match /" + re + "/");
  }

  if (failures.empty()) {
    printf("preload_check: ok (exit status %d%s)\n%s", pre.status,
           a.compare ? ", same with and without the preload" : "", pre.out.c_str());
    return 0;
  }
  for (const std::string& f : failures) fprintf(stderr, "preload_check: FAILED: %s\n", f.c_str());
  if (a.compare) Show("without the preload", plain);
  Show(("with LD_PRELOAD=" + a.preload).c_str(), pre);
  return 1;
}
