// Process liveness and pid-reuse checks (see process_check.h).
#include "tools/stats/process_check.h"

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace kvtier::stats {

bool PidExists(int32_t pid) {
  if (pid <= 0) return false;
  return kill(pid, 0) == 0 || errno == EPERM;
}

uint64_t ProcessStartTicks(int32_t pid) {
  char path[64];
  snprintf(path, sizeof path, "/proc/%d/stat", static_cast<int>(pid));
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return 0;
  char buf[1024];
  ssize_t n = read(fd, buf, sizeof buf - 1);
  close(fd);
  if (n <= 0) return 0;
  buf[n] = '\0';
  // The command (field 2) may hold spaces and ')': fields resume after the
  // last ')'. Field 3 follows it; starttime is field 22.
  const char* p = strrchr(buf, ')');
  if (p == nullptr) return 0;
  for (int field = 3; field <= 22; ++field) {  // the space before each field
    p = strchr(p + 1, ' ');
    if (p == nullptr) return 0;
  }
  return strtoull(p + 1, nullptr, 10);
}

Liveness CheckProcess(int32_t pid, uint64_t start_ticks) {
  if (!PidExists(pid)) return Liveness::kDead;
  if (start_ticks == 0) return Liveness::kAlive;
  const uint64_t now_ticks = ProcessStartTicks(pid);
  // 0: /proc hides it (another pid namespace, hidepid): trust the pid.
  if (now_ticks == 0 || now_ticks == start_ticks) return Liveness::kAlive;
  return Liveness::kReused;
}

}  // namespace kvtier::stats
