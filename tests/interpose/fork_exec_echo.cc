// fork_exec_echo: forks, execs /bin/echo in the child and checks its output
// and exit status in the parent: what an engine's subprocess module does.
// Prints one line and exits 0 when the child behaved, 1 otherwise.
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <string>

int main() {
  int fds[2];
  if (pipe(fds) != 0) return 1;
  pid_t pid = fork();
  if (pid < 0) return 1;
  if (pid == 0) {
    dup2(fds[1], STDOUT_FILENO);
    close(fds[0]);
    execl("/bin/echo", "echo", "child-ok", static_cast<char*>(nullptr));
    _exit(127);
  }
  close(fds[1]);
  std::string out;
  char buf[256];
  ssize_t n;
  while ((n = read(fds[0], buf, sizeof buf)) > 0) out.append(buf, static_cast<size_t>(n));
  int status = 0;
  waitpid(pid, &status, 0);
  bool ok = out == "child-ok\n" && WIFEXITED(status) && WEXITSTATUS(status) == 0;
  printf("fork_exec_echo: child said \"%.*s\", exit status %d: %s\n",
         static_cast<int>(out.size() ? out.size() - 1 : 0), out.c_str(),
         WIFEXITED(status) ? WEXITSTATUS(status) : -1, ok ? "ok" : "WRONG");
  return ok ? 0 : 1;
}
