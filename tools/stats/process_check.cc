// Process liveness and pid-reuse checks (see process_check.h).
#include "tools/stats/process_check.h"

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "runtime/proc_stat.h"

namespace kvtier::stats {

bool PidExists(int32_t pid) {
  if (pid <= 0) return false;
  return kill(pid, 0) == 0 || errno == EPERM;
}

uint64_t ProcessStartTicks(int32_t pid) {
  char path[64];
  snprintf(path, sizeof path, "/proc/%d/stat", static_cast<int>(pid));
  return ProcStartTicks(path);
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
