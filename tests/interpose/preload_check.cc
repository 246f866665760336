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
#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <regex.h>
#include <signal.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
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

std::string ReadSmall(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  std::string s = text.str();
  while (!s.empty() && s.back() == '\n') s.pop_back();
  return s;
}

// The process PID and its descendants, parents first (from /proc/*/stat).
std::vector<pid_t> ProcessTree(pid_t root) {
  std::vector<std::pair<pid_t, pid_t>> parent_of;  // (pid, ppid)
  if (DIR* d = opendir("/proc")) {
    while (dirent* e = readdir(d)) {
      const pid_t p = atoi(e->d_name);
      if (p <= 0) continue;
      // "pid (comm) state ppid ...": comm may hold spaces, so read after ')'.
      const std::string stat = ReadSmall("/proc/" + std::to_string(p) + "/stat");
      const size_t close = stat.rfind(')');
      if (close == std::string::npos) continue;
      char state = 0;
      int ppid = 0;
      if (sscanf(stat.c_str() + close + 1, " %c %d", &state, &ppid) == 2)
        parent_of.emplace_back(p, ppid);
    }
    closedir(d);
  }
  std::vector<pid_t> tree{root};
  for (size_t i = 0; i < tree.size(); ++i) {
    for (const auto& [p, pp] : parent_of)
      if (pp == tree[i]) tree.push_back(p);
  }
  return tree;
}

// What a hung run was doing, for the log: every thread of the process tree
// with its state, kernel wait channel and (when gdb is installed) its stack.
void DescribeHang(pid_t pid) {
  fprintf(stderr, "---- timed out; what each process was doing:\n");
  for (pid_t p : ProcessTree(pid)) {
    const std::string dir = "/proc/" + std::to_string(p);
    std::string cmdline = ReadSmall(dir + "/cmdline");
    std::replace(cmdline.begin(), cmdline.end(), '\0', ' ');
    fprintf(stderr, "-- pid %d: %s\n", p, cmdline.c_str());
    if (DIR* d = opendir((dir + "/task").c_str())) {
      while (dirent* e = readdir(d)) {
        if (e->d_name[0] == '.') continue;
        const std::string t = dir + "/task/" + e->d_name;
        const std::string stat = ReadSmall(t + "/stat");
        const size_t close = stat.rfind(')');
        fprintf(stderr, "   tid %s %s state %c wchan %s syscall %s\n", e->d_name,
                ReadSmall(t + "/comm").c_str(),
                close == std::string::npos ? '?' : stat[std::min(close + 2, stat.size() - 1)],
                ReadSmall(t + "/wchan").c_str(), ReadSmall(t + "/syscall").c_str());
      }
      closedir(d);
    }
    if (system("command -v gdb >/dev/null 2>&1") != 0) {
      fprintf(stderr, "   (no stacks: gdb is not installed)\n");
      continue;
    }
    const std::string gdb = "timeout 30 gdb -p " + std::to_string(p) +
                            " -batch -ex 'thread apply all bt 20' 2>/dev/null | grep -E "
                            "'^(#|Thread)' >&2";
    if (system(gdb.c_str()) != 0) fprintf(stderr, "   (gdb gave no stacks)\n");
  }
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
      DescribeHang(pid);
      for (pid_t p : ProcessTree(pid)) kill(p, SIGKILL);
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
